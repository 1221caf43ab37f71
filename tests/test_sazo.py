"""SAZO (a reconstruction: see methods/sazo.py) against hand computations: the sampling law, its
importance weights and the EMA; unbiasedness of the weighted estimate over many draws; beta = 0
and the warm-up as MeZO bit for bit; on the tiny model, the same forward passes as MeZO, the same
held-out problems as MeZO, the same seed giving the same weights, an interrupted run resuming to
them, and train + evaluate."""

import dataclasses
import itertools
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from conftest import killed_at_step, tiny_config
from core import config
from core.errors import NogradError
from core.outputs import read_json
from core.task import Problem
from jobs import train as training
from jobs import validation
from jobs.validation import field_docs
from methods import mezo, sazo
from methods.sazo import SAZOConfig, capped_ratios, ema_, sampling_ratios, systematic_sample

DRAWS = 20_000


# ---------------------------------------------------------------- the sampling law by hand


def test_sampling_ratios_and_importance_weights_by_hand():
    # sqrt(s) = 0, 1, 2, 3 (sum 6), N = 4, beta = 0.5: p_j = 0.5/4 + 0.5 sqrt(s_j)/6.
    ratios = sampling_ratios(np.array([0.0, 1.0, 4.0, 9.0]), beta=0.5)
    p = np.array([0.125, 0.125 + 1 / 12, 0.125 + 1 / 6, 0.125 + 1 / 4])
    assert np.allclose(ratios / 4, p) and np.isclose(p.sum(), 1)
    assert np.allclose(1 / ratios, [2, 1.2, 6 / 7, 2 / 3]), "weights 1 / (N p_j)"
    assert capped_ratios(ratios, 2) is ratios, "|B| p_j <= 1 everywhere: nothing to cap"
    # beta = 0, or no gradient seen yet: exactly uniform, weights exactly 1.
    assert np.array_equal(sampling_ratios(np.array([0.0, 1.0, 4.0, 9.0]), beta=0.0), np.ones(4))
    assert np.array_equal(sampling_ratios(np.zeros(3), beta=0.5), np.ones(3))


def test_inclusion_probabilities_are_capped_at_one_with_the_rest_rescaled():
    # N = 4, |B| = 2, beta = 0.9, one example holds all sqrt(s): p = (0.025, 0.025, 0.025, 0.925), so
    # |B| p_4 = 1.85 > 1. Capped: example 4 always in, the other slot shared equally (1/3 each).
    ratios = capped_ratios(sampling_ratios(np.array([0.0, 0.0, 0.0, 100.0]), beta=0.9), 2)
    assert np.allclose(2 * ratios / 4, [1 / 3, 1 / 3, 1 / 3, 1])
    assert np.allclose(1 / ratios, [1.5, 1.5, 1.5, 0.5])
    # Two rounds: N = 5, |B| = 3, beta = 0.99, sqrt(s) = (5, 3, 2/3, 2/3, 2/3): ratios
    # (2.485, 1.495, 0.34, 0.34, 0.34); cap 5/3 hits example 1, rescaling lifts example 2 to 1.98,
    # so it is capped too and the last slot is shared by examples 3-5: pi = (1, 1, 1/3, 1/3, 1/3).
    ratios = sampling_ratios(np.array([25.0, 9.0, 4 / 9, 4 / 9, 4 / 9]), beta=0.99)
    assert np.allclose(ratios, [2.485, 1.495, 0.34, 0.34, 0.34])
    assert np.allclose(3 * capped_ratios(ratios, 3) / 5, [1, 1, 1 / 3, 1 / 3, 1 / 3])


@pytest.mark.parametrize("inclusion", [[0.25, 1 - 7 / 12, 7 / 12, 0.75], [1, 1, 1 / 3, 1 / 3, 1 / 3]])
def test_systematic_sample_includes_each_example_with_its_probability_and_never_twice(inclusion):
    """Inclusion frequencies over 20k batches match pi within 0.015 (over 4 standard errors)."""
    inclusion = np.array(inclusion)
    rng = np.random.default_rng(0)
    counts = np.zeros(len(inclusion))
    for _ in range(DRAWS):
        picks = systematic_sample(rng, inclusion)
        assert len(picks) == round(inclusion.sum()) == len(set(picks.tolist()))
        counts[picks] += 1
    assert np.abs(counts / DRAWS - inclusion).max() < 0.015


