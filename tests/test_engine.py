"""The shared ES engine: fitness shaping against hand computations, antithetic populations,
the error of perturbing a real model in place and restoring it, and the fp32 master copy that
keeps low-precision models' updates."""

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import killed_at_step
from core import fitness, models
from core.outputs import read_json
from core.perturb import combine_, in_fp32, moves, noise, perturb_, perturbed, population, trainable
from methods.mezo import zo_step


def test_fitness_shaping_by_hand():
    rewards = np.array([0.0, 1.0, 1.0, 2.0])
    assert np.allclose(fitness.centered(rewards), [-1, 0, 0, 1])
    assert np.allclose(fitness.zscore(rewards), np.array([-1, 0, 0, 1]) / np.sqrt(0.5))
    # Tied members share their mean rank: breaking the tie by position (as OpenAI ES's argsort does) would
    # move along a direction chosen by member order, which the rewards do not support.
    assert np.allclose(fitness.centered_ranks(rewards), [-0.5, 0, 0, 0.5])
    e = np.exp([0.0, 1.0, 1.0, 2.0])
    assert np.allclose(fitness.softmax(rewards), e / e.sum())
    assert np.allclose(fitness.softmax(rewards, temperature=0.5), e**2 / (e**2).sum())
    assert np.allclose(fitness.top_k(rewards, 2), [0, 0.5, 0, 0.5]), "ties go to the earlier member"
    assert np.allclose(fitness.zscore(np.ones(3)), 0) and np.allclose(fitness.centered_ranks([3.0]), 0)
    assert np.allclose(fitness.shape(rewards, "top_k", k=1), [0, 0, 0, 1])


def test_antithetic_population_pairs_seeds_with_opposite_signs():
    members = population(np.random.default_rng(0), 6, antithetic=True)
    assert [sign for _, sign in members] == [1.0, -1.0] * 3
    assert members[0][0] == members[1][0] and len({seed for seed, _ in members}) == 3
    plain = population(np.random.default_rng(0), 5)
    assert len(plain) == 5 and all(sign == 1.0 for _, sign in plain)
    with pytest.raises(ValueError):
        population(np.random.default_rng(0), 5, antithetic=True)


def test_restore_error_of_in_place_perturbation_is_bounded(tiny_model_dir):
    """theta + sigma z - sigma z differs from theta by float rounding only: at most a few ulps of
    |theta| + |sigma z| per element, measured here on the tiny model in fp32 after 50 rounds."""
    model, _ = models.load(tiny_model_dir)
    params = trainable(model)
    before = [p.detach().clone() for p in params]
    sigma = 1e-3
    for seed in range(50):
        perturb_(params, seed, sigma)
        perturb_(params, seed, -sigma)
    worst = max(((p - b).abs() / (b.abs() + 5 * sigma)).max().item() for p, b in zip(params, before))
    assert worst < 50 * torch.finfo(torch.float32).eps, f"relative restore error {worst:.2e}"


def test_noise_drawn_into_a_scratch_buffer_is_the_noise_drawn_fresh():
    """A pass draws into views of two buffers (`Scratch`) instead of fresh tensors: the same numbers,
    at sizes below and above the 16 that torch's vectorised normal fill works in, at any offset."""
    buffer = torch.empty(100_003)
    for size in (1, 5, 16, 17, 31, 4_099, 100_000):
        for offset in (0, 3):
            like = torch.zeros(size)
            assert torch.equal(noise(like, 9, 2), noise(like, 9, 2, out=buffer[offset : offset + size])), size


