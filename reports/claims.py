"""Claim checks: does each seed paper's headline claim hold, at the size it states, at the scale of this run?

Each claim is one declarative entry in CLAIMS: the paper, its figure (from
../shared/reference/METHODS.md), the comparison it needs and the rule that turns the comparison
into a verdict. `check_all` is the one function that applies them; no verdict is set by hand. A
verdict is one of:

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
from reports.intervals import Estimate, ratio_interval
from reports.names import display_name
from reports.scores import (
    GREEDY,
    PASS,
    Intervals,
    ProblemScores,
    paired_difference,
    seed_matrix,
    training_curve,
)

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


def _pp(value: float) -> str:
    return f"{100 * value:+.1f}"


def _interval(diff: dict) -> str:
    return f"{_pp(diff['value'])} pp [{_pp(diff['low'])}, {_pp(diff['high'])}]"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


WARM_START_KEYS = ("lora_rank", "lora_alpha", "target_modules", "sft_steps", "sft_batch_size", "sft_lr",
                   "sft_weight_decay", "self_samples", "self_temperature")
"""ESSA's warm-start settings, which its SFT control must share to be that warm start alone."""


def control_mismatch(header: dict, method: str, control: str) -> list[str]:
    """The warm-start settings (WARM_START_KEYS) on which `control`'s config in the summary header
    differs from `method`'s, each as 'key: control's value vs method's'."""
    configs = header.get("methods") or {}
    ours, theirs = configs.get(control) or {}, configs.get(method) or {}
    return [f"{key}: {ours.get(key, '—')} vs {theirs.get(key, '—')}" for key in WARM_START_KEYS
            if ours.get(key) != theirs.get(key)]


# ---------------------------------------------------------------- comparisons


@dataclass(frozen=True)
class PairedDifference:
    """`method` minus `baseline` on the same test problems of `task`, greedy accuracy or pass@k at
    the largest k both ran (k = n), each method averaged over its seeds, with its crossed interval.

    A gain claim says nothing where neither method moved: the comparison must be off the floor,
    `baseline` beating `floor` (the base model) in greedy accuracy on the task, its paired interval
    above 0. Greedy also for a pass@k claim: at large k RL commonly falls below the base model,
    which is no sign of an untrained comparison."""

    method: str
    baseline: str
    task: str
    metric: str = GREEDY
    floor: str = "base"

    def measure(self, evidence: Evidence) -> Finding:
        evidence.require((self.method, self.baseline), self.task)
        diff, k, a, b = evidence.difference(self.method, self.baseline, self.task, self.metric)
        name = "greedy accuracy" if self.metric == GREEDY else f"pass@{k}"
        shared = [p for p in a if p in b]
        ours = (f"{_interval(diff)} {name}: {display_name(self.method)} {_percent(a, shared)} vs "
                f"{display_name(self.baseline)} {_percent(b, shared)}")
        what = "greedy" if self.metric == GREEDY else f"n = {k} samples per problem, pass@{k}"
        seeds = min(len(evidence.scores.seeds(m, self.task)) for m in (self.method, self.baseline))
        doubt = _off_the_floor(evidence, self.baseline, self.floor, self.task)
        return Finding(diff["estimate"], ours, evidence.scale(self.task, (self.method, self.baseline), what), seeds,
                       (doubt,) if doubt else ())


def _off_the_floor(evidence: Evidence, baseline: str, floor: str, task: str) -> str | None:
    """Why `baseline` is not shown off `floor` in greedy accuracy on `task`; None where it is."""
    name, floor_name = display_name(baseline), display_name(floor)
    if not evidence.ran(floor, task):
        return f"{floor_name} was not run on {task}, so nothing shows that {name} moved off it"
    try:
        diff = evidence.difference(baseline, floor, task, GREEDY)[0]
    except Unavailable as unavailable:
        return f"cannot tell whether {name} moved off {floor_name}: {unavailable.reason}"
    if diff["low"] > 0:
        return None
    return (f"no method moved off the base model: {name} − {floor_name}, greedy accuracy on {task}, is "
            f"{_interval(diff)}, not above 0")