def test_uniform_systematic_sample_has_mezo_batch_law():
    """Equal inclusion probabilities give a uniformly random subset, as MeZO's draw: each of the 10
    pairs of 5 examples has frequency 0.1 within 0.01 (4.7 standard errors) over 20k batches."""
    rng = np.random.default_rng(1)
    pairs = {pair: 0 for pair in itertools.combinations(range(5), 2)}
    for _ in range(DRAWS):
        pairs[tuple(sorted(systematic_sample(rng, np.full(5, 0.4)).tolist()))] += 1
    assert np.abs(np.array(list(pairs.values())) / DRAWS - 0.1).max() < 0.01


@pytest.mark.parametrize("beta, size", [(0.5, 2), (0.95, 3)])
def test_importance_weighted_estimate_is_unbiased(beta, size):
    """Per-example values v and scores s = v^2 (the oracle law p ~ |v|): over 20k batches the mean of
    (1/|B|) sum v_j / (N p_j) is the uniform mean of v within 4 standard errors, while the
    unweighted batch mean, which the test must be able to tell apart, misses it by far more.
    (0.95, 3) caps the largest example's inclusion at 1."""
    values = np.array([0.1, -0.5, 1.0, 2.0, 4.0, -3.0, 0.3])
    ratios = capped_ratios(sampling_ratios(values**2, beta), size)
    inclusion = size * ratios / len(values)
    assert beta < 0.9 or inclusion.max() == 1, "the capped case must really be capped"
    rng = np.random.default_rng(2)
    weighted, plain = np.empty(DRAWS), np.empty(DRAWS)
    for i in range(DRAWS):
        picks = systematic_sample(rng, inclusion)
        weighted[i] = (values[picks] / ratios[picks]).mean()
        plain[i] = values[picks].mean()
    tolerance = 4 * weighted.std() / np.sqrt(DRAWS)
    assert abs(weighted.mean() - values.mean()) < tolerance
    assert abs(plain.mean() - values.mean()) > 10 * tolerance


def test_ema_updates_only_the_visited_examples_by_hand():
    scores = np.array([1.0, 1.0, 1.0, 1.0])
    ema_(scores, np.array([0, 2]), np.array([2.0, -3.0]), rho=0.9)
    assert np.allclose(scores, [0.9 + 0.1 * 4, 1.0, 0.9 + 0.1 * 9, 1.0])


def test_config_holds_mezo_fields_with_mezo_defaults_and_rejects_bad_values():
    ours, theirs = SAZOConfig(), mezo.MeZOConfig()
    for f in dataclasses.fields(theirs):
        assert getattr(ours, f.name) == getattr(theirs, f.name), f.name
        assert field_docs(SAZOConfig)[f.name] == field_docs(mezo.MeZOConfig)[f.name], f.name
    assert set(field_docs(SAZOConfig)) == {f.name for f in dataclasses.fields(SAZOConfig)}
    minimal = {"name": "t", "model": "m", "seeds": [0], "tasks": {"gsm8k": {}}}
    for key, bad in (("beta", 1.0), ("rho", -0.1), ("warmup_steps", 0), ("s0", -1.0)):
        with pytest.raises(NogradError, match=f"methods.sazo.{key}: "):
            validation.validate({**minimal, "methods": {"sazo": {key: bad}}})


# ---------------------------------------------------------------- whole runs on a known objective


