"""Power planned before the run: for each claim a config can test, the smallest effect its test
detects at 80% power with the config's design (test problems, training seeds), whether that decides
the claim, and if not the fewest seeds or problems that would. `nograd plan` prints it; the report's
'detectable effect' is the same calculation (reports.intervals.detectable) with the observed variance.

A claim's quantity is a combination sum_m c_m x (mean score of method m) on P shared problems,
S_m seeds of method m. Its variance, in the crossed model of reports/intervals.py, is

    Var = [(d - phi) / 2 x sum_m c_m^2 + sum_m c_m^2 phi_m / (2 S_m)] / P + sum_m c_m^2 tau_m^2 / S_m

with phi the flip rate (the share of problems two seeds of one trained method answer differently),
d the disagreement (the share two different methods answer differently, one seed each), tau the
seed-to-seed spread of a trained method's accuracy; the base model does not train (phi = tau = 0).
The first term is what the problems leave uncertain after pairing (for a contrast, sum c_m = 0, of
methods whose answers differ on a share d of problems), the second the seeds' noise on each
problem, the third the training runs' luck. Degrees of freedom: Satterthwaite's, each seed term
with S_m - 1. The claims are one family: the level is Holm's first step, family_alpha / m over the m
claims the config tests, so a claim planned as decidable is decidable wherever it comes in Holm's order.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import numpy as np

from reports import claims
from reports.intervals import detectable
from reports.scores import GREEDY, ProblemScores

POWER = 0.8
MOST_SEEDS = 100


@dataclass(frozen=True)
class Assumptions:
    """How answers vary, in the terms of the module's variance (shares, not points)."""

    flip_rate: float = 0.10
    """phi: share of test problems two training seeds of one method answer differently (greedy). Assumed:
    a tenth, the order seen between fine-tuning seeds of small models on GSM8K-like sets."""
    disagreement: float = 0.20
    """d: share of test problems two different methods answer differently (one seed each). Assumed."""
    seed_spread: float = 0.01
    """tau: standard deviation of a trained method's accuracy over training seeds. Assumed: one point."""
    grpo_gain: float = 0.05
    """GRPO's greedy gain over the base model, which sets the parity claims' size. Assumed: five points."""
    source: str = "assumed (reports/power.py defaults)"

    @classmethod
    def measured(cls, summary: dict, base: Assumptions | None = None) -> Assumptions:
        """The four quantities as an earlier run's summary.json shows them, each where it can
        (two seeds of a trained method for phi and tau, two methods for d, GRPO and the base model for
        the gain); the others stay `base`'s."""
        base = base or cls()
        scores = ProblemScores(summary.get("per_problem") or [])
        keys = sorted({(r["method"], r["task"]) for r in summary.get("per_problem") or []})
        flips, spreads, gains = [], [], []
        greedy = {key: scores.per_seed(*key, GREEDY) for key in keys}
        for (method, task), per_seed in greedy.items():
            if not per_seed:
                continue
            matrix = np.stack(list(per_seed.values()), axis=1)
            if method != "base" and matrix.shape[0] > 1:
                flips += [float(np.mean(a != b)) for a, b in itertools.combinations(matrix, 2)]
                spreads.append(float(matrix.mean(axis=1).std(ddof=1)))
        disagreements = []
        for (m1, t1), (m2, t2) in itertools.combinations(greedy, 2):
            shared = [p for p in greedy[m1, t1] if p in greedy[m2, t2]]
            if t1 == t2 and shared:
                disagreements.append(float(np.mean([greedy[m1, t1][p][0] != greedy[m2, t2][p][0] for p in shared])))
        for task in {t for _, t in keys}:
            if greedy.get(("grpo", task)) and greedy.get(("base", task)):
                g, b = greedy["grpo", task], greedy["base", task]
                gains.append(float(np.mean([g[p].mean() - b[p].mean() for p in g if p in b])))
        found = {"flip_rate": flips, "disagreement": disagreements, "seed_spread": spreads, "grpo_gain": gains}
        values = {k: float(np.mean(v)) for k, v in found.items() if v}
        return replace(base, **values, source="measured from the summary given (" + ", ".join(values) + "); "
                                                + ("the rest assumed" if len(values) < 4 else "nothing assumed"))


