"""Intervals for scores over training seeds x test problems, the design every comparison of the
report has: each seed of a method answers the same test problems, so seeds and problems are
crossed, and two methods compared on the same problems are paired by problem.

A method's score on problem p in seed s is y[s, p] = mu + a_p + b_s + e_sp: how hard the problem is
(a_p), how good the training run happened to be (b_s), and what is left. The estimate of mu is the
grand mean, whose variance over new problems and new training runs is

    Var = sigma_a^2 / P + sigma_b^2 / S + sigma_e^2 / (S P),

estimated without bias from the two-way analysis of variance (Miller, "Adding Error Bars to Evals",
section on clustered and repeated measurements; the textbook crossed random-effects model):
MS_P / (S P), the variance of the problems' seed means over P, holds the first and the last term,
and (MS_S - MS_E) / (S P) the seed term, MS_S the seeds' mean square and MS_E the interaction's.
A combination of methods, sum_m c_m y_m (a paired difference, the margin of a non-inferiority
test), is the same with the problems' combined score in place of one method's; each method's seed
term is its own, and methods whose seed k shares work (ESSA's seed k starts from SFT's seed k) are
combined seed by seed first, so that what they share cancels.

The seed term is the unbiased (MS_S - MS_E) / (S P), negative where the seeds agree more than
chance alone would have them: cutting it at 0 biases the variance upwards whenever the seeds hardly
differ, and such intervals covered 97-98% in simulation. Only a guard bounds the total from below,
at half the problem term, lest problems that barely differ give an interval of almost no width.
With three seeds the seed term has two degrees of freedom, and two things follow. The interval is
Student's t with Satterthwaite's degrees of freedom, not a normal one. And a positive seed term is
made median-unbiased, scaled by nu / (median of chi^2_nu) with nu the seeds' degrees of freedom,
all methods' together (1.44 for one method's 3 seeds, 1.19 for two methods' 3 each): an estimate
with few degrees of freedom falls below its expectation more often than not (63% of the time with
2), and when it does the interval is both too narrow and given too many degrees of freedom; plain
Satterthwaite intervals covered 92-93% in simulation where the seeds dominate. So made, every cell
of the calibration benchmark (`python -m benchmarks.calibration`, its table in the README) covers
93-97%. The earlier two-level bootstrap (seeds, then problems, resampled independently) counted the
seeds' share of the problem noise twice and the seed variance too small: 99% coverage with no seed
variance, 84% with 3 points of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

DEFAULT_CONFIDENCE = 0.95


@dataclass(frozen=True)
class Estimate:
    """A combination of mean scores with its standard error and degrees of freedom (arrays of the
    same shape when estimated for a batch of simulated runs; floats otherwise)."""

    value: float | np.ndarray
    se: float | np.ndarray
    df: float | np.ndarray
    problems: int

    def quantile(self, level: float) -> float | np.ndarray:
        return stats.t.ppf(level, self.df)

    def interval(self, confidence: float = DEFAULT_CONFIDENCE) -> tuple:
        """The two-sided interval at `confidence`: value -/+ t quantile x se."""
        half = self.quantile(0.5 + confidence / 2) * self.se
        return self.value - half, self.value + half

    def p_above(self, bar: float) -> float | np.ndarray:
        """One-sided p-value of the null 'the true value is at or below `bar`' (small: it is above)."""
        return _p(self.value - bar, self.se, self.df)

    def p_below(self, bar: float) -> float | np.ndarray:
        """One-sided p-value of the null 'the true value is at or above `bar`' (small: it is below)."""
        return _p(bar - self.value, self.se, self.df)

    def detectable(self, alpha: float, power: float = 0.8) -> float | np.ndarray:
        """The smallest effect a test at level `alpha` on this estimate finds with probability `power`."""
        return detectable(self.se, self.df, alpha, power)


def detectable(se, df, alpha: float, power: float = 0.8):
    """The smallest true distance from a bar that a two-sided test at level `alpha`, with standard
    error `se` on `df` degrees of freedom, finds with probability `power`: (t_{1-alpha/2} +
    t_power) x se. The one calculation behind the report's 'detectable effect' (with the observed
    variance) and `nograd plan`'s power table (with the design's, reports/power.py)."""
    return (stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df)) * se


def _p(distance, se, df):
    """P(T_df >= distance / se), and 0 or 1 where the standard error is 0 (all scores equal)."""
    distance, se = np.asarray(distance, dtype=float), np.asarray(se, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(se > 0, stats.t.sf(distance / np.where(se > 0, se, 1.0), df), np.where(distance > 0, 0.0, 1.0))
    return float(p) if p.ndim == 0 else p


def median_unbiased(df):
    """The factor that makes a variance estimate with `df` degrees of freedom median-unbiased: df
    over the median of chi^2_df (1.44 for 2, 1.08 for 9, 1.007 for 100)."""
    return df / stats.chi2.median(df)


def crossed(terms: Sequence, coefficients: Sequence[float], groups: Sequence | None = None) -> Estimate:
    """sum_m coefficients[m] x mean(terms[m]), with its crossed-design standard error.

    Each term is one method's scores on the same problems in the same order: a (seeds x problems)
    matrix, one value per problem for one seed, or a batch of either with leading axes (simulated
    runs). `groups` labels the terms: terms with the same label share seeds row by row (seed k of
    one is built on seed k of the other) and must have as many; by default each term is its own.
    A term with one seed contributes no seed variance: one training run cannot show how much the
    next would differ, which the claim checks' `min_seeds` stands for."""
    if len(terms) != len(coefficients) or not terms:
        raise ValueError("need one coefficient per term, and at least one term")
    groups = list(range(len(terms))) if groups is None else list(groups)
    if len(groups) != len(terms):
        raise ValueError("need one group label per term")
    arrays = [np.asarray(term, dtype=float) for term in terms]
    arrays = [a[..., None, :] if a.ndim == 1 else a for a in arrays]
    problems = {a.shape[-1] for a in arrays}
    if len(problems) > 1:
        raise ValueError(f"terms are on different numbers of problems: {sorted(problems)}")
    (num_problems,) = problems
    if num_problems < 2:
        raise ValueError(f"need at least 2 problems for an interval, got {num_problems}")
    if any(a.shape[-2] == 0 for a in arrays):
        raise ValueError("cannot average over zero seeds")
    combined: dict = {}
    for label, coefficient, array in zip(groups, coefficients, arrays):
        if label in combined and combined[label].shape[-2] != array.shape[-2]:
            raise ValueError(f"terms paired as group {label!r} have different numbers of seeds")
        combined[label] = combined.get(label, 0.0) + coefficient * array
    per_problem = sum(w.mean(axis=-2) for w in combined.values())
    value = per_problem.mean(axis=-1)
    problem_part = per_problem.var(axis=-1, ddof=1) / num_problems
    seed_part = seed_denominator = 0.0
    seed_df = 0
    for w in combined.values():
        seeds = w.shape[-2]
        if seeds < 2:
            continue
        nu = seeds - 1
        seed_means, problem_means = w.mean(axis=-1), w.mean(axis=-2)
        grand = seed_means.mean(axis=-1)
        residual = w - seed_means[..., :, None] - problem_means[..., None, :] + grand[..., None, None]
        ms_seeds = num_problems * seed_means.var(axis=-1, ddof=1)
        ms_error = (residual ** 2).sum(axis=(-2, -1)) / (nu * (num_problems - 1))
        scale = 1.0 / (num_problems * seeds)
        seed_part = seed_part + (ms_seeds - ms_error) * scale
        seed_denominator = seed_denominator + (ms_seeds * scale) ** 2 / nu + (ms_error * scale) ** 2 / (
            nu * (num_problems - 1))
        # Seeds that all score alike (the untrained base model's evaluations) have no seed term to estimate.
        seed_df = seed_df + np.where(np.ptp(w, axis=-2).max(axis=-1) > 0, nu, 0)
    # A positive seed term made median-unbiased at the degrees of freedom all methods' seeds have together.
    factor = np.where(np.asarray(seed_df) > 0, median_unbiased(np.maximum(seed_df, 1)), 1.0)
    seed_part = np.where(np.asarray(seed_part) > 0, factor * np.asarray(seed_part), seed_part)
    variance = np.maximum(problem_part + seed_part, problem_part / 2)
    # Satterthwaite's degrees of freedom, counting the seed term where it adds variance (a negative
    # term in his formula can drive them towards 0, an interval of any width).
    denominator = problem_part ** 2 / (num_problems - 1) + np.where(seed_part > 0, factor ** 2 * seed_denominator, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where(denominator > 0, variance ** 2 / np.where(denominator > 0, denominator, 1.0), np.inf)
    se = np.sqrt(variance)
    if np.ndim(value) == 0:
        return Estimate(float(value), float(se), float(df), num_problems)
    return Estimate(value, se, df, num_problems)


def ratio_interval(terms: Sequence, numerator: Sequence[float], denominator: Sequence[float],
                   confidence: float = DEFAULT_CONFIDENCE, groups: Sequence | None = None,
                   ) -> tuple[float, float] | None:
    """Fieller's interval for the ratio of two combinations of the same terms, N / D: the values r
    for which the interval of N - r D holds 0. None where it is unbounded, which happens when D's
    own interval holds 0 (nothing to divide by). Read this way, 'the interval of N - f D lies above
    0' and 'f lies below the ratio's interval' are the same statement."""
    numerator, denominator = np.asarray(numerator, dtype=float), np.asarray(denominator, dtype=float)
    low_d = crossed(terms, denominator, groups).interval(confidence)[0]
    if not low_d > 0:
        return None

    def bound(ratio: float, side: int) -> float:
        return crossed(terms, numerator - ratio * denominator, groups).interval(confidence)[side]

    estimate = crossed(terms, numerator, groups).value / crossed(terms, denominator, groups).value
    span = 1.0
    while bound(estimate - span, 0) <= 0 or bound(estimate + span, 1) >= 0:
        span *= 2
    low = optimize.brentq(lambda r: bound(r, 0), estimate - span, estimate, xtol=1e-9)
    high = optimize.brentq(lambda r: bound(r, 1), estimate, estimate + span, xtol=1e-9)
    return float(low), float(high)