class QuadraticRun:
    """What MeZO and SAZO use of `jobs.train.TrainingRun`, over per-example losses
    l_j = 0.5 (a_j . theta - b_j)^2 with known gradients; rows of a are scaled by `scales` so that
    examples differ in gradient norm. The batch is drawn by the harness's own `Run.batch`."""

    batch = training.TrainingRun.batch

    def __init__(self, seed, scales=(1.0,) * 6, dim=8):
        g = torch.Generator().manual_seed(0)
        self.a = torch.randn(len(scales), dim, generator=g, dtype=torch.float64) * torch.tensor(scales)[:, None]
        self.b = torch.randn(len(scales), generator=g, dtype=torch.float64)
        self.model = torch.nn.Module()
        self.model.theta = torch.nn.Parameter(torch.randn(dim, generator=g, dtype=torch.float64), requires_grad=False)
        self.train = [Problem(id=f"q/{j}", question="", answer="", solution="") for j in range(len(scales))]
        self.rng, self.state, self.history, self.calls = np.random.default_rng(seed), {}, [], []

    def losses(self):
        return 0.5 * (self.a @ self.model.theta - self.b) ** 2

    def gradient_norms(self):
        return (self.a @ self.model.theta - self.b).abs() * self.a.norm(dim=1)

    def loss(self, problems, grad=False):
        """Per-example losses of `problems` (`grad` unused: the gradients are known); each call is kept
        as (indices, losses)."""
        picks = [int(p.id[2:]) for p in problems]
        self.calls.append((picks, self.losses()[picks]))
        return self.calls[-1][1]

    def hold_out(self, size):
        """No held-out set here: these runs test the update rule (the held-out curve is the harness's,
        tested on the tiny model)."""
        return []

    def steps(self, total, evaluate=None, eval_every=0):
        return iter(range(total))

    def log(self, logged_elsewhere=None, **metrics):
        """Also keeps SAZO's scores after the step: the law of the next step's draw."""
        scores = self.state.get("scores", np.empty(0)).copy()
        self.history.append({**metrics, **(logged_elsewhere or {}), "scores": scores})

    def save_model(self):
        return {"kind": "model", "trained": True}


def test_beta_zero_and_the_warm_up_are_mezo_step_for_step():
    """Same seed: SAZO at beta = 0, and SAZO during its warm-up, make MeZO's batches and updates
    bit for bit; after the warm-up, adaptive sampling departs from it."""
    common = dict(steps=40, batch_size=3, lr=0.02, eps=1e-3)
    reference = QuadraticRun(5)
    mezo.train(mezo.MeZOConfig(**common), reference)
    uniform = QuadraticRun(5)
    sazo.train(SAZOConfig(**common, beta=0.0), uniform)
    assert torch.equal(uniform.model.theta, reference.model.theta)
    for ours, theirs in zip(uniform.history, reference.history, strict=True):
        assert ours["loss"] == theirs["loss"] and ours["projected_grad"] == theirs["projected_grad"]
        assert ours["max_importance_weight"] == 1 and np.isclose(ours["sampling_entropy"], np.log(6))
    warm = QuadraticRun(5)
    sazo.train(SAZOConfig(**common, beta=0.5, warmup_steps=20), warm)
    assert [h["loss"] for h in warm.history[:20]] == [h["loss"] for h in reference.history[:20]]
    assert warm.history[20]["loss"] != reference.history[20]["loss"]
    assert not torch.equal(warm.model.theta, reference.model.theta)


def test_scores_learn_the_gradient_norms_and_the_law_follows_them():
    """With lr = 0 the gradients stay fixed and E[d_j^2] = ||grad l_j||^2: after 600 steps of
    2 of 6 examples the example with a 10x larger gradient has the largest score and probability;
    every weight stays within 1 / (1 - beta) = 2; the logged law is the one the scores give."""
    run = QuadraticRun(3, scales=(1, 1, 10, 1, 1, 1))
    sazo.train(SAZOConfig(steps=600, batch_size=2, lr=0.0, beta=0.5, rho=0.9), run)
    largest = int(run.gradient_norms().argmax())
    assert largest == 2 and run.state["scores"].argmax() == largest
    ratios = capped_ratios(sampling_ratios(run.history[-2]["scores"], 0.5), 2)  # the last step's law
    assert ratios.argmax() == largest and ratios.max() > 2, "the adaptive law prefers the large gradient"
    last = run.history[-1]
    assert last["max_importance_weight"] == pytest.approx(1 / ratios.min()) and 1 / ratios.min() <= 2
    assert last["sampling_entropy"] == pytest.approx(-(ratios / 6 * np.log(ratios / 6)).sum())
    assert last["sampling_entropy"] < np.log(6) - 0.05
    assert run.history[0]["share_visited"] == pytest.approx(2 / 6) and last["share_visited"] == 1


