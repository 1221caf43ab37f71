"""Claim checks: does each seed paper's headline claim hold at the scale of this run?

Each claim is one declarative entry in CLAIMS: the paper, its figure (from
../shared/reference/METHODS.md), the comparison it needs and the rule that turns the
comparison into a verdict. `check` is the one function that applies them; no verdict is set by
hand. A verdict is one of:

- supported / not supported / inconclusive at this scale: by the claim's rule (`Threshold`),
  from an interval (a bootstrap interval over problems, or the range over paired runs);
- inconclusive at this scale, with the reason, when the run cannot test the claim however its
  numbers come out (a speed-up across cluster sizes, on one device per job; a budget other than
  the claim's; no gain to recover);
- not run: a method the claim compares was not run on the claim's task;
- missing data: the methods ran but a metric the comparison needs is not in the result files
  (say, a training history without a loss), named in the row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from reports.names import display_name
from reports.scores import GREEDY, PASS, Intervals, ProblemScores, paired_difference, trailing_mean, training_curve

SUPPORTED = "supported"
NOT_SUPPORTED = "not supported"
INCONCLUSIVE = "inconclusive at this scale"
NOT_RUN = "not run"
MISSING = "missing data"


@dataclass(frozen=True)
class Threshold:
    """The verdict rule: where the interval [low, high] of the measured quantity lies.

    supported when low > support (all of it beyond the claim's bar); not supported when
    high <= refute (all of it at or short of the point where the claim fails); inconclusive
    otherwise. Between `refute` and `support` lies the band of values too small to support the
    claim and too large to refute it.
    """

    support: float
    refute: float
    statement: str
    """The rule in words, as the report states it."""

    def __post_init__(self) -> None:
        if self.refute > self.support:
            raise ValueError(f"refute ({self.refute}) must not exceed support ({self.support})")


def decide(rule: Threshold, low: float, high: float) -> str:
    """The verdict of `rule` on an interval [low, high]."""
    if not low <= high:
        raise ValueError(f"not an interval: [{low}, {high}]")
    if low > rule.support:
        return SUPPORTED
    if high <= rule.refute:
        return NOT_SUPPORTED
    return INCONCLUSIVE


@dataclass(frozen=True)
class Finding:
    """What a comparison measured: the interval the rule reads, and the row's text."""

    low: float
    high: float
    ours: str
    """Our figure in words, with its interval."""
    scale: str
    """What it was measured on: model, task, problems, samples, seeds."""


class Unavailable(Exception):
    """The comparison cannot give the rule an interval: the verdict it reads instead, and why."""

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


def _pp(value: float) -> str:
    return f"{100 * value:+.1f}"


# ---------------------------------------------------------------- comparisons


@dataclass(frozen=True)
class PairedDifference:
    """`method` minus `baseline` on the same test problems of `task`, greedy accuracy or pass@k at
    the largest k both ran (k = n), each method averaged over its seeds; the interval is the
    bootstrap over problems."""

    method: str
    baseline: str
    task: str
    metric: str = GREEDY

    def measure(self, evidence: Evidence) -> Finding:
        evidence.require((self.method, self.baseline), self.task)
        for m in (self.method, self.baseline):
            if not evidence.scores.has(m, self.task):
                raise Unavailable(MISSING, f"no per-problem scores (completions.jsonl) of {display_name(m)} on {self.task}")
        k = 1
        if self.metric == PASS:
            k = min(evidence.scores.samples(self.method, self.task), evidence.scores.samples(self.baseline, self.task))
            if k < 1:
                raise Unavailable(MISSING, f"no sampled completions on {self.task}")
        a = evidence.scores.values(self.method, self.task, self.metric, k)
        b = evidence.scores.values(self.baseline, self.task, self.metric, k)
        diff = paired_difference(a, b, evidence.intervals)
        if diff is None:
            raise Unavailable(MISSING, f"{display_name(self.method)} and {display_name(self.baseline)} share no "
                                       f"test problems on {self.task}")
        name = "greedy accuracy" if self.metric == GREEDY else f"pass@{k}"
        shared = [p for p in a if p in b]
        ours = (f"{_pp(diff['value'])} pp [{_pp(diff['low'])}, {_pp(diff['high'])}] {name}: "
                f"{display_name(self.method)} {100 * np.mean([a[p] for p in shared]):.1f}% vs "
                f"{display_name(self.baseline)} {100 * np.mean([b[p] for p in shared]):.1f}%")
        what = "greedy" if self.metric == GREEDY else f"n = {k} samples per problem, pass@{k}"
        return Finding(diff["low"], diff["high"], ours, evidence.scale(self.task, (self.method, self.baseline), what))


@dataclass(frozen=True)
class SavingRatio:
    """How many times more of a training cost `baseline` spent than `method` on `task` (peak
    memory, say): the ratio of their means over seeds; the interval is the range of the
    per-seed ratios over the seeds both ran."""

    method: str
    baseline: str
    task: str
    cost: str = "peak_memory_mb"
    unit: str = "MB"

    def measure(self, evidence: Evidence) -> Finding:
        evidence.require((self.method, self.baseline), self.task)
        per_seed = {}
        for m in (self.method, self.baseline):
            values = {r["seed"]: ((r.get("cost") or {}).get("train") or {}).get(self.cost)
                      for r in evidence.runs(m, self.task)}
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
        device = evidence.header.get("hardware", "—")
        return Finding(min(ratios), max(ratios), ours,
                       evidence.scale(self.task, (self.method, self.baseline), f"training on {device}"))


@dataclass(frozen=True)
class QueriesToLoss:
    """How many times fewer training queries (forward-equivalents) `method` needs than `baseline` to
    reach the baseline's final training loss, per paired (task, seed) run: both losses smoothed
    by a trailing mean (reports.scores.SMOOTHING_SHARE of their points); the target is the
    baseline's last smoothed value; each method's queries are those at its first smoothed point
    at or below the target (the baseline's always exists; a method that never gets there scores
    0x). The interval is the range over paired runs."""

    method: str
    baseline: str

    def measure(self, evidence: Evidence) -> Finding:
        tasks = sorted({r["task"] for r in evidence.results if r["method"] == self.method}
                       & {r["task"] for r in evidence.results if r["method"] == self.baseline})
        if not tasks:
            missing = next(m for m in (self.method, self.baseline) if not any(r["method"] == m for r in evidence.results))
            raise Unavailable(NOT_RUN, f"{display_name(missing)} was not run")
        ratios, never = [], 0
        for task in tasks:
            seeds = sorted({r["seed"] for r in evidence.runs(self.method, task)}
                           & {r["seed"] for r in evidence.runs(self.baseline, task)})
            for seed in seeds:
                curves = {}
                for m in (self.method, self.baseline):
                    history = evidence.history(m, task, seed)
                    if history is None:
                        raise Unavailable(MISSING, f"no training history of {display_name(m)} on {task}, seed {seed}")
                    curve = training_curve(history, "loss")
                    if curve is None:
                        raise Unavailable(MISSING, f"the training history of {display_name(m)} on {task}, seed {seed}, "
                                                   "has no loss")
                    curves[m] = (curve[0], trailing_mean(curve[1]))
                x_base, loss_base = curves[self.baseline]
                target = loss_base[-1]
                base_queries = x_base[np.argmax(loss_base <= target)]
                x, loss = curves[self.method]
                reached = np.flatnonzero(loss <= target)
                if reached.size == 0:
                    never += 1
                    ratios.append(0.0)
                else:
                    ratios.append(float(base_queries / x[reached[0]]) if x[reached[0]] > 0 else math.inf)
        runs = len(ratios)
        if not runs:
            raise Unavailable(MISSING, f"{display_name(self.method)} and {display_name(self.baseline)} share no seed "
                                       f"on {', '.join(tasks)}")
        if runs == 1 or min(ratios) == max(ratios):
            text = f"{min(ratios):.2f}x fewer queries" + (f" in each of {runs} paired runs" if runs > 1 else "")
        else:
            text = f"{min(ratios):.2f}–{max(ratios):.2f}x fewer queries over {runs} paired runs"
        if never:
            text += (f"; {display_name(self.method)} never reached {display_name(self.baseline)}'s final loss "
                     f"in {never} of {runs}")
        scale = (f"{evidence.header.get('model', '—')}; training loss on {', '.join(tasks)}; "
                 f"{runs} paired run{'s' if runs != 1 else ''}")
        return Finding(min(ratios), max(ratios), text, scale)


@dataclass(frozen=True)
class RecoveredGain:
    """The share of `ensemble`'s greedy gain over `base` that `method` recovers, pooled over every
    task all three ran, with `method` drawing at most `budget` of the ensemble's perturbations.

    The rule reads the paired margin C - B - share (R - B) per problem (C, R, B: the three
    methods' greedy correctness, averaged over seeds), which is positive exactly when the
    recovered share (C - B) / (R - B) exceeds `share` and R > B; its interval is the bootstrap
    over the pooled problems. Two preconditions, else inconclusive: the method's perturbations
    (Stage 0's population) are at most `budget` of the ensemble's, and the ensemble's own gain
    over the base model is positive (its interval excludes 0): without a gain there is nothing
    to recover."""

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
        values = {m: {} for m in trio}
        for task in tasks:
            for m in trio:
                if not evidence.scores.has(m, task):
                    raise Unavailable(MISSING, f"no per-problem scores (completions.jsonl) of {display_name(m)} on {task}")
                values[m].update({f"{task}:{p}": v for p, v in evidence.scores.values(m, task, GREEDY).items()})
        shared = [p for p in values[self.method] if all(p in values[m] for m in trio)]
        if not shared:
            raise Unavailable(MISSING, "the three methods share no test problems")
        c, r, b = ([values[m][p] for p in shared] for m in trio)
        configs = evidence.header.get("methods", {})
        population = {m: (configs.get(m) or {}).get("population") for m in (self.method, self.ensemble)}
        members = (configs.get(self.ensemble) or {}).get("top_k")
        scale = (f"{evidence.header.get('model', '—')}; greedy on {', '.join(tasks)} pooled, "
                 f"{len(shared)} test problems; {display_name(self.ensemble)} vote of {members or '?'} members")
        gain = evidence.intervals.mean(np.subtract(r, b))
        recovered = (np.mean(c) - np.mean(b)) / (np.mean(r) - np.mean(b)) if np.mean(r) != np.mean(b) else math.nan
        ours = (f"{display_name(self.method)} {_pp(np.mean(c) - np.mean(b))} pp over the base model, "
                f"{display_name(self.ensemble)}'s vote {_pp(gain['value'])} pp [{_pp(gain['low'])}, {_pp(gain['high'])}]"
                + (f": {recovered:.0%} recovered" if math.isfinite(recovered) else ""))
        if None in population.values():
            raise Unavailable(MISSING, "the methods' populations are not in the summary (header.methods)", ours, scale)
        used = population[self.method] / population[self.ensemble]
        ours += f"; perturbations {population[self.method]} vs {population[self.ensemble]} ({used:.0%})"
        if used > self.budget + 1e-9:
            raise Unavailable(INCONCLUSIVE, f"{display_name(self.method)} drew {used:.0%} of "
                                            f"{display_name(self.ensemble)}'s perturbations; the claim is about "
                                            f"{self.budget:.0%}", ours, scale)
        if gain["low"] <= 0:
            raise Unavailable(INCONCLUSIVE, f"{display_name(self.ensemble)}'s vote shows no gain over the base model "
                                            "(its interval includes 0): there is no gain to recover", ours, scale)
        margin = evidence.intervals.mean(np.asarray(c) - np.asarray(b) - self.share * (np.asarray(r) - np.asarray(b)))
        ours += (f"; margin over {self.share:.0%} recovery {_pp(margin['value'])} pp "
                 f"[{_pp(margin['low'])}, {_pp(margin['high'])}]")
        return Finding(margin["low"], margin["high"], ours, scale)


@dataclass(frozen=True)
class ClusterSpeedup:
    """A speed-up that grows with cluster size needs one method's training spread over clusters of
    `cluster_sizes` devices. Every job of this suite trains on one device (header
    `devices_per_job`), so the claim cannot be tested by any run of it: inconclusive, with our
    single-device training wall-clock ratio shown for what it is."""

    method: str
    baseline: str
    task: str
    cluster_sizes: tuple[int, ...]

    @property
    def statement(self) -> str:
        return (f"inconclusive at this scale by construction: the claim needs one method's training spread over "
                f"clusters of {' and '.join(map(str, self.cluster_sizes))} devices, and every job of this suite "
                "trains on one device; our single-device training wall-clock ratio is shown for what it is")

    def measure(self, evidence: Evidence) -> Finding:
        evidence.require((self.method, self.baseline), self.task)
        seconds = {m: [((r.get("cost") or {}).get("train") or {}).get("wall_clock_s") for r in evidence.runs(m, self.task)]
                   for m in (self.method, self.baseline)}
        ours = "—"
        if all(v and all(v) for v in seconds.values()):
            a, b = np.mean(seconds[self.method]), np.mean(seconds[self.baseline])
            ours = (f"one device: training wall-clock {display_name(self.baseline)} {b:,.0f} s vs "
                    f"{display_name(self.method)} {a:,.0f} s ({b / a:.2f}x)")
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

MARGIN = 0.05
"""Parity margin: 'matches' reads as 'no worse by more than 5 points of accuracy'."""

PARITY = Threshold(
    -MARGIN, -MARGIN,
    f"supported when the 95% interval of the paired difference lies above −{100 * MARGIN:.0f} pp (no worse than "
    f"the baseline by more than {100 * MARGIN:.0f} points; both papers present parity as not being worse); not supported "
    f"when it lies at or below −{100 * MARGIN:.0f} pp; inconclusive otherwise")
GAIN = Threshold(0.0, 0.0, "supported when the 95% interval of the paired difference lies above 0; not supported when it "
                           "lies at or below 0; inconclusive otherwise")


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
        PairedDifference("essa", "grpo", "math"), PARITY),
    Claim(
        "essa_scaling", "essa", "ESSA's speed-up over GRPO grows with cluster size",
        "reaches a fixed MATH500 accuracy 2x faster than GRPO on 16 GPUs, 6x faster on 128 (Qwen2.5-32B, PRM800K)",
        ClusterSpeedup("essa", "grpo", "math", (16, 128)), None),
    Claim(
        "fgrpo_passk", "fgrpo", "F-GRPO raises pass@256 over GRPO",
        "math pass@256 64.1 → 70.3 (+6.2 pp), pass@1 37.3 → 38.6; Qwen2.5-7B, group size 8",
        PairedDifference("fgrpo", "grpo", "math", PASS), GAIN),
    Claim(
        "sazo_queries", "sazo", "SAZO reaches MeZO's training loss in fewer queries",
        "up to 6x fewer queries to the same training loss as uniform zeroth-order sampling (abstract only; "
        "SAZO here is a reconstruction)",
        QueriesToLoss("sazo", "mezo"),
        Threshold(1.5, 1.0, "supported when SAZO needs more than 1.5x fewer queries than MeZO in every paired run "
                            "(a clear margin; the paper's 6x is its best case); not supported when it needs at least as "
                            "many (or never gets there) in every paired run; inconclusive otherwise")),
    Claim(
        "corp_recovery", "corp", "CoRP's single model recovers over half of RandOpt's vote gain with a tenth of the "
                                 "perturbations",
        "recovers more than half of the 50-member majority vote's gain with 500 vs 5000 perturbations; +8.1 points over "
        "the base model on average (5 models x 5 tasks)",
        RecoveredGain("corp", "randopt", "base"),
        Threshold(0.0, 0.0, "preconditions: CoRP drew at most a tenth of RandOpt's perturbations, and RandOpt's vote "
                            "gains over the base model (interval above 0); then supported when the 95% interval of the "
                            "margin CoRP − base − ½(RandOpt − base) lies above 0, not supported when at or below 0, "
                            "inconclusive otherwise")),
    Claim(
        "essam_parity", "essam", "ESSAM matches GRPO on GSM8K",
        "GSM8K accuracy averaged over models: ESSAM 78.27%, GRPO 78.34% (PPO 77.72%)",
        PairedDifference("essam", "grpo", "gsm8k"), PARITY),
    Claim(
        "essam_memory", "essam", "ESSAM needs about 10x less memory than GRPO (18x less than PPO)",
        "GPU memory 10x lower than GRPO and 18x lower than PPO on average (PPO on an 8B model: 314.44 GiB); PPO is "
        "not in this suite, so the 18x is not tested",
        SavingRatio("essam", "grpo", "gsm8k"),
        Threshold(5.0, 1.0, "supported when GRPO's peak training memory is more than 5x ESSAM's (half the paper's 10x) "
                            "in every seed; not supported when it is at most 1x (no saving) in every seed; inconclusive "
                            "in between, where fixed costs (runtime, activations) can hide a saving at small scale")),
)


def rule_text(claim: Claim) -> str:
    """The rule a claim's verdict follows, in words: its threshold, or why no run can test it."""
    return claim.rule.statement if claim.rule is not None else claim.comparison.statement


def check(claim: Claim, evidence: Evidence) -> dict:
    """The claim's row: the paper's figure, ours with its scale, the verdict and the rule or reason."""
    row = {"key": claim.key, "paper": claim.paper, "claim": claim.statement, "paper_figure": claim.paper_figure}
    try:
        finding = claim.comparison.measure(evidence)
    except Unavailable as unavailable:
        return {**row, "ours": unavailable.ours, "scale": unavailable.scale, "verdict": unavailable.verdict,
                "reason": unavailable.reason}
    if claim.rule is None:
        raise ValueError(f"claim {claim.key} has no rule, yet its comparison gave an interval")
    return {**row, "ours": finding.ours, "scale": finding.scale, "verdict": decide(claim.rule, finding.low, finding.high),
            "reason": claim.rule.statement, "interval": [finding.low, finding.high]}


def check_all(evidence: Evidence, claims=CLAIMS) -> list[dict]:
    return [check(claim, evidence) for claim in claims]
