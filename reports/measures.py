"""Measures: the comparisons a claim reads, each a quantity measured on a run's `Evidence` (reports/verdicts.py).

A comparison's `measure` gives a `Finding`: a test of the claim's quantity (a crossed seeds x
problems estimate from reports/intervals.py, a t-test over seeds of a log cost ratio (`LogScale`),
or a sign test over paired runs (`SignTest`)), our figure in words and what it was measured on,
and the preconditions of the comparison that failed (GRPO did not move off the base model, a
budget other than the claim's, no gain to recover, no decrease of the baseline's loss). Where it
can give no test, it raises `Unavailable` with the verdict the row reads instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from reports.intervals import ratio_interval
from reports.names import display_name
from reports.scores import GREEDY, seed_matrix, training_curve
from reports.verdicts import INCONCLUSIVE, MISSING, NOT_RUN, Evidence, Finding, LogScale, SignTest, Unavailable, plural


def _pp(value: float) -> str:
    return f"{100 * value:+.1f}"


def _interval(diff: dict) -> str:
    return f"{_pp(diff['value'])} pp [{_pp(diff['low'])}, {_pp(diff['high'])}]"


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
                 f"{plural(runs, 'paired run')}; target: {baseline}'s start minus {self.fraction:.0%} of its decrease")
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