def test_each_step_by_hand_from_the_forward_passes():
    """From the losses each forward pass returned: s0 is the mean d_j^2 of the 3 warm-up steps and
    unvisited examples keep it; then every step logs g = (1/|B|) sum d_j / (N p_j) and the weighted
    loss under the law of the scores the step began with, and advances the EMA of its batch only."""
    eps, rho = 1e-3, 0.8
    run = QuadraticRun(6, scales=(1, 3, 1, 0.3, 1, 2))
    sazo.train(SAZOConfig(steps=12, batch_size=2, lr=0.01, eps=eps, beta=0.7, rho=rho), run)
    steps = [(picks, (plus - minus).numpy() / (2 * eps), ((plus + minus) / 2).numpy())
             for (picks, plus), (_, minus) in zip(run.calls[::2], run.calls[1::2], strict=True)]
    s0 = np.mean([d**2 for _, d, _ in steps[:3]])
    picks, d, _ = steps[3]
    expected = np.full(6, s0)
    expected[picks] = rho * s0 + (1 - rho) * d**2
    assert np.allclose(run.history[3]["scores"], expected, rtol=1e-12)
    for t in range(4, 12):
        picks, d, loss = steps[t]
        ratios = capped_ratios(sampling_ratios(run.history[t - 1]["scores"], 0.7), 2)[picks]
        assert run.history[t]["projected_grad"] == pytest.approx(np.mean(d / ratios), rel=1e-12)
        assert run.history[t]["loss"] == pytest.approx(np.mean(loss / ratios), rel=1e-12)
        expected = run.history[t - 1]["scores"].copy()
        expected[picks] = rho * expected[picks] + (1 - rho) * d**2
        assert np.allclose(run.history[t]["scores"], expected, rtol=1e-12)


def test_sazo_descends_on_the_quadratic():
    run = QuadraticRun(4, scales=(1, 1, 4, 1, 0.5, 1))
    start = run.losses().mean().item()
    sazo.train(SAZOConfig(steps=300, batch_size=2, lr=0.01, beta=0.5), run)
    assert run.losses().mean().item() < 0.5 * start


# ---------------------------------------------------------------- the tiny model through the harness


@pytest.fixture
def jobs(tmp_path, monkeypatch, tiny_model_dir):
    """Like conftest's `workdir`, for any method: the tiny model, gsm8k data and tracking prepared;
    `train(method, out, **settings)` and `evaluate(method, artifact)` run one job, seed 0."""
    from core import models
    from core.outputs import write_json
    from jobs import data, tracking
    from jobs import evaluate as evaluation

    monkeypatch.chdir(tmp_path)
    cfg = validation.validate(tiny_config(tiny_model_dir, mezo={}))
    models.prepare(cfg.model, Path("results/model"))
    data.prepare(cfg, "gsm8k", Path("results/data/gsm8k"))
    write_json(Path("results/tracking.json"), tracking.init(cfg))
    common = dict(data_dir=Path("results/data/gsm8k"), tracking_file=Path("results/tracking.json"))
    configs = {"mezo": mezo.MeZOConfig, "sazo": SAZOConfig}

    def run_config(method, settings):
        return config.for_run(dataclasses.replace(cfg, methods={method: configs[method](**settings)}),
                              method, "gsm8k", 0)

    def train(method, out, **settings):
        training.train(run_config(method, settings), method, "gsm8k", 0,
                       model_manifest=Path("results/model/manifest.json"), out=Path(out), **common)
        return Path(out)

    def evaluate(method, artifact, **settings):
        return evaluation.evaluate(run_config(method, settings), method, "gsm8k", 0, artifact_file=Path(artifact),
                                   out=Path(artifact).parent / "eval.json", **common)

    return SimpleNamespace(train=train, evaluate=evaluate)


SETTINGS = dict(steps=4, batch_size=2, lr=1e-3, eps=1e-3, eval_every=2, heldout_size=2)
"""8 problems, 2 held out: 6 train, the default warm-up is 3 steps; held-out losses at steps 0, 2 and 4."""


def weights(artifact: Path) -> dict:
    return load_file(Path(read_json(artifact)["path"]) / "model.safetensors")


