"""The power planner (reports/power.py) against simulated crossed data with known truth: its
standard error is the one the estimate shows over repeated runs, its assumptions can be measured
from a run's per-problem scores, and the design it says has 80% power gets the parity verdict at
least 80% of the time through the real claim code."""

import math

import numpy as np

from benchmarks.calibration import Method, draw
from reports import power
from reports.intervals import crossed, detectable
from test_calibration import parity_verdicts

F = 0.8
ESSAM, BASE, GRPO = Method(0.5, 0.01), Method(0.3, 0.0), Method(0.5, 0.01)


def summary_of(rng, seeds: int, problems: int) -> dict:
    """A summary's per-problem rows for one simulated run of the three methods."""
    ours, base, grpo = (t[0] for t in draw(rng, [ESSAM, BASE, GRPO], [seeds, 0, seeds], 1, problems))
    rows = []
    for method, matrix in (("essam", ours), ("base", np.repeat(base, seeds, axis=0)), ("grpo", grpo)):
        rows += [{"method": method, "task": "gsm8k", "seed": s, "n": 0,
                  "problems": {f"p{i}": [int(v), 0] for i, v in enumerate(row)}} for s, row in enumerate(matrix)]
    return {"per_problem": rows}


def planned(assume: power.Assumptions, seeds: int, problems: int) -> tuple[float, float]:
    terms = [(1.0, True, seeds), (F - 1, False, seeds), (-F, True, seeds)]
    return power.standard_error(terms, problems, assume)


def test_assumptions_are_measured_from_a_runs_scores():
    assume = power.Assumptions.measured(summary_of(np.random.default_rng(0), 10, 4000))
    assert "nothing assumed" in assume.source
    assert abs(assume.grpo_gain - 0.2) < 0.01
    assert abs(assume.flip_rate - 0.1) < 0.02, "the simulation's flip rate"
    assert 0.005 < assume.seed_spread < 0.02


def test_the_planned_standard_error_is_the_estimates_spread():
    rng = np.random.default_rng(1)
    assume = power.Assumptions.measured(summary_of(rng, 10, 4000))
    margins = []
    for _ in range(300):
        ours, base, grpo = (t[0] for t in draw(rng, [ESSAM, BASE, GRPO], [3, 0, 3], 1, 500))
        margins.append(crossed([ours, base, grpo], [1.0, F - 1, -F]).value)
    se, df = planned(assume, 3, 500)
    assert 0.85 < se / np.std(margins, ddof=1) < 1.15, (se, np.std(margins, ddof=1))
    assert 2 < df < 500


def test_the_design_planned_for_80_percent_power_gets_it():
    """ESSAM keeps all of GRPO's 20-point gain: the margin is 4 points. The planner's fewest seeds
    for it at 1,319 problems (a family of one, as `check` judges) must support it 80% of the time."""
    rng = np.random.default_rng(2)
    assume = power.Assumptions.measured(summary_of(rng, 10, 4000))
    size = (1 - F) * assume.grpo_gain
    seeds = next(s for s in range(2, 40) if detectable(*planned(assume, s, 1319), 0.05) <= size)
    assert 2 < seeds < 20 and not math.isinf(seeds)
    verdicts = parity_verdicts(np.random.default_rng(3), 80, 1319, retained=1.0, grpo_gain=0.2, seeds=seeds)
    assert verdicts.count("supported") / len(verdicts) >= 0.8, (seeds, verdicts)
