"""pass@k with the unbiased estimator of Chen et al. (2021), and bootstrap intervals over seeds
and problems.

With n samples per problem of which c are correct, pass@k = 1 - C(n-c, k) / C(n, k) is the
chance that at least one of k samples drawn without replacement is correct. The benchmark
reports its mean over test problems, with a percentile bootstrap interval. One evaluation's
interval resamples the problems: the uncertainty that comes from which problems happen to be in
the test set. Over several training seeds the interval is two-level, the hierarchical bootstrap
rliable (Agarwal et al., 2021) made standard: each resample draws the seeds with replacement,
then the problems, so it holds the variation between training runs as well; with one seed it is
the problem bootstrap.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

DEFAULT_BOOTSTRAP_SAMPLES = 1000
DEFAULT_CONFIDENCE = 0.95


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem with `c` correct out of `n` samples.

    Uses the product form 1 - prod_{i=n-c+1}^{n} (1 - k/i), which equals 1 - C(n-c,k)/C(n,k)
    but never forms the binomials, whose size overflows floats near n = 1000.
    """
    if not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n, got c={c}, n={n}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def default_ks(n: int) -> list[int]:
    """k = 1, 2, 4, ... up to n, plus n itself when n is not a power of two."""
    if n < 1:
        raise ValueError(f"pass@k needs n >= 1 samples per problem, got n={n}")
    ks = [2**i for i in range(n.bit_length())]
    return ks if ks[-1] == n else ks + [n]


def pass_at_k_curve(
    correct: Sequence[int],
    n: int,
    ks: Sequence[int] | None = None,
    bootstrap_samples: int = DEFAULT_BOOTSTRAP_SAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> list[dict]:
    """pass@k averaged over problems, for each k, with a bootstrap interval.

    `correct[i]` is the number of correct samples out of `n` for problem i. Returns one row
    `{"k", "value", "low", "high"}` per k, in increasing k. All ks share the same resamples,
    so the curve's intervals are consistent with each other.
    """
    # Plain ints, so that rows built from numpy inputs still serialise to JSON.
    ks = sorted({int(k) for k in ks}) if ks is not None else default_ks(int(n))
    per_problem = np.array([[pass_at_k(n, c, k) for c in correct] for k in ks], dtype=float)
    per_problem = per_problem.reshape(len(ks), len(correct))
    value, low, high = _bootstrap_means([per_problem[:, None, :]], [1.0], bootstrap_samples, confidence, seed)
    return [
        {"k": k, "value": float(v), "low": float(lo), "high": float(hi)}
        for k, v, lo, hi in zip(ks, value, low, high)
    ]


def mean_ci(
    values,
    bootstrap_samples: int = DEFAULT_BOOTSTRAP_SAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> dict:
    """Mean of per-problem `values` (e.g. greedy correctness, 0/1) with a bootstrap interval: one
    value per problem, or a (seeds x problems) matrix for the two-level bootstrap."""
    return combination_ci([values], [1.0], bootstrap_samples, confidence, seed)


def combination_ci(
    terms: Sequence,
    coefficients: Sequence[float],
    bootstrap_samples: int = DEFAULT_BOOTSTRAP_SAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> dict:
    """sum_i coefficients[i] x mean(terms[i]), with its two-level bootstrap interval.

    Each term is one method's scores on the same problems, in the same order: a (seeds x
    problems) matrix, or one value per problem for a single seed. A paired difference a - b is
    ([a, b], [1, -1]). Every resample draws the problems once, for all terms, since the terms are
    compared problem by problem; and each term's seeds on their own, since one method's seed k
    and another's are separate training runs that share nothing but a number (nor need the
    methods have the same seeds).
    """
    if len(terms) != len(coefficients) or not terms:
        raise ValueError("need one coefficient per term, and at least one term")
    matrices = [np.atleast_2d(np.asarray(term, dtype=float))[None] for term in terms]
    if len({m.shape[2] for m in matrices}) > 1:
        raise ValueError(f"terms are on different numbers of problems: {[m.shape[2] for m in matrices]}")
    value, low, high = _bootstrap_means(matrices, coefficients, bootstrap_samples, confidence, seed)
    return {"value": float(value[0]), "low": float(low[0]), "high": float(high[0])}


def _bootstrap_means(
    terms: list[np.ndarray], coefficients: Sequence[float], bootstrap_samples: int, confidence: float, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row, sum_i c_i x (mean over seeds and problems of terms[i]), with percentile bootstrap bounds.

    Each term is a (rows, seeds, problems) array. A resample picks the problems with replacement
    (once, for every term), then each term's seeds with replacement, and is drawn as how many
    times each problem and each seed is picked: all resamples of all rows are then matrix
    products instead of a (rows x resamples x seeds x problems) gather. One seed draws no seed
    resample that matters, so the interval is the problem bootstrap's, resample for resample.
    """
    num_problems = terms[0].shape[2]
    if num_problems == 0:
        raise ValueError("cannot average over zero problems")
    if any(term.shape[1] == 0 for term in terms):
        raise ValueError("cannot average over zero seeds")
    if bootstrap_samples < 1:
        raise ValueError(f"bootstrap_samples must be >= 1, got {bootstrap_samples}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    rng = np.random.default_rng(seed)
    problem_picks = rng.multinomial(num_problems, np.full(num_problems, 1 / num_problems), size=bootstrap_samples)
    value, resampled_means = 0.0, 0.0
    for coefficient, term in zip(coefficients, terms):
        seeds = term.shape[1]
        seed_picks = rng.multinomial(seeds, np.full(seeds, 1 / seeds), size=bootstrap_samples)
        per_seed = term @ problem_picks.T / num_problems  # rows x seeds x resamples
        resampled_means = resampled_means + coefficient * np.einsum("rsb,bs->rb", per_seed, seed_picks) / seeds
        value = value + coefficient * term.mean(axis=(1, 2))
    tail = (1 - confidence) / 2
    low, high = np.quantile(resampled_means, [tail, 1 - tail], axis=1)
    # Rounding (or a degenerate resample set) can put the point estimate an ulp outside its
    # bounds; widen so that "value [low, high]" always reads as an interval around the value.
    return value, np.minimum(low, value), np.maximum(high, value)