@dataclass(frozen=True)
class RetainedGain:
    """Parity with GRPO as non-inferiority on the share of GRPO's gain kept: the margin
    (method - base) - f (GRPO - base), f = `report.retained_share`, greedy accuracy on the problems
    all three share, with its crossed interval; above 0 exactly when the method keeps more than f
    of GRPO's gain over the base model. A method equal to the base model has margin -f (GRPO -
    base) < 0 whatever the scale, so it cannot read as a match.

    GRPO's own gain must be shown above 0 first. The row also gives the retained share with its
    Fieller interval (the shares whose margin interval holds 0), the equivalence reading (TOST: the
    90% interval of method - GRPO within +/- `equivalence`, from the paper's figures), and, with
    `control` (SFT, ESSA's warm start alone), how much of the method's result the control reaches
    and whether its warm-start settings are the method's (WARM_START_KEYS)."""

    method: str
    task: str
    equivalence: float
    """Delta of the TOST reading, a share of problems: the largest gap the paper's figures call a match."""
    baseline: str = "grpo"
    floor: str = "base"
    control: str | None = None

    def measure(self, evidence: Evidence) -> Finding:
        trio = (self.method, self.floor, self.baseline)
        evidence.require(trio, self.task)
        ours_, base, grpo = evidence.greedy(trio, self.task)
        f = float(evidence.setting("retained_share"))
        terms = [ours_, base, grpo]
        intervals = evidence.intervals
        margin = intervals.combination(terms, [1.0, -(1 - f), -f], trio)
        gain = intervals.combination([grpo, base], [1.0, -1.0], (self.baseline, self.floor))
        lift = intervals.combination([ours_, base], [1.0, -1.0], (self.method, self.floor))
        name, baseline = display_name(self.method), display_name(self.baseline)
        share = ratio_interval(terms, [1.0, -1.0, 0.0], [0.0, -1.0, 1.0], intervals.confidence,
                               intervals.groups(terms, trio))
        kept = (f"{name} keeps {lift['value'] / gain['value']:.0%} "
                + (f"[{share[0]:.0%}, {share[1]:.0%}]" if share else "(interval unbounded: GRPO's gain is not "
                                                                        "shown above 0)")
                if gain["value"] > 0 else f"{name}: no share of a gain to keep")
        equivalent = self._tost(evidence, ours_, grpo)
        ours = (f"margin over {f:.0%} of {baseline}'s gain {_interval(margin)}; {kept} of {baseline}'s gain "
                f"({name} {_interval(lift)} over the base model, {baseline} {_interval(gain)}); {equivalent}")
        if self.control is not None:
            ours += self._control(evidence)
        seeds = min(len(evidence.scores.seeds(m, self.task)) for m in (self.method, self.baseline))
        doubts = ()
        if not gain["low"] > 0:
            doubts = (f"no method moved off the base model: {baseline} − {display_name(self.floor)}, greedy accuracy "
                      f"on {self.task}, is {_interval(gain)}, not above 0",)
        return Finding(margin["estimate"], ours,
                       evidence.scale(self.task, trio, f"greedy, retained share f = {f:g}"), seeds, doubts)

    def _tost(self, evidence: Evidence, ours_: np.ndarray, grpo: np.ndarray) -> str:
        """The equivalence reading: two one-sided tests at the report's level, as the 1 - 2 alpha interval."""
        alpha = 1 - evidence.intervals.confidence
        diff = evidence.intervals.combination([ours_, grpo], [1.0, -1.0], (self.method, self.baseline))
        low, high = diff["estimate"].interval(1 - 2 * alpha)
        inside = -self.equivalence < low and high < self.equivalence
        return (f"equivalence (TOST, ±{100 * self.equivalence:g} pp): {display_name(self.method)} − "
                f"{display_name(self.baseline)} {_pp(diff['value'])} pp, {1 - 2 * alpha:.0%} interval "
                f"[{_pp(low)}, {_pp(high)}], {'inside' if inside else 'not inside'} ±{100 * self.equivalence:g} pp")

    def _control(self, evidence: Evidence) -> str:
        """How much of the method's result its control reaches, and whether the control is the method's own."""
        control, method = display_name(self.control), display_name(self.method)
        if not evidence.ran(self.control, self.task):
            return f"; {control}: not run"
        try:
            diff, _, a, c = evidence.difference(self.method, self.control, self.task, GREEDY)
        except Unavailable as unavailable:
            return f"; {control}: {unavailable.reason}"
        shared = [p for p in a if p in c]
        text = (f"; {control} alone: {_percent(c, shared)} vs {method} {_percent(a, shared)}, a difference of "
                f"{_interval(diff)}")
        mismatch = control_mismatch(evidence.header, self.method, self.control)
        if mismatch:
            text += f"; the control does not match {method}'s warm start ({'; '.join(mismatch)})"
        return text


def _percent(per_seed: dict[str, np.ndarray], problems) -> str:
    return f"{100 * seed_matrix(per_seed, problems).mean():.1f}%"


