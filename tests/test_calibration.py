"""The report's intervals and verdicts against simulated crossed seeds x problems data with known
truth (benchmarks/calibration.py's model): the intervals cover, and the verdict rules, run through
the real claim code, make the errors they promise and no more (their power at the planner's
design: tests/test_power.py)."""

import numpy as np
import pytest

from benchmarks.calibration import Method, coverage, draw
from reports import claims
from reports.scores import Intervals, ProblemScores
from reports.verdicts import NOT_SUPPORTED, SUPPORTED, Evidence


@pytest.mark.parametrize("problems, spread", [(200, 0.0), (1319, 0.03)])
def test_intervals_cover_in_the_hardest_cells(problems, spread):
    """Three seeds: no seed variance (where the old bootstrap gave 99%) and 3 points of it (84%)."""
    found = coverage(np.random.default_rng(problems), 1000, problems, 3, 0.5, spread)
    for name, share in found.items():
        assert 0.93 <= share <= 0.97, (name, found)


def simulated_evidence(scores: dict[str, np.ndarray], task: str, samples: dict[str, np.ndarray] | None = None):
    """Evidence of one simulated run: method -> (seeds x problems) greedy 0/1 scores (and sampled
    correct counts of n = 8), every method scored on the same problems."""
    results, rows = [], []
    for method, matrix in scores.items():
        for seed, row in enumerate(matrix):
            correct = samples[method][seed] if samples else np.zeros_like(row)
            results.append({"method": method, "task": task, "seed": seed, "problems": len(row),
                            "cost": {"train": {}, "eval": {}}})
            rows.append({"method": method, "task": task, "seed": seed, "n": 8,
                         "problems": {f"p{i}": [int(g), int(c)] for i, (g, c) in enumerate(zip(row, correct))}})
    return Evidence(results, ProblemScores(rows), [], {"model": "simulated", "report": {}}, Intervals())


def parity_verdicts(rng, runs: int, problems: int, retained: float, grpo_gain: float = 0.05,
                    spread: float = 0.01, seeds: int = 3) -> list[str]:
    """Verdicts of ESSAM's parity claim over simulated runs in which GRPO gains `grpo_gain` over a
    30% base model and ESSAM keeps `retained` of that gain."""
    base = Method(0.3, 0.0)
    grpo = Method(0.3 + grpo_gain, spread)
    essam = Method(0.3 + retained * grpo_gain, spread)
    verdicts = []
    for _ in range(runs):
        ours, floor, theirs = (t[0] for t in draw(rng, [essam, base, grpo], [seeds, 0, seeds], 1, problems))
        floor = np.repeat(floor, seeds, axis=0)  # the untrained model's evaluations agree
        ev = simulated_evidence({"essam": ours, "base": floor, "grpo": theirs}, "gsm8k")
        verdicts.append(claims.check(claims.CLAIMS[5], ev)["verdict"])
    return verdicts


def test_a_do_nothing_method_rarely_matches_grpo():
    """The method equals the base model and GRPO really gains 5 points: 'supported' at most 5% of the time."""
    verdicts = parity_verdicts(np.random.default_rng(1), 150, 1319, retained=0.0)
    assert verdicts.count(SUPPORTED) / len(verdicts) <= 0.05
    assert verdicts.count(NOT_SUPPORTED) / len(verdicts) >= 0.5, "and it is found out more often than not"


def test_a_method_at_the_bar_is_supported_at_the_rules_level_at_most():
    """Keeping exactly f = 80% of GRPO's gain is the null: 'supported' in at most 2.5% (+ Monte Carlo slack)."""
    verdicts = parity_verdicts(np.random.default_rng(2), 200, 500, retained=0.8, grpo_gain=0.1)
    assert verdicts.count(SUPPORTED) / len(verdicts) <= 0.05


def test_a_small_precise_gain_never_supports_a_big_claim():
    """F-GRPO +0.3 points over GRPO in pass@8 against the paper's +6.2: never 'supported'."""
    rng = np.random.default_rng(4)
    verdicts = []
    for _ in range(40):
        base, grpo, fgrpo = Method(0.3, 0.0), Method(0.5, 0.005), Method(0.503, 0.005)
        greedy = draw(rng, [base, grpo, grpo], [0, 3, 3], 1, 1319)
        solved = draw(rng, [base, grpo, fgrpo], [0, 3, 3], 1, 1319)
        scores = {"base": np.repeat(greedy[0][0], 3, axis=0), "grpo": greedy[1][0], "fgrpo": greedy[2][0]}
        samples = {"base": 8 * np.repeat(solved[0][0], 3, axis=0), "grpo": 8 * solved[1][0],
                   "fgrpo": 8 * solved[2][0]}
        row = claims.check(claims.CLAIMS[2], simulated_evidence(scores, "math", samples))
        verdicts.append(row["verdict"])
    assert SUPPORTED not in verdicts
    assert NOT_SUPPORTED in verdicts, "and it is ruled out where the interval is narrow enough"
