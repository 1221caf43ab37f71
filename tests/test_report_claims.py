"""The claim checks: the verdict rule on constructed intervals, the power, seed and floor
requirements that keep a verdict from data that cannot carry it, and each comparison on
constructed evidence whose verdict is known, including claims whose methods did not run or whose
metrics are missing."""

import numpy as np
import pytest

from evals.tasks import TASKS
from methods import METHODS
from reports import claims
from reports.claims import (
    INCONCLUSIVE,
    MISSING,
    NOT_RUN,
    NOT_SUPPORTED,
    SUPPORTED,
    Evidence,
    PairedDifference,
    QueriesToLoss,
    RecoveredGain,
    SavingRatio,
    Threshold,
    check,
    decide,
    detectable,
)
from reports.scores import GREEDY, PASS, Intervals, ProblemScores

PROBLEMS = 400
SEEDS = (0, 1, 2)
DEFINITE = {SUPPORTED, NOT_SUPPORTED}


def evidence(runs, histories=(), methods_config=None, min_seeds=None, samples=4):
    """Evidence from {(method, task, seed): (greedy 0/1 list, correct-sample counts or None, train cost)}."""
    results, rows = [], []
    for (method, task, seed), (greedy, correct, train) in runs.items():
        results.append({"method": method, "task": task, "seed": seed, "problems": len(greedy) if greedy else PROBLEMS,
                        "cost": {"train": train or {}, "eval": {}}})
        if greedy is not None:
            counts = correct if correct is not None else [0] * len(greedy)
            rows.append({"method": method, "task": task, "seed": seed, "n": samples,
                         "problems": {f"p{i}": [g, c] for i, (g, c) in enumerate(zip(greedy, counts))}})
    header = {"model": "tiny", "hardware": "2-core x86_64 CPU, no GPU", "devices_per_job": 1,
              "methods": methods_config or {}}
    if min_seeds is not None:
        header["report"] = {"min_seeds": min_seeds}
    return Evidence(results, ProblemScores(rows), list(histories), header, Intervals(bootstrap_samples=500))


def share(fraction, size=PROBLEMS):
    """0/1 scores with the first `fraction` of problems correct."""
    solved = round(fraction * size)
    return [1] * solved + [0] * (size - solved)


def seeded(method, task, greedy, correct=None, train=None, seeds=SEEDS):
    """The same scores for each seed."""
    return {(method, task, seed): (greedy, correct, train) for seed in seeds}


def claim_of(comparison, rule):
    return claims.Claim("c", "essam", "claim", "figure", comparison, rule)


PARITY = Threshold(-0.05, -0.05, "parity", margin=0.05)
GAIN = Threshold(0.0, 0.0, "gain", margin=0.062)


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


def test_detectable_effect_is_never_below_the_resolution_of_the_problems():
    # A degenerate interval is no evidence of power: 8 problems cannot show less than about 37 points.
    assert detectable(0.0, 0.0, 8, 0.95) == pytest.approx(1 - 0.025 ** (1 / 8))
    assert 0.36 < detectable(0.0, 0.0, 8, 0.95) < 0.37
    assert detectable(0.0, 0.0, 200, 0.95) == pytest.approx(0.0183, abs=1e-4)
    assert detectable(-0.1, 0.1, 200, 0.95) == pytest.approx(0.1), "a wide interval: its half-width"


def test_a_bootstrap_comparison_needs_a_rule_with_a_margin():
    runs = {**seeded("essam", "gsm8k", share(0.6)), **seeded("grpo", "gsm8k", share(0.6)),
            **seeded("base", "gsm8k", share(0.2))}
    with pytest.raises(ValueError, match="margin"):
        check(claim_of(PairedDifference("essam", "grpo", "gsm8k"), Threshold(-0.05, -0.05, "parity")), evidence(runs))


# ---------------------------------------------------------------- paired differences


