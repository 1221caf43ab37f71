"""CoRP: the elite quantile, the two-pass merge (weights, alignment, dispersion) and the gate's
statistics against hand computations; seed-coefficient space against real noise; the whole
method on a problem with a known answer; and a short run on the tiny model."""

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import killed_at_step
from core.outputs import read_json
from core.perturb import combine_
from methods.corp import CoRPConfig, compatibility, constructive, ess_weights, merge, paired_lcb, sample_local, stack
from methods.corp import train as corp
from synthetic import SyntheticRun


def test_elite_is_the_upper_reward_quantile():
    members = np.eye(10)
    rewards = np.arange(1, 11) / 10
    # quantile_0.7 of 0.1..1.0 interpolates to 0.73: the three best members.
    assert merge(members, rewards, 0.7, 1.0, rank=2).elite.tolist() == [7, 8, 9]
    assert merge(members, rewards, 0.0, 1.0, rank=2).elite.tolist() == list(range(10))
    tied = merge(np.eye(4), np.array([1.0, 1.0, 1.0, 0.0]), 0.9, 1.0, rank=2)
    assert tied.elite.tolist() == [0, 1, 2], "members tied at the quantile stay in"


def test_two_pass_merge_by_hand():
    """Four single-seed members sigma_i eps(s_i): in seed space the rows are sigma_i e_i."""
    sigmas = np.array([1e-3, 2e-3, 1e-3, 5e-4])
    rewards = np.array([0.9, 0.6, 0.3, 0.8])
    members, basis = stack([{seed: s} for seed, s in zip([40, 10, 30, 20], sigmas)])
    assert basis == [10, 20, 30, 40] and np.allclose(np.abs(members).sum(1), sigmas)
    result = merge(members, rewards, q=0.25, beta=2.0, rank=8)

    elite = [0, 1, 3]  # quantile_0.25 of (0.3, 0.6, 0.8, 0.9) = 0.525
    assert result.elite.tolist() == elite
    s, r = sigmas[elite], rewards[elite]
    w1 = np.exp(2 * r) / np.exp(2 * r).sum()
    m_norm = np.sqrt(((w1 * s) ** 2).sum())  # m = sum w1_i sigma_i e_i: one axis per seed
    alignment = (s * w1 * s) / (s * m_norm)  # <sigma_i e_i, m> / (||sigma_i e_i|| ||m||)
    dispersion = s**2 - (w1 * s**2 / m_norm) ** 2  # ||x_i||^2 - <x_i, m / ||m||>^2
    z = lambda v: (v - v.mean()) / v.std()  # noqa: E731
    w2 = np.exp(2 * r + z(alignment) - z(dispersion))
    w2 /= w2.sum()
    assert np.allclose(result.pass1, w1) and np.allclose(result.alignment, alignment)
    assert np.allclose(result.dispersion, dispersion, rtol=1e-12, atol=0) and np.allclose(result.pass2, w2)
    delta = np.zeros(4)
    delta[[3, 0, 1]] = w2 * s  # member 0 is seed 40 (column 3), 1 is seed 10, 3 is seed 20
    assert np.allclose(result.delta, delta, rtol=1e-12, atol=0)
    # The widest member (sigma 2e-3) disperses most off the mean and loses weight in pass 2.
    assert dispersion.argmax() == 1 and w2[1] / w1[1] < 1 < w2[0] / w1[0]


def test_compatibility_of_multi_seed_directions():
    members = np.array([[1.0, 2.0, 0.0], [0.0, 1.0, -1.0], [3.0, 0.0, 0.0]])
    mean = np.array([1.0, 1.0, 1.0])
    alignment, dispersion = compatibility(members, mean)
    unit = mean / np.linalg.norm(mean)
    for x, a, d in zip(members, alignment, dispersion):
        assert a == pytest.approx(x @ mean / (np.linalg.norm(x) * np.linalg.norm(mean)))
        assert d == pytest.approx(np.linalg.norm(x - (x @ unit) * unit) ** 2)
    assert alignment[1] == pytest.approx(0.0) and dispersion[1] == pytest.approx(2.0)


def test_seed_space_matches_weight_space_in_high_dimension():
    """Distinct seeds are nearly orthonormal once noise is scaled by 1/sqrt(dim): inner products
    of seed-space coefficient vectors match those of the real noise within 0.01 at dim 2e5."""
    params = [torch.zeros(150_000), torch.zeros(500, 100)]
    dim = sum(p.numel() for p in params)
    directions = [{1: 1e-3}, {2: 2e-3}, {1: 0.5e-3, 3: -1e-3}, {2: 1e-3, 3: 1e-3, 4: 2e-3}]
    coefs, _ = stack(directions)

    def weight_space(direction):
        out = [torch.zeros_like(p) for p in params]
        combine_(out, direction.items())
        return torch.cat([o.reshape(-1) for o in out]).double() / np.sqrt(dim)

    vectors = torch.stack([weight_space(d) for d in directions])
    gram = (vectors @ vectors.T).numpy()
    scale = np.outer(np.linalg.norm(coefs, axis=1), np.linalg.norm(coefs, axis=1))
    assert np.abs((gram - coefs @ coefs.T) / scale).max() < 0.01


