"""Per-problem scores and paired differences between methods on the same test problems.

Each evaluation's `completions.jsonl` holds every greedy and sampled completion with its score.
`collect` reduces it to one row per problem (greedy correctness, correct samples out of n), and
the report compares two methods problem by problem: a method's per-problem score is its mean
over seeds, the difference is taken on the problems both were scored on, and its interval is
reports/intervals.py's crossed seeds x problems interval. Pairing by problem removes the part of the
uncertainty that comes from which problems are in the test set and is shared by both methods;
each method's seed term keeps the part that comes from which training runs happened to be drawn,
and methods whose seed k shares work (header `paired_seeds`) are compared seed by seed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evals.passk import pass_at_k
from reports.intervals import DEFAULT_CONFIDENCE, crossed

GREEDY = "greedy"
PASS = "pass@k"


def read_completions(path: Path, greedy_texts: dict[str, str] | None = None) -> dict:
    """One evaluation's per-problem scores: `{"n": samples per problem, "problems": {id: [greedy
    correct (0/1), correct samples]}}`, problems in the order they were evaluated. Given a dict
    as `greedy_texts`, it also gets each problem's greedy completion, in the same pass."""
    problems: dict[str, list[int]] = {}
    samples: dict[str, int] = {}
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            if not line.strip():
                continue
            record = json.loads(line)
            row = problems.setdefault(record["problem"], [0, 0])
            if record["mode"] == "greedy":
                row[0] = int(record["correct"])
                if greedy_texts is not None:
                    greedy_texts[record["problem"]] = record["text"]
            else:
                row[1] += int(record["correct"])
                samples[record["problem"]] = samples.get(record["problem"], 0) + 1
    counts = set(samples.values())
    if len(counts) > 1:
        raise ValueError(f"{path}: problems have different numbers of samples ({sorted(counts)})")
    return {"n": counts.pop() if counts else 0, "problems": problems}


@dataclass(frozen=True)
class Intervals:
    """How every interval of the report is made: reports/intervals.py's crossed seeds x problems
    interval at `confidence`, seeds paired where two methods' seed k share work."""

    confidence: float = DEFAULT_CONFIDENCE
    paired: tuple[tuple[str, str], ...] = ()
    """Pairs of methods whose seed k shares work (ESSA's seed k starts from SFT's seed k)."""

    def mean(self, values) -> dict:
        """Mean of one value per problem, or of a (seeds x problems) matrix."""
        return self.combination([values], [1.0])

    def combination(self, terms, coefficients, methods=None) -> dict:
        """sum_i c_i x mean(terms[i]) over the same problems, with its interval and its `Estimate`;
        `methods` names the terms, so that paired methods with the same seeds are paired."""
        estimate = crossed(terms, coefficients, self.groups(terms, methods))
        low, high = estimate.interval(self.confidence)
        # Scores lie in [0, 1], so the combination lies between these, and so does its truth.
        floor, ceiling = sum(min(c, 0.0) for c in coefficients), sum(max(c, 0.0) for c in coefficients)
        return {"value": estimate.value, "low": float(np.clip(low, floor, estimate.value)),
                "high": float(np.clip(high, estimate.value, ceiling)), "estimate": estimate}

    def groups(self, terms, methods) -> list[int] | None:
        """A label per term: the same for two paired methods that have the same number of seeds."""
        if not methods:
            return None
        labels = list(range(len(terms)))
        for i, a in enumerate(methods):
            for j, b in enumerate(methods[:i]):
                if ((a, b) in self.paired or (b, a) in self.paired) and np.shape(terms[i]) == np.shape(terms[j]):
                    labels[i] = labels[j]
        return labels


def paired_seeds(header: dict) -> tuple[tuple[str, str], ...]:
    """The pairs of methods whose seed k shares work, as `collect` recorded them."""
    return tuple(tuple(pair) for pair in header.get("paired_seeds") or ())


class ProblemScores:
    """Per-problem scores of every (method, task), per seed or as a mean over the seeds evaluated.

    Built from `collect`'s per-problem rows: `{"method", "task", "seed", "n", "problems": {id:
    [greedy, correct samples]}}`.
    """

    def __init__(self, rows: list[dict]) -> None:
        self._runs: dict[tuple[str, str], list[dict]] = {}
        for row in rows:
            self._runs.setdefault((row["method"], row["task"]), []).append(row)

    def has(self, method: str, task: str) -> bool:
        return (method, task) in self._runs

    def seeds(self, method: str, task: str) -> list[int]:
        return sorted(row["seed"] for row in self._runs.get((method, task), []))

    def samples(self, method: str, task: str) -> int:
        """Samples per problem (n); the smallest over seeds, should they differ."""
        return min((row["n"] for row in self._runs.get((method, task), [])), default=0)

    def per_seed(self, method: str, task: str, metric: str, k: int = 1, seeds=None) -> dict[str, np.ndarray]:
        """Problem id -> the metric on that problem in each seed (all, or those given; in seed
        order): greedy correctness, or the unbiased pass@k from its correct samples. Only problems
        every seed scored count."""
        runs = sorted((run for run in self._runs.get((method, task), []) if seeds is None or run["seed"] in seeds),
                      key=lambda run: run["seed"])
        if not runs:
            return {}
        shared = set.intersection(*(set(run["problems"]) for run in runs))
        out = {}
        for problem in runs[0]["problems"]:
            if problem not in shared:
                continue
            if metric == GREEDY:
                out[problem] = np.array([run["problems"][problem][0] for run in runs], dtype=float)
            else:
                out[problem] = np.array([pass_at_k(run["n"], run["problems"][problem][1], k) for run in runs])
        return out

    def values(self, method: str, task: str, metric: str, k: int = 1, seeds=None) -> dict[str, float]:
        """Problem id -> the metric on that problem averaged over seeds (see `per_seed`)."""
        return {p: float(v.mean()) for p, v in self.per_seed(method, task, metric, k, seeds).items()}


def seed_matrix(per_seed: dict[str, np.ndarray], problems) -> np.ndarray:
    """(seeds x problems) matrix of `per_seed` scores on the given problems, in their order."""
    return np.stack([per_seed[p] for p in problems], axis=1)


def paired_difference(a: dict[str, np.ndarray], b: dict[str, np.ndarray], intervals: Intervals,
                      methods: tuple[str, str] | None = None) -> dict | None:
    """Mean over shared problems of a - b (per-seed scores, as `ProblemScores.per_seed` gives them,
    of `methods`), with its crossed interval; None when fewer than two problems are shared."""
    shared = [problem for problem in a if problem in b]
    if len(shared) < 2:
        return None
    return {**intervals.combination([seed_matrix(a, shared), seed_matrix(b, shared)], [1.0, -1.0], methods),
            "problems": len(shared)}


# ---------------------------------------------------------------- training histories

SMOOTHING_SHARE = 0.1
"""Training curves are smoothed by a trailing mean over this share of their logged points."""
REWARD_KEYS = ("reward", "support_reward")
"""Step metrics read as a method's training reward, first found first (CoRP logs its centre's support reward)."""
QUERIES = "forward_equivalents"


def trailing_mean(values, share: float = SMOOTHING_SHARE) -> np.ndarray:
    """Mean of each value and the ones logged just before it, over a window of `share` of the
    points (at least 1): single steps are noisy minibatch estimates, their trend is not."""
    values = np.asarray(values, dtype=float)
    window = max(1, int(round(share * len(values))))
    sums = np.cumsum(np.insert(values, 0, 0.0))
    ends = np.arange(1, len(values) + 1)
    starts = np.maximum(ends - window, 0)
    return (sums[ends] - sums[starts]) / (ends - starts)


def training_curve(history: list[dict], metric: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(queries, values) of a step metric: 'loss', or 'reward' (the first of REWARD_KEYS logged);
    None when the history never logged it. Steps where it is missing or not finite are skipped."""
    keys = REWARD_KEYS if metric == "reward" else (metric,)
    key = next((k for k in keys if any(k in step for step in history)), None)
    if key is None:
        return None
    points = [(step[QUERIES], step[key]) for step in history
              if key in step and QUERIES in step and np.isfinite(step[key])]
    if not points:
        return None
    x, y = map(np.asarray, zip(*points))
    return x.astype(float), y.astype(float)