def test_paired_difference_verdicts_follow_the_data():
    grpo = share(0.5)
    better = share(0.65)  # every problem GRPO solves, and 15% more
    worse = share(0.4)
    equal_but_four = [1 - g if i % 25 == 0 else g for i, g in enumerate(grpo)]  # 16 of 400 problems flip
    flipped = [1 - g if i % 10 == 0 else g for i, g in enumerate(grpo)]  # 40 of 400 problems flip
    cases = [(better, PARITY, SUPPORTED), (better, GAIN, SUPPORTED), (equal_but_four, PARITY, SUPPORTED),
             (worse, PARITY, NOT_SUPPORTED), (worse, GAIN, NOT_SUPPORTED), (flipped, GAIN, INCONCLUSIVE)]
    for scores, rule, verdict in cases:
        runs = {**seeded("essam", "gsm8k", scores), **seeded("grpo", "gsm8k", grpo),
                **seeded("base", "gsm8k", share(0.2))}
        row = check(claim_of(PairedDifference("essam", "grpo", "gsm8k"), rule), evidence(runs))
        assert row["verdict"] == verdict, (scores, row)
        assert "greedy accuracy" in row["ours"] and "400 test problems" in row["scale"] and "3 seeds" in row["scale"]
        assert 0 < row["detectable"] < rule.margin
        if verdict == INCONCLUSIVE:
            assert "neither wholly beyond the claim's bar nor wholly short of it" in row["reason"]


def test_paired_difference_on_pass_at_n_averages_seeds():
    ev = evidence({
        ("fgrpo", "math", 0): (share(0.5), [4] * PROBLEMS, None),
        ("fgrpo", "math", 1): (share(0.5), [2] * PROBLEMS, None),
        ("grpo", "math", 0): (share(0.5), [0] * PROBLEMS, None),
    })
    finding = PairedDifference("fgrpo", "grpo", "math", PASS).measure(ev)
    # pass@4 of 4/4 correct is 1 and of 2/4 correct is 1: F-GRPO 100% against GRPO's 0%.
    assert finding.low == pytest.approx(1.0) and "pass@4" in finding.ours and "2 seeds" in finding.scale
    assert finding.seeds == 1, "GRPO has one seed"
    assert finding.doubts == ("Base model was not run on math, so nothing shows that GRPO moved off it",)


