"""MeZO's update rule against hand computations on a quadratic objective, where the two-point
estimate is exact, and the seeded-noise engine it stands on; on the tiny model, the held-out
loss curve and what it costs."""

import pytest
import torch

from core.outputs import read_json
from core.perturb import combine_, noise, perturb_
from jobs import train as training
from methods.mezo import zo_step


def quadratic(dim=12, examples=5, seed=0):
    """Per-example losses l_j = 0.5 (a_j . theta - b_j)^2 over two parameter tensors."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(examples, dim, generator=g, dtype=torch.float64)
    b = torch.randn(examples, generator=g, dtype=torch.float64)
    params = [torch.randn(4, 2, generator=g, dtype=torch.float64), torch.randn(4, generator=g, dtype=torch.float64)]

    def flat():
        return torch.cat([p.reshape(-1) for p in params])

    def losses():
        return 0.5 * (a @ flat() - b) ** 2

    def gradients():  # d l_j / d theta, one row per example
        return (a @ flat() - b)[:, None] * a

    return params, flat, losses, gradients


def test_perturbation_is_seeded_and_restores():
    params, flat, *_ = quadratic()
    before = flat().clone()
    perturb_(params, seed=7, scale=1e-3)
    moved = flat().clone()
    perturb_(params, seed=7, scale=-1e-3)
    assert not torch.equal(moved, before)
    assert torch.allclose(flat(), before, atol=1e-15)
    perturb_(params, seed=7, scale=1e-3)
    assert torch.equal(flat(), moved)


def test_noise_is_independent_per_tensor_unless_shared():
    a, b = torch.zeros(50), torch.zeros(50)
    assert not torch.equal(noise(a, 3, 0), noise(b, 3, 1))
    assert torch.equal(noise(a, 3, 0, "shared"), noise(b, 3, 1, "shared"))


def test_projected_gradient_is_the_directional_derivative():
    params, flat, losses, gradients = quadratic()
    theta = flat().clone()
    z = torch.cat([noise(p, 11, i).double().reshape(-1) for i, p in enumerate(params)])
    expected = gradients() @ z  # exact for a quadratic: the central difference has no error term
    grads, mean_loss, g = zo_step(params, losses, seed=11, eps=1e-3)
    assert g == grads.mean().item()
    assert torch.allclose(grads, expected, rtol=1e-6, atol=1e-9)
    assert torch.allclose(flat(), theta, atol=1e-12), "parameters not restored"
    # (l+ + l-) / 2 = l(theta) + O(eps^2): the loss MeZO logs is the loss at theta.
    assert torch.allclose(mean_loss, losses(), atol=1e-4)


def test_update_moves_along_minus_lr_g_z_with_decoupled_decay():
    params, flat, losses, gradients = quadratic()
    theta = flat().clone()
    z = torch.cat([noise(p, 5, i).double().reshape(-1) for i, p in enumerate(params)])
    directional = (gradients() @ z).mean().item()  # g, exact for a quadratic
    lr, wd = 0.1, 0.01
    _, _, g = zo_step(params, losses, seed=5, eps=1e-3, lr=lr, weight_decay=wd)
    assert g == pytest.approx(directional, rel=1e-6)
    decayed = torch.cat([torch.full((8,), 1.0), torch.zeros(4)]).double()  # the vector (ndim 1) is not decayed
    expected = theta - lr * (g * z + wd * decayed * theta)
    assert torch.allclose(flat(), expected, atol=1e-12)


def test_estimate_points_along_the_true_gradient():
    """E_z[(grad . z) z] = grad: the mean of 4000 estimates has cosine > 0.95 with the gradient (dim 12)."""
    params, flat, losses, gradients = quadratic()
    true = gradients().mean(0)
    total = torch.zeros_like(true)
    for seed in range(4000):
        grads, _, _ = zo_step(params, losses, seed=seed, eps=1e-3)
        z = torch.cat([noise(p, seed, i).double().reshape(-1) for i, p in enumerate(params)])
        total += grads.mean() * z
    cosine = torch.nn.functional.cosine_similarity(total / 4000, true, dim=0)
    assert cosine > 0.95


def test_mezo_descends_on_the_quadratic():
    params, _, losses, _ = quadratic()
    start = losses().mean().item()
    for seed in range(300):
        zo_step(params, losses, seed=seed, eps=1e-3, lr=0.02)
    assert losses().mean().item() < 0.5 * start


def test_combine_equals_sequential_perturbations():
    params, flat, *_ = quadratic()
    theta = flat().clone()
    combine_(params, [(1, 0.5), (2, -0.25)])
    combined = flat().clone()
    perturb_(params, 1, -0.5)
    perturb_(params, 2, 0.25)
    assert torch.allclose(flat(), theta, atol=1e-12)
    assert not torch.allclose(combined, theta)


HELDOUT = {"steps": 4, "batch_size": 2, "lr": 1e-3, "eval_every": 3, "heldout_size": 2}


@pytest.mark.parametrize("workdir", [("mezo", HELDOUT)], indirect=True, ids=["mezo"])
def test_heldout_loss_from_step_0_to_the_end_on_fixed_unseen_problems_costs_no_training_query(workdir, monkeypatch):
    """Held-out losses at steps 0 (before the first update), 3 and 4 (after the last), each on the
    same 2 problems, none of which is ever trained on; their forward passes are counted apart, so
    the training meters are MeZO's 2 passes over a batch of 2 per step, and each held-out row
    carries the training queries spent to reach the weights it evaluated."""
    calls = []  # (problem ids, inside a held-out evaluation), in order
    loss = training.TrainingRun.loss

    def recording(self, problems, grad=False):
        calls.append(({p.id for p in problems}, self.meters._active_phase == "heldout"))
        return loss(self, problems, grad)

    monkeypatch.setattr(training.TrainingRun, "loss", recording)
    result = read_json(workdir.train().parent / "metrics.json")
    meters, history = result["meters"], result["history"]
    assert meters["forward_passes"] == meters["forward_equivalents"] == 2 * 2 * 4
    assert meters["heldout_forward_passes"] == 3 * 2 and meters["heldout_tokens_processed"] > 0
    points = [h for h in history if "heldout_loss" in h]
    assert [h["step"] for h in points] == [0, 3, 4] and not any("loss" in h for h in points)
    assert [h["forward_passes"] for h in points] == [0, 2 * 2 * 3, 2 * 2 * 4]
    assert [h["step"] for h in history if "loss" in h] == [0, 1, 2, 3]
    assert points[0]["heldout_loss"] != points[-1]["heldout_loss"], "training moved the held-out loss"
    heldout = [ids for ids, held in calls if held]
    trained = set().union(*(ids for ids, held in calls if not held))
    assert calls[0][1] and len(heldout) == 3 and len(heldout[0]) == 2 and heldout[0] == heldout[1] == heldout[2]
    assert not heldout[0] & trained and len(trained) > 2