def separate_mezo_step(weights, objective, seed, eps, lr, decay):
    """A MeZO step as five passes over the weights (each perturbation in and out, then the decay
    and the update): what `zo_step`'s fused moves must equal bit for bit."""
    with perturbed(weights, [(seed, eps)]):
        plus = objective()
    with perturbed(weights, [(seed, -eps)]):
        minus = objective()
    g = ((plus - minus) / (2 * eps)).mean().item()
    with torch.no_grad():
        for _, tensor in in_fp32(weights):
            if tensor.ndim >= 2:
                tensor.mul_(1 - decay)
    perturb_(weights, seed, -lr * g)
    return g


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fused_moves_give_the_separate_moves_bits_with_fewer_draws(tiny_model_dir, monkeypatch, dtype):
    """`zo_step` leaves one point and enters the next, and leaves the second with the update, in
    one pass each, drawing each tensor's z 3 times a step instead of 5 (below fp32 3 either way: a
    master's exit is a copy, which the fused pass skips); a population walked member to member (`moves`) ends where
    member-by-member `perturbed` blocks end. Both bit for bit, on the tiny model, MeZO's weight
    decay and the fp32 restore's roundings included."""
    import core.perturb as perturb_module

    ids = torch.tensor([[5, 17, 40, 99, 3, 250], [8, 8, 120, 7, 64, 2]])

    def objective(model):
        def losses():
            with torch.no_grad():
                logits = model(input_ids=ids).logits[:, :-1].float()
            return torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none").mean(1)
        return losses

    draws = []
    real_noise = perturb_module.noise
    monkeypatch.setattr(perturb_module, "noise", lambda *args: draws.append(args[1]) or real_noise(*args))
    (fused, _), (separate, _) = models.load(tiny_model_dir, dtype), models.load(tiny_model_dir, dtype)
    fused_weights, separate_weights = trainable(fused), trainable(separate)
    for seed in (3, 4):
        draws.clear()
        _, _, g = zo_step(fused_weights, objective(fused), seed, eps=1e-3, lr=1e-2, weight_decay=0.5)
        assert len(draws) == 3 * len(fused_weights)
        draws.clear()
        assert separate_mezo_step(separate_weights, objective(separate), seed, 1e-3, 1e-2, 0.5 * 1e-2) == g
        assert len(draws) == (5 if dtype == "float32" else 3) * len(separate_weights)
    members = [[(7, 1e-2)], [(8, -1e-2), (9, 3e-3)], [(10, 1e-2)]]
    with moves(fused_weights):
        for terms in members:
            fused_weights.move(terms)
    for terms in members:
        with perturbed(separate_weights, terms):
            pass
    for name, tensors in (("master", zip(fused_weights, separate_weights)),
                          ("model", zip(fused.parameters(), separate.parameters()))):
        assert all(torch.equal(a, b) for a, b in tensors), f"the fused moves changed the {name}'s bits"


# ---------------------------------------------------------------- below fp32: the fp32 master copy


def bf16_model(tiny_model_dir):
    model, _ = models.load(tiny_model_dir, "bfloat16")
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    return model

def test_shared_noise_draws_a_recurring_shape_once_a_seed_for_the_bits_of_a_draw_per_tensor(tiny_model_dir,
                                                                                           monkeypatch):
    """Under "shared" noise (the ES methods' code) every tensor of a shape gets the same numbers, so a
    pass draws each shape once a seed: the weights are those of drawing every tensor's noise afresh
    and summing it into zeros, bit for bit."""
    import core.perturb as perturb_module

    model, _ = models.load(tiny_model_dir, "float32")
    weights = trainable(model)
    before = [w.detach().clone() for w in weights]
    shapes = {w.shape for w in weights}
    assert len(shapes) < len(weights), "the tiny model has no recurring shape to share"
    draws = []
    real_noise = perturb_module.noise
    monkeypatch.setattr(perturb_module, "noise", lambda *args, **kw: draws.append(args[1]) or real_noise(*args, **kw))
    terms = [(11, 1e-2), (12, -3e-3)]
    combine_(weights, terms, "shared")
    assert len(draws) == len(terms) * len(shapes)
    for index, (moved, start) in enumerate(zip(weights, before)):
        total = torch.zeros_like(start)
        for seed, coef in terms:
            total.add_(real_noise(start, seed, index, "shared"), alpha=coef)
        assert torch.equal(moved, start + total), index
    with moves(weights) as walk:
        draws.clear()
        walk.move([(13, 1e-2)], "shared")
        walk.move([(14, 1e-2)], "shared")
    assert len(draws) == 4 * len(shapes), "enter, leave and enter, leave: each a draw per shape"