def test_a_real_gain_is_supported_and_no_gain_with_wide_intervals_is_inconclusive():
    n = 8

    def solved(solved_problems, size):
        """Correct samples of n: 2 on the given problems, none elsewhere (pass@8: 1 or 0)."""
        return [2 if i in solved_problems else 0 for i in range(size)]

    def runs(fgrpo_solved, grpo_solved, size):
        # Base: greedy 20%; GRPO: greedy 50%, clearly off the base model.
        out = {}
        for seed in SEEDS:
            out[("base", "math", seed)] = (share(0.2, size), solved(range(size // 10), size), None)
            out[("grpo", "math", seed)] = (share(0.5, size), solved(grpo_solved, size), None)
            out[("fgrpo", "math", seed)] = (share(0.5, size), solved(fgrpo_solved(seed), size), None)
        return out

    fgrpo = claims.CLAIMS[2]
    # 200 problems: GRPO's samples solve 40% of them, F-GRPO's those and 15% more (a problem more or less per seed).
    gain = check(fgrpo, evidence(runs(lambda seed: range(110 + seed - 1), range(80), 200), samples=n))
    assert gain["verdict"] == SUPPORTED, gain
    assert 0.08 < gain["interval"][0] and gain["interval"][1] < 0.22 and "+15.0 pp" in gain["ours"]
    assert gain["detectable"] < claims.FGRPO_GAIN
    # 40 problems: both solve 16 of them, not the same 16: no gain, and an interval of about ±20 points.
    no_gain = check(fgrpo, evidence(runs(lambda seed: range(8, 24), range(16), 40), samples=n))
    assert no_gain["verdict"] == INCONCLUSIVE and no_gain["interval"][0] < 0 < no_gain["interval"][1]
    assert "the smallest effect this run could detect is" in no_gain["reason"] and "6.2 pp" in no_gain["reason"]


def test_a_definite_verdict_needs_min_seeds_training_seeds():
    one_seed = {**seeded("essam", "gsm8k", share(0.5), seeds=(0,)), **seeded("grpo", "gsm8k", share(0.5), seeds=(0,)),
                **seeded("base", "gsm8k", share(0.2), seeds=(0,))}
    claim = claim_of(PairedDifference("essam", "grpo", "gsm8k"), PARITY)
    row = check(claim, evidence(one_seed))
    assert row["verdict"] == INCONCLUSIVE
    assert row["reason"] == ("this run has 1 training seed of a compared method, and a definite verdict needs at "
                             "least 3 of each (report.min_seeds)")
    assert check(claim, evidence(one_seed, min_seeds=1))["verdict"] == SUPPORTED, "the config sets the requirement"
    assert check(claim, evidence({**one_seed, **seeded("essam", "gsm8k", share(0.5))}))["verdict"] == INCONCLUSIVE, \
        "GRPO still has one seed"


def test_a_comparison_needs_grpo_off_the_base_model():
    runs = {**seeded("essam", "gsm8k", share(0.5)), **seeded("grpo", "gsm8k", share(0.5)),
            **seeded("base", "gsm8k", share(0.5))}
    row = check(claim_of(PairedDifference("essam", "grpo", "gsm8k"), PARITY), evidence(runs))
    assert row["verdict"] == INCONCLUSIVE
    assert row["reason"] == ("no method moved off the base model: GRPO − Base model, greedy accuracy on gsm8k, is "
                             "+0.0 pp [+0.0, +0.0], not above 0")


def all_zero_evidence(problems, seeds, methods_config=None):
    """Every method scores 0 on every problem and its losses stay flat; no memory is recorded."""
    runs, histories = {}, []
    for method in METHODS:
        for task in TASKS:
            runs.update(seeded(method, task, [0] * problems, [0] * problems, {"forward_passes": 64}, seeds))
            for seed in seeds:
                history = [{"step": i, "forward_equivalents": 4 * i, "heldout_loss": 2.0, "perturbations": 4}
                           for i in range(5)]
                histories.append({"method": method, "task": task, "seed": seed, "history": history})
    return evidence(runs, histories, methods_config)


@pytest.mark.parametrize("problems, seeds", [(200, SEEDS), (8, (0,))])
def test_all_zero_results_give_no_definite_verdict(problems, seeds):
    rows = claims.check_all(all_zero_evidence(problems, seeds))
    for row in rows:
        assert row["verdict"] not in DEFINITE, row
        assert row["reason"], row
    by_key = {row["key"]: row for row in rows}
    for key in ("essa_parity", "fgrpo_passk", "essam_parity"):
        assert by_key[key]["verdict"] == INCONCLUSIVE
        assert "no method moved off the base model" in by_key[key]["reason"]
        assert by_key[key]["detectable"] == pytest.approx(1 - 0.025 ** (1 / problems)), "[0, 0] is not power"
    assert "there is no gain to recover" in by_key["corp_recovery"]["reason"]
    assert "does not decrease beyond noise" in by_key["sazo_queries"]["reason"]
    assert by_key["essam_memory"]["verdict"] == MISSING


# ---------------------------------------------------------------- ESSA's warm-start control


WARM_START = {"lora_rank": 4, "lora_alpha": 8.0, "target_modules": ["q_proj", "v_proj"], "sft_steps": 4,
              "sft_batch_size": 4, "sft_lr": 2e-4, "sft_weight_decay": 0.0, "self_samples": 4, "self_temperature": 0.7}


def test_essa_row_says_how_much_of_it_the_warm_start_reaches():
    runs = {**seeded("essa", "math", share(0.6)), **seeded("sft", "math", share(0.45)),
            **seeded("grpo", "math", share(0.6)), **seeded("base", "math", share(0.2))}
    config = {"essa": {**WARM_START, "generations": 2}, "sft": dict(WARM_START)}
    row = check(claims.CLAIMS[0], evidence(runs, methods_config=config))
    assert row["verdict"] == SUPPORTED
    assert "SFT (ESSA's warm start) alone: 45.0% vs ESSA 60.0%, a difference of +15.0 pp" in row["ours"]
    assert "does not match" not in row["ours"]
    other = {**config, "sft": {**WARM_START, "sft_steps": 8}}
    assert "the control does not match ESSA's warm start (sft_steps: 8 vs 4)" in \
        check(claims.CLAIMS[0], evidence(runs, methods_config=other))["ours"]
    without = {k: v for k, v in runs.items() if k[0] != "sft"}
    assert "SFT (ESSA's warm start): not run" in check(claims.CLAIMS[0], evidence(without))["ours"]


# ---------------------------------------------------------------- other comparisons


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
        return check(claim_of(SavingRatio("essam", "grpo", "gsm8k"), Threshold(5.0, 1.0, "ratio")), evidence(runs))

    assert verdict([1000] * 3, [10000] * 3)["verdict"] == SUPPORTED
    assert "10.00x" in verdict([1000] * 3, [10000] * 3)["ours"]
    assert verdict([1000] * 3, [800] * 3)["verdict"] == NOT_SUPPORTED
    assert verdict([1000] * 3, [3000] * 3)["verdict"] == INCONCLUSIVE
    mixed = verdict([1000] * 3, [6000, 4000, 6000])
    assert mixed["verdict"] == INCONCLUSIVE and "per seed 4.00–6.00x" in mixed["ours"], "every seed must clear the bar"
    one_seed = verdict([1000], [10000])
    assert one_seed["verdict"] == INCONCLUSIVE and "report.min_seeds" in one_seed["reason"]
    no_training = check(claim_of(SavingRatio("essam", "grpo", "gsm8k"), Threshold(5.0, 1.0, "ratio")),
                        evidence({("essam", "gsm8k", 0): (share(0.5), None, None),
                                  ("grpo", "gsm8k", 0): (share(0.5), None, {"peak_memory_mb": 10.0})}))
    assert no_training["verdict"] == MISSING and "peak_memory_mb" in no_training["reason"]


def heldout_history(points, queries_per_point=100, every=1):
    """A training history with `heldout_loss` at every `every`-th step, from step 0, queries counting from 0."""
    history = []
    for i, loss in enumerate(points):
        for step in range(i * every, (i + 1) * every):
            row = {"step": step, "forward_equivalents": step * queries_per_point // every, "loss": 9.0}
            if step == i * every:
                row["heldout_loss"] = loss
            history.append(row)
    return history


def test_a_loss_decreases_beyond_noise_only_when_its_fall_outweighs_its_rises():
    assert claims.decreases(np.linspace(2.0, 1.99, 5)), "a steady fall, however small"
    drop = np.concatenate([[2.0, 1.2], 1.0 + 0.01 * np.random.default_rng(0).standard_normal(30)])
    assert claims.decreases(drop), "a steep drop, then small jitter"
    steps = 0.05 * np.random.default_rng(1).standard_normal(199)
    steps -= steps.mean() + 0.01 / 199  # a random walk that ends 0.01 below its start
    assert not claims.decreases(2.0 + np.concatenate([[0.0], np.cumsum(steps)])), "it rises as much as it falls"
    assert not claims.decreases([2.0, 1.0]), "two points show no noise"
    assert not claims.decreases([2.0, 2.0, 2.0])


def test_queries_to_loss_on_heldout_curves():
    mezo = np.linspace(2.0, 1.0, 31)  # target 2.0 - 0.9 = 1.1, reached at point 27 (2,700 queries)
    third = np.concatenate([np.linspace(2.0, 1.0, 11), np.full(20, 1.0)])  # reaches 1.1 at point 9 (900 queries)
    never = np.full(31, 1.5)
    rule = claims.CLAIMS[3].rule

    def run(sazo_curves, mezo_curves=None, seeds=SEEDS, drop=False):
        mezo_curves = mezo_curves or [mezo] * len(seeds)
        histories, runs = [], {}
        for seed, sazo, base in zip(seeds, sazo_curves, mezo_curves):
            histories += [{"method": "mezo", "task": "gsm8k", "seed": seed, "history": heldout_history(base, every=2)},
                          {"method": "sazo", "task": "gsm8k", "seed": seed, "history": heldout_history(sazo, every=2)}]
            runs.update({("mezo", "gsm8k", seed): (share(0.5), None, None),
                         ("sazo", "gsm8k", seed): (share(0.5), None, None)})
        if drop:
            for step in histories[1]["history"]:
                step.pop("heldout_loss", None)
        return check(claims.Claim("s", "sazo", "queries", "6x", QueriesToLoss("sazo", "mezo"), rule),
                     evidence(runs, histories))

    # SAZO at a third of MeZO's queries, a little slower on one seed.
    slower = np.concatenate([np.linspace(2.0, 1.0, 13), np.full(18, 1.0)])
    fast = run([third, third, slower])
    assert fast["verdict"] == SUPPORTED, fast
    assert fast["interval"] == [pytest.approx(2700 / 1100), pytest.approx(3.0)]
    assert "2.45–3.00x fewer queries over 3 paired runs" in fast["ours"] and "90%" in fast["scale"]
    assert run([mezo] * 3)["verdict"] == NOT_SUPPORTED, "the same curve needs as many queries"
    slow = run([never] * 3)
    assert slow["verdict"] == NOT_SUPPORTED and "never reached MeZO's target in 3 of 3" in slow["ours"]
    assert run([third], seeds=(0,))["verdict"] == INCONCLUSIVE, "one seed"
    jitter = np.array([2.0, 1.9, 2.05, 1.95, 2.02, 1.97])  # down 0.03 overall, up 0.15 on the way
    flat = run([third] * 3, mezo_curves=[jitter] * 3)
    assert flat["verdict"] == INCONCLUSIVE and "MeZO's held-out loss does not decrease beyond noise" in flat["reason"]
    missing = run([third] * 3, drop=True)
    assert missing["verdict"] == MISSING and "has no heldout_loss" in missing["reason"]


def test_recovered_gain():
    rule = claims.CLAIMS[4].rule

    def run(corp, randopt, corp_drawn=(500, 500), randopt_drawn=5000, corp_passes=10_000, randopt_passes=200_000):
        runs = {**seeded("base", "gsm8k", share(0.2)), **seeded("randopt", "gsm8k", share(randopt),
                                                                  train={"forward_passes": randopt_passes}),
                **seeded("corp", "gsm8k", share(corp), train={"forward_passes": corp_passes})}
        histories = []
        for seed in SEEDS:
            # CoRP logs its count at Stage 0 and again after its re-centring rounds (Stage 2).
            corp_history = [{"step": i, "perturbations": drawn} for i, drawn in enumerate(corp_drawn)]
            histories += [{"method": "corp", "task": "gsm8k", "seed": seed, "history": corp_history},
                          {"method": "randopt", "task": "gsm8k", "seed": seed,
                           "history": [{"step": 0, "perturbations": randopt_drawn}]}]
        config = {"corp": {"population": 500}, "randopt": {"population": 5000, "top_k": 50}}
        claim = claims.Claim("c", "corp", "recovery", "half", RecoveredGain("corp", "randopt", "base"), rule)
        return check(claim, evidence(runs, histories, methods_config=config))

    supported = run(0.55, 0.6)
    assert supported["verdict"] == SUPPORTED and "88% recovered" in supported["ours"]
    assert "perturbations 500 vs 5,000 (10%)" in supported["ours"]
    assert run(0.22, 0.6)["verdict"] == NOT_SUPPORTED
    stage_two = run(0.55, 0.6, corp_drawn=(500, 600))
    assert stage_two["verdict"] == INCONCLUSIVE, "Stage 2's perturbations push CoRP past a tenth"
    assert "CoRP spent 12% of RandOpt's perturbations, and the claim is about 10%" in stage_two["reason"]
    passes = run(0.55, 0.6, corp_passes=40_000)
    assert passes["verdict"] == INCONCLUSIVE
    assert "CoRP spent 20% of RandOpt's training forward passes" in passes["reason"]
    no_gain = run(0.2, 0.2)
    assert no_gain["verdict"] == INCONCLUSIVE and "no gain to recover" in no_gain["reason"]
    unlogged = run(0.55, 0.6, corp_drawn=())
    assert unlogged["verdict"] == MISSING and "no perturbations in the training history of CoRP" in unlogged["reason"]
    assert check(claims.CLAIMS[4], evidence({("base", "gsm8k", 0): (share(0.2), None, None)}))["verdict"] == NOT_RUN


def test_cluster_speedup_cannot_be_tested_on_one_device_per_job():
    runs = {("essa", "math", 0): (share(0.5), None, {"wall_clock_s": 100.0}),
            ("grpo", "math", 0): (share(0.5), None, {"wall_clock_s": 300.0})}
    row = check(claims.CLAIMS[1], evidence(runs))
    assert row["verdict"] == INCONCLUSIVE and "16 and 128" in row["reason"] and "3.00x" in row["ours"]
    assert check(claims.CLAIMS[1], evidence({}))["verdict"] == NOT_RUN


def test_cluster_speedup_row_gives_the_model_as_a_model_and_stays_inconclusive():
    from reports import cluster_model

    runs = {("essa", "math", 0): (share(0.5), None, None), ("grpo", "math", 0): (share(0.5), None, None)}
    row = check(claims.CLAIMS[1], evidence(runs))
    predicted = [cluster_model.speedup(cluster_model.MODELS[-1], g) for g in (16, 128)]
    assert predicted[1] > predicted[0] > 1
    assert row["verdict"] == INCONCLUSIVE
    assert row["ours"] == ("modelled, not measured (reports/cluster_model.py, its stated defaults): ESSA over GRPO "
                           f"on Qwen2.5-32B {predicted[0]:.1f}x on 16 GPUs, {predicted[1]:.1f}x on 128 GPUs in time "
                           "to a fixed number of rollouts, assuming both need the same rollouts to the accuracy")
    assert "a model, not evidence" in claims.rule_text(claims.CLAIMS[1])


def test_every_claim_states_its_rule_and_reads_not_run_without_results():
    rows = claims.check_all(evidence({}))
    assert [row["verdict"] for row in rows] == [NOT_RUN] * len(claims.CLAIMS)
    assert len({c.key for c in claims.CLAIMS}) == len(claims.CLAIMS) == 7
    for claim in claims.CLAIMS:
        assert claims.rule_text(claim)
        assert claim.paper_figure and claim.paper in METHODS
        named = {getattr(claim.comparison, f) for f in ("method", "baseline", "floor", "control", "ensemble", "base")
                 if getattr(claim.comparison, f, None) is not None}
        assert named <= set(METHODS), f"{claim.key} names methods by registry key: {named - set(METHODS)}"
        assert getattr(claim.comparison, "task", "gsm8k") in TASKS, claim.key
        if isinstance(claim.comparison, (PairedDifference, RecoveredGain)):
            assert claim.rule.margin is not None, f"{claim.key}: a bootstrap comparison states its margin"
    assert {GREEDY, PASS} == {c.comparison.metric for c in claims.CLAIMS if isinstance(c.comparison, PairedDifference)}
