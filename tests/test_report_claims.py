"""The claim checks: the verdict rule on constructed intervals, and each comparison on constructed
evidence whose verdict is known, including claims whose methods did not run or whose metrics
are missing."""

import numpy as np
import pytest

from reports import claims
from reports.claims import (
    INCONCLUSIVE, MISSING, NOT_RUN, NOT_SUPPORTED, SUPPORTED, Evidence, PairedDifference,
    QueriesToLoss, RecoveredGain, SavingRatio, Threshold, check, decide,
)
from reports.scores import GREEDY, PASS, Intervals, ProblemScores

PROBLEMS = 60


def evidence(runs, histories=(), methods_config=None):
    """Evidence from {(method, task, seed): (greedy 0/1 list, correct-sample counts or None, train cost)}."""
    results, rows = [], []
    for (method, task, seed), (greedy, correct, train) in runs.items():
        results.append({"method": method, "task": task, "seed": seed, "problems": len(greedy) if greedy else PROBLEMS,
                        "cost": {"train": train or {}, "eval": {}}})
        if greedy is not None:
            counts = correct if correct is not None else [0] * len(greedy)
            rows.append({"method": method, "task": task, "seed": seed, "n": 4,
                         "problems": {f"p{i}": [g, c] for i, (g, c) in enumerate(zip(greedy, counts))}})
    header = {"model": "tiny", "hardware": "2-core x86_64 CPU, no GPU", "devices_per_job": 1,
              "methods": methods_config or {}}
    return Evidence(results, ProblemScores(rows), list(histories), header, Intervals(bootstrap_samples=500))


def share(fraction, size=PROBLEMS):
    """0/1 scores with the first `fraction` of problems correct."""
    solved = round(fraction * size)
    return [1] * solved + [0] * (size - solved)


# ---------------------------------------------------------------- the rule


@pytest.mark.parametrize("low, high, verdict", [
    (0.01, 0.2, SUPPORTED), (-0.2, -0.01, NOT_SUPPORTED), (-0.1, 0.1, INCONCLUSIVE),
    (0.0, 0.1, INCONCLUSIVE),  # touching the bar is not beyond it
    (-0.1, 0.0, NOT_SUPPORTED), (0.0, 0.0, NOT_SUPPORTED),
])
def test_gain_rule(low, high, verdict):
    assert decide(Threshold(0.0, 0.0, "gain"), low, high) == verdict


@pytest.mark.parametrize("low, high, verdict", [
    (6.0, 8.0, SUPPORTED), (0.5, 1.0, NOT_SUPPORTED), (2.0, 8.0, INCONCLUSIVE), (1.2, 4.0, INCONCLUSIVE),
    (0.9, 1.1, INCONCLUSIVE),
])
def test_ratio_rule_has_a_band_between_refuting_and_supporting(low, high, verdict):
    assert decide(Threshold(5.0, 1.0, "ratio"), low, high) == verdict


def test_rule_rejects_nonsense():
    with pytest.raises(ValueError):
        Threshold(0.0, 1.0, "refute above support")
    with pytest.raises(ValueError):
        decide(Threshold(0.0, 0.0, "gain"), 0.2, 0.1)


# ---------------------------------------------------------------- comparisons


def test_paired_difference_verdicts_follow_the_data():
    parity = Threshold(-0.05, -0.05, "parity")
    gain = Threshold(0.0, 0.0, "gain")
    rng = np.random.default_rng(0)
    base = [int(x) for x in rng.random(PROBLEMS) < 0.5]
    better = [1] * PROBLEMS
    worse = [0] * PROBLEMS
    flipped = [1 - b if i % 10 == 0 else b for i, b in enumerate(base)]  # 6 of 60 problems change
    cases = [(better, parity, SUPPORTED), (better, gain, SUPPORTED), (worse, parity, NOT_SUPPORTED),
             (worse, gain, NOT_SUPPORTED), (flipped, gain, INCONCLUSIVE)]
    for scores, rule, verdict in cases:
        ev = evidence({("essam", "gsm8k", 0): (scores, None, None), ("grpo", "gsm8k", 0): (base, None, None)})
        claim = claims.Claim("c", "essam", "claim", "figure", PairedDifference("essam", "grpo", "gsm8k"), rule)
        row = check(claim, ev)
        assert row["verdict"] == verdict, (scores, row)
        assert "greedy accuracy" in row["ours"] and "60 test problems" in row["scale"]