def standard_error(terms: list[tuple[float, bool, int]], problems: int, assume: Assumptions) -> tuple[float, float]:
    """(standard error, degrees of freedom) of sum c x mean over `problems`, terms (c, trained, seeds)."""
    spread = assume.disagreement - assume.flip_rate
    problem_part = (spread / 2 * sum(c * c for c, _, _ in terms)
                    + sum(c * c * assume.flip_rate / (2 * s) for c, trained, s in terms if trained)) / problems
    seed_parts = [(c * c * assume.seed_spread ** 2 / s, s - 1) for c, trained, s in terms if trained]
    variance = problem_part + sum(v for v, _ in seed_parts)
    denominator = problem_part ** 2 / (problems - 1) + sum(v * v / nu for v, nu in seed_parts if nu > 0)
    if any(nu == 0 and v > 0 for v, nu in seed_parts):
        return math.sqrt(variance), 0.0
    return math.sqrt(variance), variance ** 2 / denominator if denominator else math.inf


@dataclass(frozen=True)
class Plan:
    """What a claim's test needs: its combination of methods and the size it must resolve."""

    key: str
    terms: tuple[tuple[str, float], ...]
    """(method, coefficient); the base model is the untrained one."""
    what: str
    size: float
    """The distance the test must tell apart at 80% power."""


def plans(retained_share: float, assume: Assumptions) -> dict[str, Plan]:
    f = retained_share
    parity = (f"margin (method − base) − {f:g} (GRPO − base); resolves {1 - f:g} x GRPO's gain "
              f"({100 * assume.grpo_gain:.1f} pp): a method keeping all of it against one keeping {f:.0%}")
    return {
        "essa_parity": Plan("essa_parity", (("essa", 1.0), ("base", f - 1), ("grpo", -f)), parity,
                            (1 - f) * assume.grpo_gain),
        "essam_parity": Plan("essam_parity", (("essam", 1.0), ("base", f - 1), ("grpo", -f)), parity,
                             (1 - f) * assume.grpo_gain),
        "fgrpo_passk": Plan("fgrpo_passk", (("fgrpo", 1.0), ("grpo", -1.0)),
                            "F-GRPO − GRPO in pass@n (planned as greedy); resolves half the paper's +6.2 pp",
                            claims.FGRPO_GAIN / 2),
        "corp_recovery": Plan("corp_recovery", (("corp", 1.0), ("base", -0.5), ("randopt", -0.5)),
                              "CoRP − ½ base − ½ RandOpt, tasks pooled; resolves half the paper's 4.05 pp",
                              claims.CORP_EFFECT / 2),
    }


def table(cfg, problems: dict[str, int], available: dict[str, int], assume: Assumptions) -> list[dict]:
    """One row per claim of reports/claims.py that `cfg`'s methods and tasks can test."""
    seeds, f = len(cfg.seeds), cfg.report.retained_share
    tasks_of = {c.key: getattr(c.comparison, "task", None) for c in claims.CLAIMS}
    testable = []
    for claim in claims.CLAIMS:
        task = tasks_of[claim.key]
        named = {getattr(claim.comparison, k) for k in ("method", "baseline", "ensemble", "floor", "base")
                 if getattr(claim.comparison, k, None)}
        if named <= set(cfg.methods) and (task is None or task in problems):
            testable.append(claim)
    tested = [c for c in testable if c.rule is not None]
    level = cfg.report.family_alpha / max(len(tested), 1)
    rows = []
    for claim in testable:
        row = {"claim": claim.key, "task": tasks_of[claim.key] or "pooled", "design": "", "tests": "",
               "size": "", "detectable": "", "decidable": "", "would": ""}
        plan = plans(f, assume).get(claim.key)
        if claim.rule is None:
            rows.append({**row, "tests": "a speed-up across cluster sizes", "decidable": "no, by construction",
                         "would": "training spread over 16 and 128 devices, which no job of this suite does"})
            continue
        if plan is None:
            rows.append({**row, **_unpaired(claim.key, cfg, seeds, level)})
            continue
        tasks = [row["task"]] if claim.key != "corp_recovery" else [t for t in problems]
        count, most = sum(problems[t] for t in tasks), sum(available.get(t, problems[t]) for t in tasks)

        def mde(s, p, plan=plan):
            terms = [(c, m != "base", s) for m, c in plan.terms]
            se, df = standard_error(terms, p, assume)
            return detectable(se, df, level, POWER) if df > 0 else math.inf

        found = mde(seeds, count)
        decidable = found <= plan.size and seeds >= cfg.report.min_seeds
        row.update(design=f"{count:,} problems x {seeds} seed{'s' if seeds != 1 else ''}", tests=plan.what,
                   size=f"{100 * plan.size:.2f} pp",
                   detectable=f"{100 * found:.2f} pp" if math.isfinite(found) else "none (one seed)",
                   decidable="yes" if decidable else "no")
        if not decidable:
            row["would"] = _smallest(mde, plan.size, seeds, count, most, cfg.report.min_seeds,
                                     "the task's" if len(tasks) == 1 else "the tasks'")
        rows.append(row)
    return rows