def test_constructive_score_and_paired_lcb_by_hand():
    centre = np.array([1.0, 0.0, 1.0, 0.0, 1.0])
    candidate = np.array([1.0, 1.0, 0.0, 0.0, 1.0])  # one fix, one regression
    assert constructive(candidate, centre, regression_lambda=2.0) == (pytest.approx(-0.2), 0)
    assert constructive(centre + 0.1, centre, regression_lambda=2.0) == (1.0, 5), "rewards, not 0/1, are compared"

    # Differences (1, 1, 0, 1, 0, 1, 1, 0): mean 5/8, sample sd sqrt(1.875/7), SE = sd / sqrt(8).
    diff = np.array([1, 1, 0, 1, 0, 1, 1, 0], dtype=float)
    assert paired_lcb(diff, np.zeros(8), z=1.0) == pytest.approx(0.625 - np.sqrt(1.875 / 7) / np.sqrt(8))
    assert paired_lcb(diff, np.zeros(8), z=2.0) == pytest.approx(0.625 - 2 * np.sqrt(1.875 / 7) / np.sqrt(8))
    # (1, 0, 0, 0): mean 0.25, sd 0.5, SE 0.25, so the bound is exactly 0 and the gate (> 0) stays shut.
    assert paired_lcb(np.array([1.0, 0, 0, 0]), np.zeros(4), z=1.0) == 0.0


def test_search_weights_reach_the_target_effective_sample_size():
    scores = np.array([0.4, 0.3, 0.2, 0.1, 0.05, 0.02])
    weights = ess_weights(scores, target=3.0)
    assert 1 / np.square(weights).sum() == pytest.approx(3.0, rel=1e-6)
    assert np.all(np.diff(weights) < 0), "softmax of the scores: ordered as they are"
    assert np.allclose(ess_weights(scores, target=6.0), 1 / 6) and np.allclose(ess_weights(np.ones(4), 2.0), 0.25)


def test_local_candidates_have_the_stated_covariance():
    """sigma sqrt(lam) on a fresh seed plus sigma sqrt(1 - lam) sqrt(lam_1) z u on the cloud's axis u."""
    axis, eigenvalue, sigma, lam = np.array([[0.6, 0.8, 0.0]]), np.array([4e-6]), 0.01, 0.25
    candidates = sample_local(np.random.default_rng(0), 4000, sigma, lam, [11, 22, 33], axis, eigenvalue)
    fresh = [[c for s, c in d.items() if s not in (11, 22, 33)] for d in candidates]
    assert all(f == [pytest.approx(sigma * 0.5)] for f in fresh) and len({*map(frozenset, candidates)}) == 4000
    along = np.array([[d.get(s, 0.0) for s in (11, 22, 33)] for d in candidates])
    assert np.allclose(along[:, 2], 0) and np.allclose(along[:, 0] * 0.8, along[:, 1] * 0.6), "on the axis only"
    std = (along @ axis[0]).std()
    assert std == pytest.approx(sigma * np.sqrt(1 - lam) * np.sqrt(4e-6), rel=0.05)


SYNTHETIC = CoRPConfig(
    population=40, sigmas=[0.02, 0.05], support_size=16, probe_size=8, q_grid=[0.5, 0.9], beta_grid=[1.0, 10.0],
    scale_grid=[0.5, 1.0, 2.0], local_population=20,
)


def synthetic_run() -> SyntheticRun:
    return SyntheticRun(thresholds=np.random.default_rng(1).uniform(0.02, 0.4, 24))


def test_corp_finds_the_rewarded_direction_and_saves_the_model_it_committed():
    run = synthetic_run()
    artifact = corp(SYNTHETIC, run)
    stage1 = next(h for h in run.history if "scale" in h)
    rounds = [h for h in run.history if "accepted" in h]
    assert stage1["support_reward"] > 0, "the base solves nothing"
    probes = [stage1["probe_reward"]] + [h["probe_reward"] for h in rounds]
    assert all(b >= a for a, b in zip(probes, probes[1:])), "an accepted round never lowers probe accuracy"
    for h in rounds:
        assert not h["accepted"] or (h["gate_lcb"] > 0 and h["probe_lcb"] > 0)
    assert rounds[0]["accepted"] and rounds[-1]["support_reward"] > stage1["support_reward"], "Stage 2 re-centres"
    assert [h["sigma"] for h in rounds[1:]] == [0.05 / 2, 0.05 / 4], "a rejected round halves sigma"
    assert rounds[-1]["support_reward"] == run.rewards(run.train[:16]).mean()

    # One model: the seed list rebuilds the weights that were committed in place (shared noise, the code's).
    assert artifact["kind"] == "seeds" and artifact["mode"] == "shared"
    rebuilt = [b.clone() for b in run.base]
    combine_(rebuilt, [tuple(t) for t in artifact["terms"]], "shared")
    assert all(torch.allclose(p.detach(), b, atol=1e-6) for p, b in zip(run.model.parameters(), rebuilt))
    assert float(run.displacement() @ run.direction) > 0.02, "moved along the rewarded direction"

    again = synthetic_run()
    assert corp(SYNTHETIC, again) == artifact, "same seed, different model"