def test_paired_difference_on_pass_at_n_averages_seeds():
    ev = evidence({
        ("fgrpo", "math", 0): (share(0.5), [4] * PROBLEMS, None),
        ("fgrpo", "math", 1): (share(0.5), [2] * PROBLEMS, None),
        ("grpo", "math", 0): (share(0.5), [0] * PROBLEMS, None),
    })
    finding = PairedDifference("fgrpo", "grpo", "math", PASS).measure(ev)
    # pass@4 of 4/4 correct is 1 and of 2/4 correct is 1: F-GRPO 100% against GRPO's 0%.
    assert finding.low == pytest.approx(1.0) and "pass@4" in finding.ours and "2 seeds" in finding.scale


def test_not_run_and_missing_data_are_named():
    only_grpo = evidence({("grpo", "math", 0): (share(0.5), None, None)})
    row = check(claims.CLAIMS[0], only_grpo)
    assert row["verdict"] == NOT_RUN and row["reason"] == "ESSA was not run on math"
    without_scores = evidence({("essa", "math", 0): (None, None, None), ("grpo", "math", 0): (share(0.5), None, None)})
    row = check(claims.CLAIMS[0], without_scores)
    assert row["verdict"] == MISSING and "completions.jsonl" in row["reason"] and "ESSA" in row["reason"]


def test_memory_ratio():
    def verdict(essam_mb, grpo_mb):
        runs = {("essam", "gsm8k", s): (share(0.5), None, {"peak_memory_mb": e}) for s, e in enumerate(essam_mb)}
        runs.update({("grpo", "gsm8k", s): (share(0.5), None, {"peak_memory_mb": g}) for s, g in enumerate(grpo_mb)})
        claim = claims.Claim("m", "essam", "memory", "10x", SavingRatio("essam", "grpo", "gsm8k"),
                             Threshold(5.0, 1.0, "ratio"))
        return check(claim, evidence(runs))

    assert verdict([1000], [10000])["verdict"] == SUPPORTED
    assert "10.00x" in verdict([1000], [10000])["ours"]
    assert verdict([1000], [800])["verdict"] == NOT_SUPPORTED
    assert verdict([1000], [3000])["verdict"] == INCONCLUSIVE
    mixed = verdict([1000, 1000], [6000, 4000])
    assert mixed["verdict"] == INCONCLUSIVE and "per seed 4.00–6.00x" in mixed["ours"], "every seed must clear the bar"
    no_training = check(claims.Claim("m", "essam", "memory", "10x", SavingRatio("essam", "grpo", "gsm8k"),
                                     Threshold(5.0, 1.0, "ratio")),
                        evidence({("essam", "gsm8k", 0): (share(0.5), None, None),
                                  ("grpo", "gsm8k", 0): (share(0.5), None, {"peak_memory_mb": 10.0})}))
    assert no_training["verdict"] == MISSING and "peak_memory_mb" in no_training["reason"]


def loss_history(losses, queries_per_step=4):
    return [{"step": i, "loss": loss, "forward_equivalents": queries_per_step * (i + 1)} for i, loss in enumerate(losses)]