def _smallest(mde, size: float, seeds: int, problems: int, most: int, min_seeds: int, whose: str) -> str:
    """The fewest seeds at this many problems, and the fewest problems (up to the task's) at this
    many seeds (at least min_seeds); failing both, the fewest seeds on all the task's problems."""
    floor = max(seeds, min_seeds, 2)
    said = []
    fewest_seeds = next((s for s in range(max(2, min_seeds), MOST_SEEDS + 1) if mde(s, problems) <= size), None)
    if fewest_seeds:
        said.append(f"{fewest_seeds} seeds at {problems:,} problems")
    fewest_problems = next((p for p in [problems, *_grid(problems, most)] if mde(floor, p) <= size), None)
    if fewest_problems:
        said.append(f"{fewest_problems:,} problems at {floor} seeds")
    if not said:
        on_all = next((s for s in range(floor, MOST_SEEDS + 1) if mde(s, most) <= size), None)
        said.append(f"{on_all} seeds on all {most:,} of {whose} problems" if on_all
                    else f"more than {MOST_SEEDS} seeds even on all {most:,} of {whose} problems")
    return "; ".join(said)


def _grid(start: int, stop: int):
    p = start
    while p < stop:
        p = min(stop, max(p + 1, int(p * 1.05)))
        yield p


def _unpaired(key: str, cfg, seeds: int, level: float) -> dict:
    """The claims tested over paired runs rather than problems."""
    if key == "sazo_queries":
        runs = seeds * len([t for t in cfg.tasks])
        needed = math.ceil(math.log2(2 / level))
        return {"design": f"{runs} paired runs", "tests": "sign test of the queries ratio over paired runs",
                "size": "1.5x fewer queries in more runs than chance", "detectable": "—",
                "decidable": "yes" if runs >= needed else "no",
                "would": "" if runs >= needed else f"{needed} paired runs (seeds x tasks): all of them beyond the bar "
                                                   f"is then p = 2 x 0.5^{needed} <= {level:.3g}"}
    return {"design": f"{seeds} seed{'s' if seeds != 1 else ''}", "tests": "t-test of per-seed log memory ratios",
            "size": "5x", "detectable": "—",
            "decidable": "yes, where the saving is clear of the 5x bar (a measured cost varies little between seeds)"
            if seeds >= cfg.report.min_seeds else "no", "would": "" if seeds >= cfg.report.min_seeds
            else f"{cfg.report.min_seeds} seeds (report.min_seeds)"}


COLUMNS = ("claim", "task", "design", "tests", "size", "detectable", "decidable", "would")
TITLES = ("claim", "task", "design", "what the test reads", "size it must resolve", "detectable at 80% power",
          "decidable", "smallest design that would")


def render(cfg, problems: dict[str, int], available: dict[str, int], assume: Assumptions) -> str:
    rows = table(cfg, problems, available, assume)
    tested = sum(1 for r in rows if r["decidable"] != "no, by construction")
    lines = ["| " + " | ".join(TITLES) + " |", "|" + "---|" * len(TITLES)]
    lines += ["| " + " | ".join(r[c] for c in COLUMNS) + " |" for r in rows]
    return "\n".join([
        f"Power of the claim checks (reports/power.py): two-sided tests at Holm's first level, "
        f"{cfg.report.family_alpha:g} / {max(tested, 1)} claims; 80% power. Assumptions, {assume.source}: "
        f"flip rate between seeds {assume.flip_rate:.0%}, disagreement between methods {assume.disagreement:.0%}, "
        f"seed-to-seed spread {100 * assume.seed_spread:.1f} pp, GRPO's gain over the base model "
        f"{100 * assume.grpo_gain:.1f} pp (override: nograd plan --flip-rate --disagreement --seed-spread --grpo-gain, "
        "or --from results/summary.json).", "", *lines, ""])