@pytest.mark.parametrize("score", ["correctness", "reward"])
def test_perturbations_count_every_perturbed_model_scored_and_every_score_is_the_configured_one(score):
    """Stage 0's 40 members, Stage 1's 2 x 2 x 3 grid, and per round 20 local candidates, 2 x 2 x 3
    proposals (q x beta x eta) and, when the gate passed, 3 line-search points. The rollouts the
    run made are exactly these, plus each proposal's second half (the gate) and one scoring of
    every committed centre; each asked the harness for the configured score."""
    run = synthetic_run()
    corp(CoRPConfig(**{**SYNTHETIC.__dict__, "score": score}), run)
    stage1 = next(h for h in run.history if "scale" in h)
    rounds = [h for h in run.history if "accepted" in h]
    assert stage1["perturbations"] == 40 + 2 * 2 * 3
    expected = stage1["perturbations"]
    for h in rounds:
        expected += 20 + 2 * 2 * 3 + 3 * ("probe_lcb" in h)
        assert h["perturbations"] == expected
    assert any("probe_lcb" in h for h in rounds) and not all("probe_lcb" in h for h in rounds), "both gate outcomes"
    centres = 1 + sum(h["accepted"] for h in rounds)
    assert run.rollouts == expected + 2 * 2 * 3 * len(rounds) + centres
    assert run.scores == [score] * run.rollouts


TINY = {"population": 4, "sigmas": [0.01, 0.05], "support_size": 2, "probe_size": 2, "q_grid": [0.5],
        "beta_grid": [10.0], "scale_grid": [1.0, 2.0], "rounds": 1, "local_population": 2, "rank": 2,
        "step_factors": [0.5, 1.0], "line_search": [1.0]}


@pytest.mark.parametrize("workdir", [("corp", TINY)], indirect=True, ids=["corp"])
def test_short_run_gives_one_model_and_repeats_when_killed_and_resumed(workdir, monkeypatch):
    artifact = workdir.train("results/a/artifact.json")
    spec, result = read_json(artifact), read_json(Path("results/a/metrics.json"))
    history, round_1 = result["history"], result["history"][5]
    assert spec["kind"] == "seeds" and spec["terms"], "Stage 1 commits a merged direction"
    # Stage 0: 4 members; Stage 1: 1 x 1 x 2 grid; round 1: 2 candidates, 1 x 1 x 2 proposals,
    # 1 line-search point if gated.
    assert [h["perturbations"] for h in history] == [1, 2, 3, 4, 6, 6 + 2 + 2 + ("probe_lcb" in round_1)]
    assert all("support_reward" in h and "probe_reward" in h for h in history[4:])
    # Greedy rollouts: Stage 0 4 x 2 support; Stage 1 2 scales x 2 probe, then the centre on the
    # support; round 1: 2 candidates x 1 select, 2 proposals x (1 select + 1 gate), and if gated
    # the line search on the probe, and if accepted the new centre on the support.
    rollouts = 8 + 4 + 2 + 2 + 4 + 2 * ("probe_lcb" in round_1) + 2 * round_1["accepted"]
    assert result["meters"]["sequences_generated"] == rollouts, "rollouts the meters did not see"
    evaluation = workdir.evaluate(artifact)
    problems, samples = evaluation["problems"], evaluation["samples_per_problem"]
    assert evaluation["inference_passes"] == 1
    assert evaluation["cost"]["eval"]["sequences_generated"] == problems * (1 + samples), "one pass per answer"

    # Again from the same seed, killed in Stage 2 and resumed from the checkpoint after Stage 0.
    shutil.rmtree("results/work")
    with killed_at_step(monkeypatch, 5):
        workdir.train("results/b/artifact.json")
    [work] = Path("results/work/train/corp/gsm8k/seed0").iterdir()  # one folder: one config
    assert (work / "checkpoint" / "state.pt").exists()
    again = read_json(workdir.train("results/b/artifact.json"))
    assert again["terms"] == spec["terms"], "same seed, different model"