def test_a_mezo_step_in_bf16_moves_the_fp32_master_by_lr_g_z(tiny_model_dir):
    """MeZO's update lr g z (about 1e-6 per element) is far below half a bf16 ulp of these weights
    (~1e-4 at 0.02), so added straight into bf16 it would round away; the master keeps it."""
    model = bf16_model(tiny_model_dir)
    weights = trainable(model)
    assert all(t.dtype == torch.float32 for t in weights) and len(weights.masters) == len(weights)
    start = [t.clone() for t in weights]
    ids = torch.tensor([[5, 17, 40, 99, 3, 250], [8, 8, 120, 7, 64, 2]])

    def losses():
        logits = model(input_ids=ids).logits[:, :-1].float()
        return torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none").mean(1)

    lr, seed = 1e-6, 3
    with torch.no_grad():
        _, _, g = zo_step(weights, losses, seed, eps=1e-3, lr=lr)
    assert g != 0.0
    for index, (moved, before) in enumerate(zip(weights, start)):
        step = -lr * g * noise(before, seed, index)
        rounding = torch.finfo(torch.float32).eps * (before.abs() + step.abs())
        assert ((moved - (before + step)).abs() <= rounding).all(), f"tensor {index}: not theta - lr g z"
    assert all(torch.equal(p, t.to(torch.bfloat16)) for p, t in zip(model.parameters(), weights)), \
        "the model must be the cast of its master"
    moved_master = np.mean([(t != b).float().mean().item() for t, b in zip(weights, start)])
    assert moved_master > 0.99, "the master lost the update"


def test_perturb_restore_rounds_leave_bf16_weights_bit_identical(tiny_model_dir):
    model = bf16_model(tiny_model_dir)
    weights = trainable(model)
    combine_(weights, [(11, 3e-5)])  # an update: the master is no longer made of bf16 values
    model_before = [p.detach().clone() for p in model.parameters()]
    master_before = [t.clone() for t in weights]
    for seed in range(100):
        with perturbed(weights, [(seed, 1e-3)]):
            assert not all(torch.equal(p, b) for p, b in zip(model.parameters(), model_before))
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), model_before)), "bf16 weights changed"
    assert all(torch.equal(t, b) for t, b in zip(weights, master_before)), "the master moved"
    with pytest.raises(RuntimeError, match="do not nest"), perturbed(weights, [(1, 1e-3)]):
        with perturbed(weights, [(2, 1e-3)]):
            pass


def test_fp32_models_get_no_master_copy(tiny_model_dir):
    model, _ = models.load(tiny_model_dir)
    weights = trainable(model)
    assert weights.masters == {} and all(t is p for t, p in zip(weights, model.parameters()))
    assert trainable(model) is weights, "one Weights (one master) per model"


@pytest.mark.parametrize("workdir", [("mezo", {"steps": 4, "batch_size": 2}, {"dtype": "bfloat16"})],
                         indirect=True, ids=["mezo-bf16"])
def test_a_bf16_run_resumes_with_its_master(workdir, monkeypatch, tiny_model_dir):
    """Killed after the step-2 checkpoint, a bf16 MeZO run resumes to the same weights: the
    checkpoint holds the fp32 master, not only its bf16 cast (whose rounding would lose the
    first steps' updates)."""
    from safetensors.torch import load_file

    def weights_of(artifact):
        return load_file(Path(read_json(artifact)["path"]) / "model.safetensors")

    reference = weights_of(workdir.train("results/a/artifact.json"))
    parameters = sum(p.numel() for p in models.load(tiny_model_dir, "bfloat16")[0].parameters())
    assert read_json("results/a/metrics.json")["meters"]["master_mb"] == pytest.approx(4 * parameters / 2**20), \
        "the fp32 master's bytes are reported apart"
    shutil.rmtree("results/work")
    with killed_at_step(monkeypatch, 3):
        workdir.train("results/b/artifact.json")
    [work] = Path("results/work/train/mezo/gsm8k/seed0").iterdir()
    assert (work / "checkpoint" / "master.safetensors").exists()
    resumed = weights_of(workdir.train("results/b/artifact.json"))
    assert all(v.dtype == torch.bfloat16 for v in resumed.values())
    assert all(torch.equal(reference[k], resumed[k]) for k in reference), "resume lost the master"