def test_same_forward_passes_and_heldout_problems_as_mezo_the_sampler_logged_and_the_model_evaluated(
        jobs, monkeypatch):
    """Zero extra model calls: equal steps and batch give SAZO exactly MeZO's 2 |B| forward passes
    per step (16), read from the meters; the held-out curve is measured on MeZO's held-out
    problems (so both start from the same held-out loss) and costs neither any training query;
    the sampler's three diagnostics are logged every step; the trained model goes through the
    evaluator."""
    heldout = {}
    heldout_loss = training.TrainingRun.heldout_loss

    def recording(self, problems, batch_size):
        heldout.setdefault(self.method, set()).update(p.id for p in problems)
        return heldout_loss(self, problems, batch_size)

    monkeypatch.setattr(training.TrainingRun, "heldout_loss", recording)
    artifacts = {m: jobs.train(m, f"results/{m}/artifact.json", **SETTINGS, **extra)
                 for m, extra in (("mezo", {}), ("sazo", {"warmup_steps": 1}))}
    runs = {m: read_json(a.parent / "metrics.json") for m, a in artifacts.items()}
    meters = {m: r["meters"] for m, r in runs.items()}
    assert meters["sazo"]["forward_passes"] == meters["mezo"]["forward_passes"] == 2 * 2 * 4
    assert meters["sazo"]["heldout_forward_passes"] == meters["mezo"]["heldout_forward_passes"] == 3 * 2
    assert meters["sazo"]["backward_passes"] == meters["sazo"]["sequences_generated"] == 0
    assert len(heldout["sazo"]) == 2 and heldout["sazo"] == heldout["mezo"]
    curves = {m: [(h["step"], h["heldout_loss"]) for h in r["history"] if "heldout_loss" in h] for m, r in runs.items()}
    assert [step for step, _ in curves["sazo"]] == [step for step, _ in curves["mezo"]] == [0, 2, 4]
    assert curves["sazo"][0] == curves["mezo"][0], "same problems, same untrained model"
    history = [h for h in runs["sazo"]["history"] if "loss" in h]
    assert [h["step"] for h in history] == [0, 1, 2, 3]
    assert all(h["forward_passes"] == 4 * (h["step"] + 1) for h in history), "loss is logged against queries"
    assert history[0]["max_importance_weight"] == 1 and history[0]["sampling_entropy"] == pytest.approx(np.log(6))
    for h in history[1:]:
        assert 1 <= h["max_importance_weight"] <= 2 and h["sampling_entropy"] <= np.log(6) + 1e-12
    shares = [h["share_visited"] for h in history]
    assert shares[0] == 2 / 6 and shares == sorted(shares) and all(round(s * 6, 9) == int(round(s * 6)) for s in shares)

    result = jobs.evaluate("sazo", artifacts["sazo"], **SETTINGS, warmup_steps=1)
    assert result["method"] == "sazo" and result["inference_passes"] == 1 and result["problems"] == 2
    assert result["cost"]["train"]["forward_passes"] == 16 and 0 <= result["greedy"]["value"] <= 1


def test_same_seed_same_weights_and_an_interrupted_run_resumes_to_them(jobs, monkeypatch):
    settings = dict(SETTINGS, warmup_steps=1)
    reference = jobs.train("sazo", "results/a/artifact.json", **settings)
    shutil.rmtree("results/work")
    again = jobs.train("sazo", "results/b/artifact.json", **settings)
    assert all(torch.equal(weights(reference)[k], weights(again)[k]) for k in weights(reference))

    shutil.rmtree("results/work")
    with killed_at_step(monkeypatch, 3):  # after the checkpoint at step 2, in the adaptive phase
        jobs.train("sazo", "results/c/artifact.json", **settings)
    resumed = jobs.train("sazo", "results/c/artifact.json", **settings)
    assert all(torch.equal(weights(reference)[k], weights(resumed)[k]) for k in weights(reference))
    first, second = (read_json(a.parent / "metrics.json")["history"] for a in (reference, resumed))
    keys = ("step", "loss", "projected_grad", "sampling_entropy", "max_importance_weight", "share_visited",
            "heldout_loss", "forward_passes")
    assert [[h.get(k) for k in keys] for h in first] == [[h.get(k) for k in keys] for h in second]
    assert [h["step"] for h in second if "heldout_loss" in h] == [0, 2, 4], "each held-out point once"