def test_queries_to_loss():
    mezo = np.linspace(2.0, 1.0, 100)
    fast = np.concatenate([np.linspace(2.0, 0.9, 40), np.full(60, 0.9)])
    never = np.full(100, 1.5)
    rule = claims.CLAIMS[3].rule

    def run(sazo_losses, drop_loss=False):
        histories = [{"method": "mezo", "task": "gsm8k", "seed": 0, "history": loss_history(mezo)},
                     {"method": "sazo", "task": "gsm8k", "seed": 0, "history": loss_history(sazo_losses)}]
        if drop_loss:
            for step in histories[1]["history"]:
                del step["loss"]
        runs = {("mezo", "gsm8k", 0): (share(0.5), None, None), ("sazo", "gsm8k", 0): (share(0.5), None, None)}
        claim = claims.Claim("s", "sazo", "queries", "6x", QueriesToLoss("sazo", "mezo"), rule)
        return check(claim, evidence(runs, histories))

    assert run(fast)["verdict"] == SUPPORTED
    assert 2.0 < run(fast)["interval"][0] < 3.0, "about 2.5x fewer queries (40 steps of 100, smoothed)"
    assert run(mezo)["verdict"] == NOT_SUPPORTED, "the same curve needs as many queries"
    slow = run(never)
    assert slow["verdict"] == NOT_SUPPORTED and "never reached" in slow["ours"]
    missing = run(fast, drop_loss=True)
    assert missing["verdict"] == MISSING and "has no loss" in missing["reason"]


def test_recovered_gain():
    rule = claims.CLAIMS[4].rule

    def run(corp, randopt, corp_population=500, randopt_population=5000):
        runs = {("base", "gsm8k", 0): (share(0.2), None, None), ("randopt", "gsm8k", 0): (share(randopt), None, None),
                ("corp", "gsm8k", 0): (share(corp), None, None)}
        config = {"corp": {"population": corp_population}, "randopt": {"population": randopt_population, "top_k": 50}}
        claim = claims.Claim("c", "corp", "recovery", "half", RecoveredGain("corp", "randopt", "base"), rule)
        return check(claim, evidence(runs, methods_config=config))

    assert run(0.55, 0.6)["verdict"] == SUPPORTED and "88% recovered" in run(0.55, 0.6)["ours"]
    assert run(0.22, 0.6)["verdict"] == NOT_SUPPORTED
    budget = run(0.55, 0.6, corp_population=3, randopt_population=8)
    assert budget["verdict"] == INCONCLUSIVE and "38%" in budget["reason"] and "10%" in budget["reason"]
    no_gain = run(0.2, 0.2)
    assert no_gain["verdict"] == INCONCLUSIVE and "no gain to recover" in no_gain["reason"]
    assert check(claims.CLAIMS[4], evidence({("base", "gsm8k", 0): (share(0.2), None, None)}))["verdict"] == NOT_RUN


def test_cluster_speedup_cannot_be_tested_on_one_device_per_job():
    runs = {("essa", "math", 0): (share(0.5), None, {"wall_clock_s": 100.0}),
            ("grpo", "math", 0): (share(0.5), None, {"wall_clock_s": 300.0})}
    row = check(claims.CLAIMS[1], evidence(runs))
    assert row["verdict"] == INCONCLUSIVE and "16 and 128" in row["reason"] and "3.00x" in row["ours"]
    assert check(claims.CLAIMS[1], evidence({}))["verdict"] == NOT_RUN


def test_every_claim_states_its_rule_and_reads_not_run_without_results():
    rows = claims.check_all(evidence({}))
    assert [row["verdict"] for row in rows] == [NOT_RUN] * len(claims.CLAIMS)
    assert len({c.key for c in claims.CLAIMS}) == len(claims.CLAIMS) == 7
    for claim in claims.CLAIMS:
        assert claims.rule_text(claim)
        assert claim.paper_figure and claim.paper in {"essa", "fgrpo", "sazo", "corp", "essam"}
    assert {GREEDY, PASS} == {c.comparison.metric for c in claims.CLAIMS if isinstance(c.comparison, PairedDifference)}
