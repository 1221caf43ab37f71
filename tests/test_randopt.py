"""RandOpt: top-K selection by hand, discovery scores against a closed-form reward, the ensemble
artifact the evaluator votes with K inference passes, and a short run on the tiny model."""

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import killed_at_step
from core.errors import NogradError
from core.outputs import read_json
from core.perturb import noise, trainable
from methods.randopt import RandOptConfig, discover, select
from methods.randopt import train as randopt
from synthetic import SyntheticRun


def test_top_k_best_first_ties_to_the_earlier_member():
    rewards = [0.2, 0.5, 0.5, 0.1, 0.9, 0.5]
    assert select(rewards, 3) == [4, 1, 2]
    assert select(rewards, 1) == [4]
    assert select([0.5, 0.5, 0.5], 2) == [0, 1]
    assert select([0.3, 0.7], 5) == [1, 0], "K above N keeps every member"


def closed_form_reward(run: SyntheticRun, seed: int, sigma: float, problems, mode: str) -> float:
    """Mean over problems of 1[<sigma eps(seed), u> > tau_j], with eps regenerated tensor by tensor."""
    eps = torch.cat([noise(p, seed, i, mode).double().reshape(-1) for i, p in enumerate(trainable(run.model))])
    along = sigma * float(eps @ run.direction)
    return float(np.mean([along > run.thresholds[j] for j in problems]))


def test_discovery_scores_each_seeded_member_at_its_sigma_and_restores():
    run = SyntheticRun(thresholds=np.linspace(-0.05, 0.05, 8))
    sigmas = [0.01, 0.02, 0.05]
    for step in run.steps(10):
        discover(run, step, 10, sigmas, run.train, "iid", "correctness")
    members, rewards = run.state["members"], run.state["rewards"]
    assert len({seed for seed, _ in members}) == 10, "seeds are distinct"
    assert {sigma for _, sigma in members} <= set(sigmas)
    expected = [closed_form_reward(run, seed, sigma, run.train, "iid") for seed, sigma in members]
    assert rewards == pytest.approx(expected)
    assert len(set(rewards)) > 2, "the test problem should separate the members"
    assert [h["perturbations"] for h in run.history] == list(range(1, 11))
    assert [h["reward"] for h in run.history] == rewards
    assert [h["sigma"] for h in run.history] == [sigma for _, sigma in members]
    assert run.displacement().abs().max() < 1e-6, "the centre never moves"
    assert run.rollouts == 10, "one greedy rollout of the support set per member"


@pytest.mark.parametrize("score", ["correctness", "reward"])
def test_ensemble_is_the_top_k_members_as_seed_lists(score):
    """At the paper's defaults (shared noise) the members are the shared-noise models; every
    support rollout asks the harness for the configured score."""
    run = SyntheticRun(thresholds=np.linspace(-0.05, 0.05, 8))
    config = RandOptConfig(population=12, sigmas=[0.01, 0.03], top_k=3, support_size=6, score=score)
    artifact = randopt(config, run)
    members, rewards = run.state["members"], run.state["rewards"]
    expected = sorted(range(12), key=lambda i: -closed_form_reward(run, *members[i], run.train[:6], "shared"))[:3]
    assert rewards == [closed_form_reward(run, *member, run.train[:6], "shared") for member in members]
    assert artifact["kind"] == "ensemble" and len(artifact["members"]) == 3
    assert [m["terms"] for m in artifact["members"]] == [[list(members[i])] for i in expected]
    assert all(m["kind"] == "seeds" and m["mode"] == "shared" for m in artifact["members"])
    assert run.scores == [score] * 12
    assert run.history[-1]["support_reward"] == pytest.approx(np.mean([rewards[i] for i in expected]))
    assert run.history[-1]["perturbations"] == 12 and run.history[-1]["members"] == 3
    assert run.displacement().abs().max() < 1e-6


def test_a_support_set_larger_than_the_training_split_is_one_clear_error():
    with pytest.raises(NogradError, match="support set needs training problems 0..9, but task synthetic has 4"):
        randopt(RandOptConfig(population=2, top_k=1, support_size=10), SyntheticRun(thresholds=np.zeros(4)))


TINY = {"population": 4, "top_k": 2, "support_size": 3, "sigmas": [0.01, 0.05]}


@pytest.mark.parametrize("workdir", [("randopt", TINY)], indirect=True, ids=["randopt"])
def test_short_run_votes_with_k_inference_passes_and_repeats_when_killed_and_resumed(workdir, monkeypatch):
    artifact = workdir.train("results/a/artifact.json")
    spec, result = read_json(artifact), read_json(Path("results/a/metrics.json"))
    history = [h for h in result["history"] if "reward" in h]
    assert len(history) == 4 and result["meters"]["sequences_generated"] == 4 * 3, "N members x support greedy"
    chosen = select([h["reward"] for h in history], 2)
    assert spec["kind"] == "ensemble" and len(spec["members"]) == 2
    assert [m["terms"][0][1] for m in spec["members"]] == [history[i]["sigma"] for i in chosen], "the top K, best first"

    evaluation = workdir.evaluate(artifact)
    problems, samples = evaluation["problems"], evaluation["samples_per_problem"]
    assert evaluation["inference_passes"] == 2
    assert evaluation["cost"]["eval"]["sequences_generated"] == 2 * problems * (1 + samples), "K passes per answer"

    # Again from the same seed, killed after member 3 and resumed from the checkpoint after member 2.
    shutil.rmtree("results/work")
    with killed_at_step(monkeypatch, 3):
        workdir.train("results/b/artifact.json")
    [work] = Path("results/work/train/randopt/gsm8k/seed0").iterdir()  # one folder: one config
    assert (work / "checkpoint" / "state.pt").exists()
    again = read_json(workdir.train("results/b/artifact.json"))
    assert again["members"] == spec["members"], "same seed, different ensemble"
