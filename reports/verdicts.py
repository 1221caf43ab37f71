"""Verdicts: the words a claim check gives, the rule that turns a comparison's test into one (`Threshold`,
Holm's correction over the family), and the `Evidence` every comparison reads.

A verdict is one of:

- supported / not supported: by the claim's rule (`Threshold`) on the comparison's test, and only
  where the run could tell. Each comparison gives a test of the claim's quantity (a crossed seeds x
  problems estimate from reports/intervals.py, a t-test over seeds of a log cost ratio, or a sign
  test over paired runs), and the rule's two one-sided tests, 'above the support bar' and 'at or
  below the refute bar', give the claim's p-value. The claims one run tests are one family: Holm's
  step-down method holds the chance that any definite verdict is wrong at `report.family_alpha`;
- inconclusive at this scale, with the reason: the test does not clear its Holm level either way,
  or the run could not tell however its numbers came out. It could not tell when a compared method
  has fewer training seeds than `report.min_seeds`; when a precondition of the comparison fails
  (GRPO did not move off the base model, a budget other than the claim's, no gain to recover, no
  decrease of the baseline's loss); when its scores do not vary at all (an interval of no width is
  not certainty); or when the claim needs a setting no run of this suite has (a speed-up across
  cluster sizes). Each row gives the smallest effect the run could have detected at 80% power (from
  the observed variance), beside the size the claim turns on;
- not run: a method the claim compares was not run on the claim's task;
- missing data: the methods ran but a metric the comparison needs is not in the result files
  (say, a training history without `heldout_loss`), named in the row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from core.config import ReportConfig
from reports.intervals import Estimate
from reports.names import display_name
from reports.scores import GREEDY, PASS, Intervals, ProblemScores, paired_difference, seed_matrix

SUPPORTED = "supported"
NOT_SUPPORTED = "not supported"
INCONCLUSIVE = "inconclusive at this scale"
NOT_RUN = "not run"
MISSING = "missing data"


@dataclass(frozen=True)
class Threshold:
    """The verdict rule on the claim's quantity: not supported when it lies at or below `refute`
    (checked first), supported when it lies above `support`, each shown by its one-sided test;
    inconclusive otherwise.

    For a parity or recovery margin both bars are 0. For a gain of stated size the support bar is
    0 and the refute bar is half the paper's effect: a gain shown above 0 whose interval still
    reaches half the paper's size supports the claim, and one whose interval lies wholly below half
    of it does not (which includes no gain at all). Between the bars of a cost ratio lies a band of
    values too small to support the claim and too large to refute it."""

    support: float
    refute: float
    statement: str
    """The rule in words, as the report states it."""
    effect: float | None = None
    """The distance between the values the test must tell apart, in the test's units (a share of
    problems): an inconclusive row compares the smallest effect the run could detect with it."""


def decide(rule: Threshold, low: float, high: float) -> str:
    """The verdict of `rule` on an interval [low, high]: not supported when it lies at or below
    the refute bar, supported when it lies above the support bar, inconclusive otherwise."""
    if not low <= high:
        raise ValueError(f"not an interval: [{low}, {high}]")
    if high <= rule.refute:
        return NOT_SUPPORTED
    if low > rule.support:
        return SUPPORTED
    return INCONCLUSIVE


def resolution(problems: int, confidence: float) -> float:
    """The smallest difference `problems` test problems can show when none was seen: the exact
    (Clopper-Pearson) upper bound 1 - ((1 - confidence) / 2)^(1 / problems) on the share of
    problems on which two methods differ (37 points for 8 problems, 1.8 for 200, 0.3 for 1,319)."""
    return 1 - ((1 - confidence) / 2) ** (1 / problems)


class SignTest:
    """Paired runs each measured once (a queries ratio per run): the sign test of their median. A
    bar is cleared when more runs lie beyond it than a fair coin would give: p = P(Bin(n, 1/2) >=
    runs beyond it). All of 3 runs beyond a bar is p = 0.125, which decides nothing: 6 all beyond
    it are needed at 5% two-sided."""

    def __init__(self, values) -> None:
        self.values = np.asarray(values, dtype=float)

    def p_above(self, bar: float) -> float:
        return float(stats.binom.sf(int(np.sum(self.values > bar)) - 1, len(self.values), 0.5))

    def p_below(self, bar: float) -> float:
        return float(stats.binom.sf(int(np.sum(self.values <= bar)) - 1, len(self.values), 0.5))

    def interval(self, confidence: float) -> tuple[float, float]:
        """The range of the runs (what the row shows)."""
        return float(self.values.min()), float(self.values.max())


class LogScale:
    """A cost ratio per seed, tested as the t-test of its logarithm over the seeds (a ratio of
    measured costs is noise-free in practice, so few seeds decide it; one seed decides nothing)."""

    def __init__(self, ratios) -> None:
        logs = np.log(np.asarray(ratios, dtype=float))
        n = len(logs)
        spread = float(np.std(logs, ddof=1)) / math.sqrt(n) if n > 1 else math.inf
        self.estimate = Estimate(float(logs.mean()), spread, float(max(n - 1, 1)), n)

    def p_above(self, bar: float) -> float:
        return self.estimate.p_above(math.log(bar))

    def p_below(self, bar: float) -> float:
        return self.estimate.p_below(math.log(bar))

    def interval(self, confidence: float) -> tuple[float, float]:
        low, high = self.estimate.interval(confidence)
        return float(np.exp(low)), float(np.exp(high))


@dataclass(frozen=True)
class Finding:
    """What a comparison measured: the test its rule reads, what the run could tell, and the row's text."""

    test: Estimate | SignTest | LogScale
    """p_above(bar), p_below(bar) and interval(confidence) of the claim's quantity."""
    ours: str
    """Our figure in words, with its interval."""
    scale: str
    """What it was measured on: model, task, problems, samples, seeds."""
    seeds: int
    """The fewest training seeds any compared trained method contributed."""
    doubts: tuple[str, ...] = ()
    """Preconditions of the comparison that failed, in words: each makes the verdict inconclusive."""