@dataclass(frozen=True)
class SavingRatio:
    """How many times more of a training cost `baseline` spent than `method` on `task` (peak
    memory, say): the ratio of their means over seeds, tested as the t-test of the per-seed log
    ratios over the seeds both ran (`LogScale`). Where the method keeps fp32 master copies of a
    low-precision model's weights (`master_mb`, 4 bytes a parameter), the row gives their share of
    its figure: a cost the method carries, which a bf16 GRPO does not."""

    method: str
    baseline: str
    task: str
    cost: str = "peak_memory_mb"
    unit: str = "MB"

    def measure(self, evidence: Evidence) -> Finding:
        evidence.require((self.method, self.baseline), self.task)
        per_seed = {}
        for m in (self.method, self.baseline):
            values = {r["seed"]: _train_cost(r, self.cost) for r in evidence.runs(m, self.task)}
            values = {s: v for s, v in values.items() if v}
            if not values:
                raise Unavailable(MISSING, f"no training {self.cost} of {display_name(m)} on {self.task}")
            per_seed[m] = values
        seeds = sorted(set(per_seed[self.method]) & set(per_seed[self.baseline]))
        if not seeds:
            raise Unavailable(MISSING, f"{display_name(self.method)} and {display_name(self.baseline)} share no "
                                       f"seed on {self.task}")
        ratios = [per_seed[self.baseline][s] / per_seed[self.method][s] for s in seeds]
        mean_method = np.mean(list(per_seed[self.method].values()))
        mean_baseline = np.mean(list(per_seed[self.baseline].values()))
        spread = f" (per seed {min(ratios):.2f}–{max(ratios):.2f}x)" if len(ratios) > 1 else ""
        ours = (f"{mean_baseline / mean_method:.2f}x{spread}: {display_name(self.baseline)} {mean_baseline:,.0f} "
                f"{self.unit} vs {display_name(self.method)} {mean_method:,.0f} {self.unit}")
        masters = [_train_cost(r, "master_mb") for r in evidence.runs(self.method, self.task)]
        if self.cost == "peak_memory_mb" and any(masters):
            ours += (f", of which {np.mean([m or 0.0 for m in masters]):,.0f} MB are its fp32 master copy of the "
                     "weights (4 bytes a parameter)")
        device = evidence.header.get("hardware", "—")
        return Finding(LogScale(ratios), ours, evidence.scale(self.task, (self.method, self.baseline),
                                                              f"training on {device}"), len(seeds))


def _train_cost(result: dict, key: str):
    return ((result.get("cost") or {}).get("train") or {}).get(key)


def decreases(curve) -> bool:
    """Whether a loss curve decreases beyond noise: over at least three points, its decrease from
    the first point to the last exceeds twice sqrt(2 x the sum of its squared rises between
    successive points).

    A curve without trend, whose steps go up as often as down, has about that standard deviation
    in its net change: its rises alone estimate its step-to-step noise, and a decreasing trend,
    which does not rise, does not inflate its own noise estimate (a steep early drop is not
    noise). A steadily falling curve passes however small its fall; a curve that rises as much as
    it falls does not."""
    curve = np.asarray(curve, dtype=float)
    if len(curve) < 3:
        return False
    rises = np.clip(np.diff(curve), 0.0, None)
    return curve[0] - curve[-1] > 2 * math.sqrt(2 * float(np.sum(rises ** 2)))


