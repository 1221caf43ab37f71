"""pass@k with the unbiased estimator of Chen et al. (2021), and one evaluation's bootstrap
intervals over its test problems.

With n samples per problem of which c are correct, pass@k = 1 - C(n-c, k) / C(n, k) is the
chance that at least one of k samples drawn without replacement is correct. An evaluation reports
its mean over test problems with a percentile bootstrap interval over the problems: the
uncertainty that comes from which problems happen to be in the test set. Over several training
seeds, where the seeds and problems are crossed, the report's intervals are reports/intervals.py's.
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
    value, low, high = _bootstrap_means(per_problem, bootstrap_samples, confidence, seed)
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
    """Mean of one evaluation's per-problem `values` (e.g. greedy correctness, 0/1) with a bootstrap
    interval over the problems."""
    values = np.asarray(values, dtype=float)
    if values.ndim != 1:
        raise ValueError(f"mean_ci takes one value per problem, got shape {values.shape}")
    value, low, high = _bootstrap_means(values[None, :], bootstrap_samples, confidence, seed)
    return {"value": float(value[0]), "low": float(low[0]), "high": float(high[0])}


def _bootstrap_means(
    values: np.ndarray, bootstrap_samples: int, confidence: float, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of a (rows x problems) array, the mean over problems with percentile bootstrap
    bounds. A resample is drawn as how many times each problem is picked, so that all resamples of
    all rows are one matrix product; every row shares the same resamples."""
    num_problems = values.shape[1]
    if num_problems == 0:
        raise ValueError("cannot average over zero problems")
    if bootstrap_samples < 1:
        raise ValueError(f"bootstrap_samples must be >= 1, got {bootstrap_samples}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    rng = np.random.default_rng(seed)
    picks = rng.multinomial(num_problems, np.full(num_problems, 1 / num_problems), size=bootstrap_samples)
    resampled = values @ picks.T / num_problems  # rows x resamples
    value = values.mean(axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(resampled, [tail, 1 - tail], axis=1)
    # Rounding (or a degenerate resample set) can put the point estimate an ulp outside its
    # bounds; widen so that "value [low, high]" always reads as an interval around the value.
    return value, np.minimum(low, value), np.maximum(high, value)