class Unavailable(Exception):
    """The comparison cannot give the rule a test: the verdict it reads instead, and why."""

    def __init__(self, verdict: str, reason: str, ours: str = "—", scale: str = "—") -> None:
        super().__init__(reason)
        self.verdict, self.reason, self.ours, self.scale = verdict, reason, ours, scale


@dataclass
class Evidence:
    """Everything a comparison reads, all from the summary `collect` wrote."""

    results: list[dict]
    """Evaluation metrics, one per (method, task, seed)."""
    scores: ProblemScores
    histories: list[dict] = field(default_factory=list)
    """Training histories: {method, task, seed, history, stages}."""
    header: dict = field(default_factory=dict)
    intervals: Intervals = field(default_factory=Intervals)

    def setting(self, key: str):
        """A `report` setting of the run's config (ReportConfig), its default where the summary has none."""
        return (self.header.get("report") or {}).get(key, getattr(ReportConfig, key))

    @property
    def min_seeds(self) -> int:
        """Training seeds per compared method that a definite verdict needs (the config's `report.min_seeds`)."""
        return int(self.setting("min_seeds"))

    def ran(self, method: str, task: str) -> bool:
        return any(r["method"] == method and r["task"] == task for r in self.results)

    def require(self, methods, task: str) -> None:
        for method in methods:
            if not self.ran(method, task):
                raise Unavailable(NOT_RUN, f"{display_name(method)} was not run on {task}")

    def runs(self, method: str, task: str) -> list[dict]:
        return [r for r in self.results if r["method"] == method and r["task"] == task]

    def history(self, method: str, task: str, seed: int) -> list[dict] | None:
        return next((h["history"] for h in self.histories
                     if (h["method"], h["task"], h["seed"]) == (method, task, seed)), None)

    def scale(self, task: str, methods, what: str) -> str:
        seeds = sorted({r["seed"] for m in methods for r in self.runs(m, task)})
        problems = sorted({r["problems"] for m in methods for r in self.runs(m, task)})
        model = self.header.get("model", "—")
        return (f"{model}; {task}: {'/'.join(map(str, problems)) or '—'} test problems, {what}; "
                f"{len(seeds)} seed{'s' if len(seeds) != 1 else ''}")

    def greedy(self, methods, task: str) -> list[np.ndarray]:
        """Each method's (seeds x problems) greedy scores on the problems all of them share."""
        for m in methods:
            if not self.scores.has(m, task):
                raise Unavailable(MISSING, f"no per-problem scores (completions.jsonl) of {display_name(m)} on {task}")
        per_seed = [self.scores.per_seed(m, task, GREEDY) for m in methods]
        shared = [p for p in per_seed[0] if all(p in scores for scores in per_seed)]
        if len(shared) < 2:
            raise Unavailable(MISSING, f"{', '.join(map(display_name, methods))} share fewer than two test problems "
                                       f"on {task}")
        return [seed_matrix(scores, shared) for scores in per_seed]

    def difference(self, method: str, baseline: str, task: str, metric: str) -> tuple[dict, int, dict, dict]:
        """`method` minus `baseline` on their shared problems of `task` (paired_difference), greedy
        or at pass@k with k the samples per problem both drew: (the difference, k, each one's
        per-seed scores)."""
        for m in (method, baseline):
            if not self.scores.has(m, task):
                raise Unavailable(MISSING, f"no per-problem scores (completions.jsonl) of {display_name(m)} on {task}")
        k = 1
        if metric == PASS:
            k = min(self.scores.samples(method, task), self.scores.samples(baseline, task))
            if k < 1:
                raise Unavailable(MISSING, f"no sampled completions on {task}")
        a = self.scores.per_seed(method, task, metric, k)
        b = self.scores.per_seed(baseline, task, metric, k)
        diff = paired_difference(a, b, self.intervals, (method, baseline))
        if diff is None:
            raise Unavailable(MISSING, f"{display_name(method)} and {display_name(baseline)} share no test problems "
                                       f"on {task}")
        return diff, k, a, b


def plural(count: int, noun: str) -> str:
    """`count` `noun`s in words, singular for one: '1 training seed', '3 paired runs'."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def holm(p_values, alpha: float) -> list[tuple[int, float, bool]]:
    """Holm's step-down method over a family of p-values: for each, in the order given, (its rank
    from the smallest p, 1-based; the level it faces, alpha / (m - rank + 1); whether it is
    rejected: it and every smaller p cleared their levels)."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    out, going = [None] * len(p_values), True
    for rank, index in enumerate(order, start=1):
        level = alpha / (len(p_values) - rank + 1)
        going = going and p_values[index] <= level
        out[index] = (rank, level, going)
    return out