@dataclass(frozen=True)
class QueriesToLoss:
    """How many times fewer training queries `method` needs than `baseline` to reach a held-out
    loss target, per paired (task, seed) run; the interval is the range over paired runs.

    Both log `heldout_loss`, the loss on one fixed held-out subset of training problems, at step 0,
    every `eval_every` steps and at the end, with `forward_equivalents` (training queries only) in
    the same row. A fixed subset keeps minibatch noise out of the curve, so it is read as logged.
    The target is the baseline's start minus `fraction` of its decrease from the start to its last
    point: what its whole budget bought, not a minimum it may have passed through and lost. A
    method's queries to the target are those at its first point at or below it (one that never
    gets there scores 0x); the ratio is the baseline's over the method's, tested by the sign test
    over paired runs (`SignTest`), which a run that never gets there does not break. A baseline
    curve that does not decrease beyond noise (`decreases`) sets no target."""

    method: str
    baseline: str
    fraction: float = 0.9
    metric: str = "heldout_loss"

    def measure(self, evidence: Evidence) -> Finding:
        tasks = sorted({r["task"] for r in evidence.results if r["method"] == self.method}
                       & {r["task"] for r in evidence.results if r["method"] == self.baseline})
        if not tasks:
            missing = next(m for m in (self.method, self.baseline)
                           if not any(r["method"] == m for r in evidence.results))
            raise Unavailable(NOT_RUN, f"{display_name(missing)} was not run")
        method, baseline = display_name(self.method), display_name(self.baseline)
        ratios, never, flat, seeds = [], 0, [], []
        for task in tasks:
            paired = sorted({r["seed"] for r in evidence.runs(self.method, task)}
                            & {r["seed"] for r in evidence.runs(self.baseline, task)})
            seeds.append(len(paired))
            for seed in paired:
                x_base, loss_base = self._curve(evidence, self.baseline, task, seed)
                x, loss = self._curve(evidence, self.method, task, seed)
                if not decreases(loss_base):
                    flat.append(f"{task} seed {seed}")
                    continue
                target = loss_base[0] - self.fraction * (loss_base[0] - loss_base[-1])
                base_queries = x_base[np.argmax(loss_base <= target)]
                reached = np.flatnonzero(loss <= target)
                if reached.size == 0:
                    never += 1
                    ratios.append(0.0)
                else:
                    ratios.append(float(base_queries / x[reached[0]]) if x[reached[0]] > 0 else math.inf)
        runs = len(ratios) + len(flat)
        if not runs:
            raise Unavailable(MISSING, f"{method} and {baseline} share no seed on {', '.join(tasks)}")
        scale = (f"{evidence.header.get('model', '—')}; held-out loss on {', '.join(tasks)}; "
                 f"{_plural(runs, 'paired run')}; target: {baseline}'s start minus {self.fraction:.0%} of its decrease")
        doubts = ()
        if flat:
            doubts = (f"{baseline}'s held-out loss does not decrease beyond noise in {', '.join(flat)} (by less than "
                      "twice the spread its own rises imply, or over fewer than three points), so it sets no target "
                      "to reach",)
            if not ratios:
                raise Unavailable(INCONCLUSIVE, doubts[0], "—", scale)
        if len(ratios) == 1:
            text = f"{ratios[0]:.2f}x fewer queries"
        elif min(ratios) == max(ratios):
            text = f"{ratios[0]:.2f}x fewer queries in each of {len(ratios)} paired runs"
        else:
            text = f"{min(ratios):.2f}–{max(ratios):.2f}x fewer queries over {len(ratios)} paired runs"
        if never:
            text += f"; {method} never reached {baseline}'s target in {never} of {len(ratios)}"
        return Finding(SignTest(ratios), text, scale, min(seeds), doubts=doubts)

    def _curve(self, evidence: Evidence, method: str, task: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
        history = evidence.history(method, task, seed)
        if history is None:
            raise Unavailable(MISSING, f"no training history of {display_name(method)} on {task}, seed {seed}")
        curve = training_curve(history, self.metric)
        if curve is None:
            raise Unavailable(MISSING, f"the training history of {display_name(method)} on {task}, seed {seed}, "
                                       f"has no {self.metric}")
        return curve


@dataclass(frozen=True)
class RecoveredGain:
    """The share of `ensemble`'s greedy gain over `base` that `method` recovers, pooled over every
    task all three ran, with `method` spending at most `budget` of the ensemble's perturbations and
    training forward passes.

    The rule reads the paired margin C - B - share (R - B) per problem (C, R, B: the three
    methods' greedy correctness, each over its seeds), which is positive exactly when the
    recovered share (C - B) / (R - B) exceeds `share` and R > B; its interval is the crossed
    interval over each method's seeds and the pooled problems. Two preconditions, else
    inconclusive. The budget, as the paper defines it: the perturbations the method's first stage
    draws (its config's `population`, CoRP's Stage 0) at most `budget` of the ensemble's
    population (500 against 5,000); what the method spent over all its stages (the last
    `perturbations` its training history logged, with CoRP's re-centring rounds) and its metered
    training `forward_passes` stand beside it in the row, as in the cost tables. And a gain: the
    ensemble's interval over the base model excludes 0; without one there is nothing to recover."""

    method: str
    ensemble: str
    base: str
    share: float = 0.5
    budget: float = 0.1

    def measure(self, evidence: Evidence) -> Finding:
        trio = (self.method, self.ensemble, self.base)
        tasks = [t for t in _tasks(evidence) if all(evidence.ran(m, t) for m in trio)]
        if not tasks:
            missing = next((m for m in trio if not any(r["method"] == m for r in evidence.results)), None)
            raise Unavailable(NOT_RUN, f"{display_name(missing)} was not run" if missing
                              else f"no task on which {', '.join(map(display_name, trio))} all ran")
        c, r, b = self._scores(evidence, trio, tasks)
        members = ((evidence.header.get("methods") or {}).get(self.ensemble) or {}).get("top_k")
        scale = (f"{evidence.header.get('model', '—')}; greedy on {', '.join(tasks)} pooled, "
                 f"{c.shape[1]} test problems; {display_name(self.ensemble)} vote of {members or '?'} members; "
                 f"seeds {c.shape[0]}/{r.shape[0]}/{b.shape[0]}")
        gain = evidence.intervals.combination([r, b], [1.0, -1.0], (self.ensemble, self.base))
        lift = c.mean() - b.mean()
        recovered = lift / (r.mean() - b.mean()) if r.mean() != b.mean() else math.nan
        ours = (f"{display_name(self.method)} {_pp(lift)} pp over the base model, "
                f"{display_name(self.ensemble)}'s vote {_interval(gain)}"
                + (f": {recovered:.0%} recovered" if math.isfinite(recovered) else ""))
        doubts = []
        configs = evidence.header.get("methods") or {}
        drawn = {m: (configs.get(m) or {}).get("population") for m in (self.method, self.ensemble)}
        for m, value in drawn.items():
            if not value:
                raise Unavailable(MISSING, f"no population in the config of {display_name(m)} (summary header)")
        used = drawn[self.method] / drawn[self.ensemble]
        spent = [f"first-stage perturbations {drawn[self.method]:,} vs a population of {drawn[self.ensemble]:,} "
                 f"({used:.0%})"]
        if used > self.budget + 1e-9:
            doubts.append(f"{display_name(self.method)}'s first stage drew {used:.0%} of "
                          f"{display_name(self.ensemble)}'s population, and the claim is about {self.budget:.0%}")
        for meter, what in (("perturbations", "perturbations over all stages"),
                            ("forward_passes", "training forward passes")):
            share, ours_used, theirs = self._spent(evidence, tasks, meter)
            spent.append(f"{what} {ours_used:,.0f} vs {theirs:,.0f} ({share:.0%})")
        ours += "; " + ", ".join(spent)
        if gain["low"] <= 0:
            doubts.append(f"{display_name(self.ensemble)}'s vote shows no gain over the base model (its interval "
                          "includes 0): there is no gain to recover")
        margin = evidence.intervals.combination([c, b, r], [1.0, -(1 - self.share), -self.share],
                                                (self.method, self.base, self.ensemble))
        ours += f"; margin over {self.share:.0%} recovery {_interval(margin)}"
        return Finding(margin["estimate"], ours, scale, min(c.shape[0], r.shape[0]), tuple(doubts))

    def _scores(self, evidence: Evidence, trio, tasks) -> list[np.ndarray]:
        """Each method's (seeds x problems) greedy scores on the problems all three share, tasks
        pooled; a method's seeds are those it was scored with on every task."""
        for m in trio:
            for task in tasks:
                if not evidence.scores.has(m, task):
                    raise Unavailable(MISSING, f"no per-problem scores (completions.jsonl) of {display_name(m)} on "
                                               f"{task}")
        seeds = {m: set.intersection(*(set(evidence.scores.seeds(m, t)) for t in tasks)) for m in trio}
        if not all(seeds.values()):
            raise Unavailable(MISSING, f"{display_name(next(m for m in trio if not seeds[m]))} has no seed scored on "
                                       f"every one of {', '.join(tasks)}")
        columns = {m: [] for m in trio}
        for task in tasks:
            per_seed = {m: evidence.scores.per_seed(m, task, GREEDY, seeds=seeds[m]) for m in trio}
            shared = [p for p in per_seed[self.method] if all(p in per_seed[m] for m in trio)]
            for m in trio:
                columns[m] += [per_seed[m][p] for p in shared]
        if not columns[self.method]:
            raise Unavailable(MISSING, "the three methods share no test problems")
        return [np.stack(columns[m], axis=1) for m in trio]

    def _spent(self, evidence: Evidence, tasks, meter: str) -> tuple[float, float, float]:
        """(the largest share of the ensemble's `meter` the method spent in a paired (task, seed)
        run, the method's and the ensemble's figure in that run)."""
        shares = []
        for task in tasks:
            paired = sorted({r["seed"] for r in evidence.runs(self.method, task)}
                            & {r["seed"] for r in evidence.runs(self.ensemble, task)})
            for seed in paired:
                spent = [self._meter(evidence, m, task, seed, meter) for m in (self.method, self.ensemble)]
                shares.append((spent[0] / spent[1], *spent))
        if not shares:
            raise Unavailable(MISSING, f"{display_name(self.method)} and {display_name(self.ensemble)} share no seed")
        return max(shares)

    @staticmethod
    def _meter(evidence: Evidence, method: str, task: str, seed: int, meter: str) -> float:
        """The perturbations a run drew (the last its training history logged), or a training meter of its result."""
        if meter == "perturbations":
            drawn = [step[meter] for step in evidence.history(method, task, seed) or [] if meter in step]
            value = drawn[-1] if drawn else None
        else:
            value = next((_train_cost(r, meter) for r in evidence.runs(method, task) if r["seed"] == seed), None)
        if not value:
            where = "training history" if meter == "perturbations" else "training cost"
            raise Unavailable(MISSING, f"no {meter} in the {where} of {display_name(method)} on {task}, seed {seed}")
        return float(value)


@dataclass(frozen=True)
class ClusterSpeedup:
    """A speed-up that grows with cluster size needs one method's training spread over clusters of
    `cluster_sizes` devices. Every job of this suite trains on one device (header
    `devices_per_job`), so the claim cannot be tested by any run of it: inconclusive, with our
    single-device training wall-clock ratio shown for what it is, beside what the cost model
    reports/cluster_model.py predicts for the claim's model at those sizes: a model, not evidence."""

    method: str
    baseline: str
    task: str
    cluster_sizes: tuple[int, ...]

    @property
    def statement(self) -> str:
        return (f"inconclusive at this scale by construction: the claim needs one method's training spread over "
                f"clusters of {' and '.join(map(str, self.cluster_sizes))} devices, and every job of this suite "
                "trains on one device; our single-device training wall-clock ratio is shown for what it is, and beside "
                "it what a cost model (reports/cluster_model.py) predicts, which is a model, not evidence")

    @staticmethod
    def modelled() -> str:
        """The cost model's prediction at the claim's sizes, said to be one."""
        from reports import cluster_model

        model = cluster_model.MODELS[-1]
        sizes = sorted(cluster_model.PAPER_POINTS)
        return (f"modelled, not measured (reports/cluster_model.py, its stated defaults): {display_name('essa')} over "
                f"{display_name('grpo')} on {model.name} " + ", ".join(
                    f"{cluster_model.speedup(model, g):.1f}x on {g} GPUs" for g in sizes)
                + " in time to a fixed number of rollouts, assuming both need the same rollouts to the accuracy")

    def measure(self, evidence: Evidence) -> Finding:
        evidence.require((self.method, self.baseline), self.task)
        seconds = {m: [((r.get("cost") or {}).get("train") or {}).get("wall_clock_s")
                       for r in evidence.runs(m, self.task)]
                   for m in (self.method, self.baseline)}
        ours = self.modelled()
        if all(v and all(v) for v in seconds.values()):
            a, b = np.mean(seconds[self.method]), np.mean(seconds[self.baseline])
            ours = (f"one device: training wall-clock {display_name(self.baseline)} {b:,.0f} s vs "
                    f"{display_name(self.method)} {a:,.0f} s ({b / a:.2f}x); {ours}")
        devices = evidence.header.get("devices_per_job", 1)
        have = [size for size in self.cluster_sizes if size <= devices]
        if len(have) < len(self.cluster_sizes):
            raise Unavailable(
                INCONCLUSIVE,
                f"needs training on clusters of {' and '.join(map(str, self.cluster_sizes))} devices; every job of "
                f"this run trained on {devices}", ours,
                evidence.scale(self.task, (self.method, self.baseline),
                               f"training on {evidence.header.get('hardware', '—')}"))
        raise Unavailable(MISSING, "time-to-accuracy at several cluster sizes is not recorded", ours)


def _tasks(evidence: Evidence) -> list[str]:
    listed = list(evidence.header.get("tasks", {}))
    return listed + sorted({r["task"] for r in evidence.results} - set(listed))


# ---------------------------------------------------------------- the claims

RETAINED = (
    "non-inferiority on the share of GRPO's gain over the base model kept: the margin (method − base) − f (GRPO − "
    "base), f = report.retained_share (0.8 by default), greedy accuracy; supported when it is shown above 0 (the "
    "method keeps more than f of GRPO's gain), not supported when it is shown at or below 0, inconclusive "
    "otherwise; GRPO's own gain over the base model must be shown above 0 first. A method equal to the base model "
    "has a margin of −f times GRPO's gain, so it cannot match a GRPO that moved. The equivalence reading beside it "
    "(TOST at ±{delta:g} pp, the 90% interval of method − GRPO) is shown, not judged")
PARITY = Threshold(0.0, 0.0, RETAINED.format(delta=1))
"""Parity with GRPO, judged as retained share."""
EQUIVALENCE = 0.01
"""Delta of the parity claims' TOST reading: ESSAM's paper reports ESSAM 78.27%, GRPO 78.34% and PPO 77.72% on
GSM8K and calls them on par: the three lie within 0.62 points, rounded up to 1. ESSA's paper gives no parity figure
(only gains over GRPO), so its row takes the same."""
FGRPO_GAIN = 0.062
"""F-GRPO's reported gain in math pass@256 over GRPO (64.1 → 70.3)."""
CORP_EFFECT = 0.0405
"""CoRP's recovery claim in the margin's units: full recovery of the paper's 8.1-point gain over the base model
lies 4.05 points above half recovery."""


def gain_rule(effect: float, what: str) -> Threshold:
    """A gain of stated size: supported when shown above 0 with its interval still reaching half the
    paper's effect; not supported when shown wholly below half of it (no gain included)."""
    half = effect / 2
    return Threshold(
        0.0, half, f"{what}: supported when it is shown above 0 and its interval reaches at least half the paper's "
                   f"effect ({100 * half:.2f} pp of {100 * effect:.2f}); not supported when it is shown below half "
                   f"the paper's effect (which includes no gain at all); inconclusive otherwise", effect=half)


@dataclass(frozen=True)
class Claim:
    key: str
    paper: str
    """The method whose paper makes the claim (its citation in 'How to cite')."""
    statement: str
    paper_figure: str
    comparison: object
    rule: Threshold | None
    """None where no run of this suite can test the claim (the comparison says why)."""


CLAIMS: tuple[Claim, ...] = (
    Claim(
        "essa_parity", "essa", "ESSA matches GRPO on math",
        "matches GRPO; up to +21.9 pp MATH500 accuracy (Qwen2.5-7B); +14.8% PRM800K/MATH500, +12.6% GSM8K "
        "(Qwen2.5-Math-7B)",
        RetainedGain("essa", "math", EQUIVALENCE, control="sft"), PARITY),
    Claim(
        "essa_scaling", "essa", "ESSA's speed-up over GRPO grows with cluster size",
        "reaches a fixed MATH500 accuracy 2x faster than GRPO on 16 GPUs, 6x faster on 128 (Qwen2.5-32B, PRM800K)",
        ClusterSpeedup("essa", "grpo", "math", (16, 128)), None),
    Claim(
        "fgrpo_passk", "fgrpo", "F-GRPO raises pass@256 over GRPO",
        "math pass@256 64.1 → 70.3 (+6.2 pp), pass@1 37.3 → 38.6; Qwen2.5-7B, group size 8",
        PairedDifference("fgrpo", "grpo", "math", PASS),
        gain_rule(FGRPO_GAIN, "the paired difference F-GRPO − GRPO in pass@n, GRPO shown off the base model")),
    Claim(
        "sazo_queries", "sazo", "SAZO reaches MeZO's training loss in fewer queries",
        "up to 6x fewer queries to the same training loss as uniform zeroth-order sampling (abstract only; "
        "SAZO here is a reconstruction)",
        QueriesToLoss("sazo", "mezo"),
        Threshold(1.5, 1.0, "on the held-out loss curves: the target is MeZO's loss at step 0 minus 90% of its "
                            "decrease from step 0 to its last point; by the sign test over paired runs, supported "
                            "when SAZO reaches it with more than 1.5x fewer queries than MeZO in more runs than chance "
                            "gives (a clear margin; the paper's 6x is its best case), not supported when it needs at "
                            "least as many (or never gets there) in more runs than chance gives; inconclusive "
                            "otherwise, or where MeZO's loss does not decrease beyond noise. All of 3 paired runs "
                            "decide nothing (p = 0.125): at least 6 are needed")),
    Claim(
        "corp_recovery", "corp", "CoRP's single model recovers over half of RandOpt's vote gain with a tenth of the "
                                 "perturbations",
        "recovers more than half of the 50-member majority vote's gain with 500 vs 5000 perturbations; +8.1 points "
        "over the base model on average (5 models x 5 tasks)",
        RecoveredGain("corp", "randopt", "base"),
        gain_rule(CORP_EFFECT, "preconditions: CoRP's first stage draws at most a tenth of RandOpt's population (the "
                               "paper's 500 vs 5,000; all stages and forward passes are shown beside it) and "
                               "RandOpt's vote gains over the base model (interval above 0); then the margin CoRP − "
                               "base − ½(RandOpt − base), greedy, whose paper size is 4.05 pp (full recovery of "
                               "8.1 points over half recovery)")),
    Claim(
        "essam_parity", "essam", "ESSAM matches GRPO on GSM8K",
        "GSM8K accuracy averaged over models: ESSAM 78.27%, GRPO 78.34% (PPO 77.72%)",
        RetainedGain("essam", "gsm8k", EQUIVALENCE), PARITY),
    Claim(
        "essam_memory", "essam", "ESSAM needs about 10x less memory than GRPO (18x less than PPO)",
        "GPU memory 10x lower than GRPO and 18x lower than PPO on average (PPO on an 8B model: 314.44 GiB); PPO is "
        "not in this suite, so the 18x is not tested",
        SavingRatio("essam", "grpo", "gsm8k"),
        Threshold(5.0, 1.0, "by the t-test of the per-seed log ratio of peak training memory, GRPO's over ESSAM's: "
                            "supported when it is shown above 5x (half the paper's 10x); not supported when it is "
                            "shown at or below 1x (no saving); inconclusive in between, where fixed costs (runtime, "
                            "activations) can hide a saving at small scale. ESSAM's figure includes its fp32 master "
                            "copy of a low-precision model's weights, shown apart")),
)


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


def rule_text(claim: Claim) -> str:
    """The rule a claim's verdict follows, in words: its threshold, or why no run can test it."""
    return claim.rule.statement if claim.rule is not None else claim.comparison.statement


def check(claim: Claim, evidence: Evidence) -> dict:
    """The row of one claim judged alone (a family of one; see `check_all`)."""
    return check_all(evidence, (claim,))[0]


def check_all(evidence: Evidence, claims=CLAIMS) -> list[dict]:
    """Every claim's row: the paper's figure, ours with its scale, the verdict and the rule it
    followed or why the run could not tell, and the smallest effect the run could have detected.

    A claim is tested where its comparison gave a test, its preconditions hold, each compared
    method has `min_seeds` training seeds and its scores vary. The tested claims are one family:
    each has the p-value 2 min(p above the support bar, p below the refute bar), and Holm's
    step-down method takes them from the smallest p up, the i-th of m at level alpha / (m - i + 1)
    (alpha: `report.family_alpha`), stopping at the first that does not clear its level; a claim
    that clears it is not supported where its quantity is shown at or below the refute bar at that
    level, else supported. The chance that any definite verdict is wrong is then at most alpha."""
    rows, tested = [], []
    confidence = evidence.intervals.confidence
    for claim in claims:
        row = {"key": claim.key, "paper": claim.paper, "claim": claim.statement, "paper_figure": claim.paper_figure,
               "detectable": None, "p_value": None}
        try:
            finding = claim.comparison.measure(evidence)
        except Unavailable as unavailable:
            rows.append({**row, "ours": unavailable.ours, "scale": unavailable.scale, "verdict": unavailable.verdict,
                         "reason": unavailable.reason})
            continue
        if claim.rule is None:
            raise ValueError(f"claim {claim.key} has no rule, yet its comparison gave a test")
        test, rule = finding.test, claim.rule
        low, high = test.interval(confidence)
        doubts = list(finding.doubts)
        if finding.seeds < evidence.min_seeds:
            doubts.append(f"this run has {_plural(finding.seeds, 'training seed')} of a compared method, and a "
                          f"definite verdict needs at least {evidence.min_seeds} of each (report.min_seeds)")
        if isinstance(test, Estimate) and test.se == 0:
            doubts.append(f"every one of its {test.problems:,} problems gives the same score in every seed: an "
                          "interval of no width is no evidence, and this many problems cannot resolve less than "
                          f"{100 * resolution(test.problems, confidence):.1f} pp")
        p = min(1.0, 2 * min(test.p_above(rule.support), test.p_below(rule.refute)))
        rows.append({**row, "ours": finding.ours, "scale": finding.scale, "interval": [float(low), float(high)],
                     "p_value": p, "doubts": doubts, "test": test, "rule": rule})
        if not doubts:
            tested.append(len(rows) - 1)
    alpha = float(evidence.setting("family_alpha"))
    family = len(tested)
    for index, (rank, level, cleared) in zip(tested, holm([rows[i]["p_value"] for i in tested], alpha)):
        row = rows[index]
        verdict = INCONCLUSIVE if not cleared else (
            NOT_SUPPORTED if 2 * row["test"].p_below(row["rule"].refute) <= level else SUPPORTED)
        step = (f"Holm's step {rank} of {family} at family-wise level {alpha:g}: p = {row['p_value']:.2g} "
                f"against {level:.2g}")
        if verdict != INCONCLUSIVE:
            row["reason"] = f"{row['rule'].statement}. {step}"
        elif row["p_value"] <= 1 - confidence:
            row["reason"] = (f"its test alone would decide it at {confidence:.0%}, but not at the family-wise level "
                             f"({step}, over every claim this run tests). Rule: {row['rule'].statement}")
        elif isinstance(row["test"], SignTest):
            row["reason"] = (f"too few paired runs lie beyond either bar for chance to be ruled out at "
                             f"{confidence:.0%} ({step}). Rule: {row['rule'].statement}")
        else:
            row["reason"] = (f"the interval lies neither wholly beyond the claim's bar nor wholly short of it "
                             f"({step}). Rule: {row['rule'].statement}")
        row["verdict"] = verdict
    for row in rows:
        if "test" not in row:
            continue
        test, rule, doubts = row.pop("test"), row.pop("rule"), row.pop("doubts")
        if isinstance(test, Estimate):
            # Never below what the problems can resolve: [0, 0] from all-zero data is not power.
            row["detectable"] = max(float(test.detectable(alpha / max(family, 1))),
                                    resolution(test.problems, confidence))
            if row.get("verdict") in (None, INCONCLUSIVE) and rule.effect and row["detectable"] > rule.effect:
                doubts = doubts + [f"the smallest effect this run could detect at 80% power is "
                                   f"{100 * row['detectable']:.1f} pp, more than the {100 * rule.effect:.1f} pp the "
                                   "claim turns on: a larger run is needed (nograd plan)"]
        if "verdict" not in row:
            row["verdict"], row["reason"] = INCONCLUSIVE, "; ".join(doubts)
        elif len(doubts) and row["verdict"] == INCONCLUSIVE:
            row["reason"] += "; " + "; ".join(doubts)
    return rows
