"""ESSAM and ESSAM-F against hand computations on a smooth objective, reward = -||theta - target||^2,
evaluated directly instead of through rollouts; then a short run of each on the tiny model.

The parameters are fp64 and members are perturbed in fp64, but `combine_` accumulates a
multi-seed move in fp32: moves of size ~0.1 match the hand computation to 1e-8 (fp32 relative
precision), positions of the perturbed members to 1e-12."""

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from core.outputs import read_json
from core.perturb import combination_norm, noise, population
from jobs import train as training
from methods.essam import ESSAMConfig, ESSAMFConfig, essam_step


class Objective:
    """R(theta) = -||theta - target||^2 over two parameter tensors; records theta at every call."""

    def __init__(self, dtype=torch.float64, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.params = [torch.randn(4, 2, generator=g, dtype=dtype), torch.randn(4, generator=g, dtype=dtype)]
        self.target = 2 * torch.randn(12, generator=g, dtype=torch.float64)
        self.seen: list[torch.Tensor] = []

    def flat(self) -> torch.Tensor:
        return torch.cat([p.reshape(-1) for p in self.params]).double()

    def value(self, theta: torch.Tensor) -> float:
        return -((theta - self.target) ** 2).sum().item()

    def __call__(self) -> float:
        self.seen.append(self.flat().clone())
        return self.value(self.seen[-1])

    def gradient(self) -> torch.Tensor:
        return -2 * (self.flat() - self.target)


def eps(objective: Objective, seed: int, mode: str = "iid") -> torch.Tensor:
    """The flattened noise vector of a seed, as the engine generates it tensor by tensor."""
    return torch.cat([noise(p, seed, i, mode).double().reshape(-1) for i, p in enumerate(objective.params)])


def zscore(r: torch.Tensor) -> torch.Tensor:
    return (r - r.mean()) / (r.std(unbiased=False) + 1e-8)


@pytest.mark.parametrize("config", [ESSAMConfig(population_size=200, noise="iid"),
                                    ESSAMFConfig(population_size=200, noise="iid")])
def test_es_estimate_points_along_the_true_gradient(config):
    """At the paper's sigma and rho, one step's move (alpha / N) sum_j z'_j eps'_j from a population
    of N = 200 in 12 dimensions has cosine > 0.9 with the true gradient (about 0.97 expected).
    With i.i.d. noise: the code's shared noise draws both tensors from one stream, so the 4-vector
    repeats the matrix's first 4 entries and the search spans 8 of the 12 dimensions."""
    objective = Objective()
    theta, gradient = objective.flat().clone(), objective.gradient()
    essam_step(objective.params, objective, np.random.default_rng(0), config)
    move = objective.flat() - theta
    assert torch.nn.functional.cosine_similarity(move, gradient, dim=0) > 0.9


@pytest.mark.parametrize("mode", ["iid", "shared"])
@pytest.mark.parametrize("antithetic", [False, True])
def test_essam_step_by_hand(mode, antithetic):
    """theta_adv = theta - (rho/N) sum_i z_i eps_i exactly; the fresh population is evaluated
    around theta_adv; the final theta is theta + (alpha/N) sum_j z'_j eps'_j with z' from theta_adv."""
    config = ESSAMConfig(population_size=8, sigma=0.01, rho=0.05, alpha=0.1, noise=mode, antithetic=antithetic)
    objective = Objective()
    theta = objective.flat().clone()
    metrics = essam_step(objective.params, objective, np.random.default_rng(3), config)

    rng = np.random.default_rng(3)
    members, adversarial = population(rng, 8, antithetic), population(rng, 8, antithetic)
    e = torch.stack([sign * eps(objective, seed, mode) for seed, sign in members])
    e_adv = torch.stack([sign * eps(objective, seed, mode) for seed, sign in adversarial])
    assert len(objective.seen) == 16 and metrics["evaluations"] == 16
    assert torch.allclose(torch.stack(objective.seen[:8]), theta + 0.01 * e, atol=1e-12)

    r = torch.tensor([objective.value(theta + 0.01 * e_i) for e_i in e], dtype=torch.float64)
    theta_adv = theta - (0.05 / 8) * (zscore(r) @ e)
    assert (theta_adv - theta).norm() > 0.01
    assert torch.allclose(torch.stack(objective.seen[8:]), theta_adv + 0.01 * e_adv, atol=1e-8)
    r_adv = torch.tensor([objective.value(theta_adv + 0.01 * e_j) for e_j in e_adv], dtype=torch.float64)
    assert torch.allclose(objective.flat(), theta + (0.1 / 8) * (zscore(r_adv) @ e_adv), atol=1e-8)
    assert metrics["reward"] == pytest.approx(r.mean().item()) and metrics["adversarial_reward"] == pytest.approx(
        r_adv.mean().item())
    if antithetic:
        assert torch.allclose(e[0], -e[1]) and not torch.allclose(e[0], e[2])


def test_essam_f_ascent_has_norm_rho_along_the_centred_estimate():
    """K = 4 SAM members with raw centred rewards: g_hat = (1/K) sum (r_i - mean) eps_i, and
    theta_adv = theta - rho g_hat / ||g_hat||, at distance rho exactly; then N = 6 at theta_adv."""
    config = ESSAMFConfig(population_size=6, sam_population_size=4, sigma=0.01, rho=0.3, alpha=0.1)
    objective = Objective()
    theta = objective.flat().clone()
    metrics = essam_step(objective.params, objective, np.random.default_rng(5), config)

    rng = np.random.default_rng(5)
    members, adversarial = population(rng, 4), population(rng, 6)
    e = torch.stack([eps(objective, seed, config.noise) for seed, _ in members])  # the code's shared noise
    e_adv = torch.stack([eps(objective, seed, config.noise) for seed, _ in adversarial])
    assert len(objective.seen) == 4 + 6 and metrics["evaluations"] == 10
    r = torch.tensor([objective.value(theta + 0.01 * e_i) for e_i in e], dtype=torch.float64)
    g_hat = ((r - r.mean()) / 4) @ e
    assert metrics["sam_grad_norm"] == pytest.approx(g_hat.norm().item(), rel=1e-6)
    theta_adv = torch.stack(objective.seen[4:]) - 0.01 * e_adv  # every adversarial member sits around theta_adv
    assert torch.allclose(theta_adv, theta_adv[0].expand_as(theta_adv), atol=1e-12)
    assert (theta_adv[0] - theta).norm().item() == pytest.approx(0.3, rel=1e-6)
    assert torch.allclose(theta_adv[0], theta - 0.3 * g_hat / g_hat.norm(), atol=1e-8)
    r_adv = torch.tensor([objective.value(theta_adv[0] + 0.01 * e_j) for e_j in e_adv], dtype=torch.float64)
    assert torch.allclose(objective.flat(), theta + (0.1 / 6) * (zscore(r_adv) @ e_adv), atol=1e-8)


def test_combination_norm_regenerates_the_frobenius_norm():
    objective = Objective()
    terms = [(11, 0.5), (12, -1.5), (11, 0.25)]
    expected = sum(c * eps(objective, s) for s, c in terms).norm().item()
    assert combination_norm(objective.params, terms) == pytest.approx(expected, rel=1e-6)
    assert combination_norm(objective.params, [(11, 1.0)], "shared") == pytest.approx(
        eps(objective, 11, "shared").norm().item(), rel=1e-6)


@pytest.mark.parametrize("config", [ESSAMConfig(population_size=20, sigma=0.01, rho=0.01, alpha=0.2, noise="iid"),
                                    ESSAMFConfig(population_size=20, sigma=0.01, rho=0.01, alpha=0.2, noise="iid")])
def test_steps_climb_the_objective(config):
    """60 steps bring -||theta - target||^2 from -62 to above 1% of that (about -0.03 observed).
    With i.i.d. noise: shared noise ties the 4-vector to the matrix's first row, so it could not
    reach a target where they differ."""
    objective = Objective()
    start = objective.value(objective.flat())
    rng = np.random.default_rng(0)
    for _ in range(60):
        essam_step(objective.params, objective, rng, config)
    assert objective.value(objective.flat()) > 0.01 * start


@pytest.mark.parametrize("config", [ESSAMConfig(population_size=8, sigma=0.0, rho=0.3, alpha=0.0),
                                    ESSAMFConfig(population_size=8, sam_population_size=8, sigma=0.0, rho=0.3,
                                                 alpha=0.0)])
def test_ascent_is_undone_within_two_roundings(config):
    """fp32 weights, sigma = alpha = 0 and rewards that ignore theta, so that only the ascent and
    its undoing move theta: after the step each element is within eps32 (|theta| + |t|) of where
    it started (t = theta_adv - theta), the bound of two rounded additions."""
    objective = Objective(dtype=torch.float32)
    theta = objective.flat().clone()
    draws = np.random.default_rng(1)

    def noise_reward():
        objective.seen.append(objective.flat().clone())
        return float(draws.normal())

    essam_step(objective.params, noise_reward, np.random.default_rng(2), config)
    t = objective.seen[-1] - theta
    assert t.abs().max() > 0.01, "the ascent did not move theta"
    bound = torch.finfo(torch.float32).eps * (theta.abs() + t.abs())
    assert ((objective.flat() - theta).abs() <= bound).all()


# ---------------------------------------------------------------- the tiny model


# The tiny random model answers only newlines until sigma is about 0.2; below, every member writes the same.
TINY = {"steps": 2, "batch_size": 2, "population_size": 2, "sigma": 0.2}
RUNS = [("essam", TINY), ("essam_f", {**TINY, "population_size": 4, "sam_population_size": 2})]


def weights(artifact: Path) -> dict:
    return load_file(Path(read_json(artifact)["path"]) / "model.safetensors")


@pytest.fixture
def varied_reward(monkeypatch):
    """The real reward plus a term in the completion's characters: the tiny random model never
    answers, so without it every member would score 0 and no step would move the weights
    (perturbing and restoring alone leaves rounding differences of about 1e-7)."""
    reward = training.TrainingRun.reward
    monkeypatch.setattr(training.TrainingRun, "reward", lambda self, problem, text, score="reward":
                        reward(self, problem, text, score) + len(set(text)) / 100)


@pytest.mark.parametrize("workdir", RUNS, indirect=True, ids=[name for name, _ in RUNS])
def test_short_run_trains_evaluates_and_repeats(workdir, varied_reward, tiny_model_dir):
    method = next(iter(workdir.config.methods))
    config = workdir.config.methods[method]
    artifact = workdir.train("results/a/artifact.json")
    result = read_json(Path("results/a/metrics.json"))
    sam = getattr(config, "sam_population_size", config.population_size)
    rollouts = (sam + config.population_size) * config.batch_size
    assert [h["rollouts"] for h in result["history"]] == [rollouts] * config.steps
    assert result["meters"]["sequences_generated"] == rollouts * config.steps, "rollouts the meters did not see"
    assert all("adversarial_reward" in h and "reward" in h for h in result["history"])
    assert all(("sam_grad_norm" in h) == (method == "essam_f") for h in result["history"])

    trained = weights(artifact)
    base = load_file(tiny_model_dir / "model.safetensors")
    moved = max((trained[k] - base[k]).abs().max().item() for k in base)
    assert moved > 1e-5, "training left the weights unchanged beyond rounding"
    evaluation = workdir.evaluate(artifact)
    assert evaluation["inference_passes"] == 1 and evaluation["method"] == method

    shutil.rmtree("results/work")
    again = weights(workdir.train("results/b/artifact.json"))
    assert all(torch.equal(trained[k], again[k]) for k in trained), "same seed, different model"


def test_configs_carry_the_papers_defaults():
    essam, fast = ESSAMConfig(), ESSAMFConfig()
    assert (essam.population_size, essam.sigma, essam.alpha, essam.rho, essam.batch_size) == (40, 1.5e-3, 2.5e-4,
                                                                                              1e-4, 200)
    assert fast.sam_population_size == 10 and dataclasses.asdict(fast) == {**dataclasses.asdict(essam),
                                                                           "sam_population_size": 10}
