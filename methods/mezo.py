"""MeZO: memory-efficient zeroth-order optimisation (Malladi et al., NeurIPS 2023, arXiv 2305.17333).

Algorithm (SPSA with one direction per step, as in `princeton-nlp/MeZO` `zo_step` / `zo_update`):

    for t = 1..T:
        draw a batch B and a step seed s; z ~ N(0, I) regenerated from s, never stored
        theta <- theta + eps z;  l+ = L(theta; B)
        theta <- theta - 2 eps z; l- = L(theta; B)
        theta <- theta + eps z                       (restore)
        g = (l+ - l-) / (2 eps)                      (projected gradient, a scalar)
        theta <- theta - lr (g z + wd theta)         (z regenerated from s; no decay on biases/norms)
    every eval_every steps, at t = 0 and after t = T: heldout_loss = L(theta; D_dev)

Two forward passes over B per step, inference-level memory. The objective is MeZO's own
(`objective: loss`, cross-entropy of the task's reference solutions, an SFT objective) or, for
tasks read as RL, minus the mean training reward of greedy rollouts (`objective: reward`).

The held-out curve (`heldout_loss`, as MeZO's code evaluates its 500 dev examples): D_dev is a
fixed set of training problems that MeZO never trains on, the same ones for SAZO on the same
task and seed (`Run.hold_out`), and L is the reference solutions' cross-entropy whatever the
objective, so that MeZO and SAZO are compared on one yardstick. Its forward passes are an
evaluation, counted apart from the training queries (`Run.heldout_loss`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Callable, Literal, Sequence

import torch

from core.config import Positive, Range
from core.contract import Artifact, QueryCounts, Run
from core.errors import NogradError
from core.perturb import NoiseMode, moves, trainable
from methods import register

if TYPE_CHECKING:
    from core.task import Problem


@dataclass
class MeZOConfig:
    """MeZO's defaults for full-parameter fine-tuning (`large_models/mezo.sh`, README)."""

    steps: Positive = 20000
    """Optimisation steps T."""
    lr: Annotated[float, Range(ge=0)] = 1e-6
    """Learning rate eta (README: 1e-6 or 1e-7 for full parameters)."""
    eps: Annotated[float, Range(gt=0)] = 1e-3
    """Perturbation scale epsilon."""
    batch_size: Positive = 16
    """Training problems per step; both forward passes use the same batch."""
    weight_decay: Annotated[float, Range(ge=0)] = 0.0
    """Decoupled weight decay lambda, not applied to biases and norm weights."""
    objective: Literal["loss", "reward"] = "loss"
    """'loss': cross-entropy of reference solutions (MeZO's objective); 'reward': minus the mean
    greedy-rollout reward."""
    noise: Literal["iid", "shared"] = "iid"
    """Noise across tensors: independent per tensor (MeZO) or one seed re-used for every tensor."""
    eval_every: Positive = 500
    """Steps between held-out losses (also at step 0 and after the last): MeZO's code takes 4,000 (5
    points in 20,000), too coarse to resolve SAZO's claimed 6x (3,333 steps); 500 gives 41 points, 7
    before 3,333, at 3% of the training forwards."""
    heldout_size: Positive = 500
    """Training problems held out for the held-out loss and never trained on (MeZO's 500 dev
    examples); at most a third of the training split."""


def finite_mean(grads: torch.Tensor) -> torch.Tensor:
    """The mean over the examples whose projected gradient is finite: every example, unless the
    harness skipped a non-finite loss (`training.on_nonfinite`)."""
    return grads[torch.isfinite(grads)].mean()


def zo_step(params: Sequence[torch.Tensor], objective: Callable[[], torch.Tensor], seed: int, eps: float,
            noise: NoiseMode = "iid", lr: float = 0.0, weight_decay: float = 0.0,
            project: Callable[[torch.Tensor], torch.Tensor] = finite_mean) -> tuple[torch.Tensor, torch.Tensor, float]:
    """One step: two-point SPSA along z, then theta <- theta - lr (g z + wd theta) (`zo_step` and
    `zo_update` of MeZO's code). Returns (per-example projected gradients, per-example mean loss, g).

    `objective` returns a loss per example; the directional derivative of each example along z
    is (l+_j - l-_j) / (2 eps), NaN where either loss was (a loss the harness skipped), and
    g = project(gradients). A g that is not finite (every loss skipped) makes no update, nor does
    lr 0; decay spares biases and norm weights. Leaving theta - eps z and the update are one pass
    over the tensors (`Weights.move`), which draws each tensor's z once for the step's three moves
    after the first; below fp32 the moves go to the harness's fp32 master copy.
    """
    with moves(params) as weights:
        weights.move([(seed, eps)], noise)
        plus = objective()
        weights.move([(seed, -eps)], noise)
        minus = objective()
        grads = (plus - minus) / (2 * eps)
        g = project(grads).item()
        if lr and math.isfinite(g):
            if weight_decay and weights.mirrors:
                raise NogradError("weight_decay > 0 cannot run with sampler: 'vllm': the engine follows moves made "
                                  "from seeds, and decay is not one; set weight_decay: 0 or sampler: 'torch'")
            weights.move(mode=noise, update=[(seed, -lr * g)], decay=lr * weight_decay)
    return grads, (plus + minus) / 2, g


def heldout_curve(config: MeZOConfig, run: Run) -> Callable[[], dict[str, float]]:
    """Hold out D_dev (before any batch is drawn) and return the evaluation `run.steps` logs."""
    dev = run.hold_out(config.heldout_size)
    return lambda: {"heldout_loss": run.heldout_loss(dev, config.batch_size)}


def batch_objective(run: Run, batch: Sequence, objective: str) -> Callable[[], torch.Tensor]:
    """The per-example loss on `batch` that zo_step differentiates: the reference solutions'
    cross-entropy ('loss') or minus the reward of one greedy rollout ('reward')."""
    if objective == "loss":
        return lambda: run.loss(batch)
    return lambda: -torch.as_tensor(run.rollout(batch)[1][:, 0])


def queries(config: MeZOConfig, train: Sequence[Problem], model: torch.nn.Module) -> QueryCounts:
    """Per step the batch twice, as losses or greedy rollouts; the held-out loss on its set at
    steps 0, eval_every, ... and after the last."""
    heldout = min(config.heldout_size, len(train) // 3)
    batch = min(config.batch_size, len(train) - heldout)
    step = QueryCounts.rollouts(2 * batch) if config.objective == "reward" else QueryCounts(forward_passes=2 * batch)
    curve = math.ceil(config.steps / config.eval_every) + 1
    return step * config.steps + QueryCounts(heldout_forward_passes=heldout * curve)


BIBTEX = """
@inproceedings{malladi2023mezo,
  author = {Malladi, Sadhika and Gao, Tianyu and Nichani, Eshaan and Damian, Alex and Lee, Jason D. and Chen, Danqi and Arora, Sanjeev},
  title = {Fine-Tuning Language Models with Just Forward Passes},
  booktitle = {Advances in Neural Information Processing Systems (NeurIPS)},
  year = {2023},
  eprint = {2305.17333},
  archiveprefix = {arXiv},
  note = {MeZO}
}"""  # noqa: E501


@register("mezo", config=MeZOConfig, display="MeZO", order=10, outputs="model", bibtex=BIBTEX,
          paper="Malladi et al. 2023, Fine-Tuning Language Models with Just Forward Passes, NeurIPS (arXiv 2305.17333)",
          test_settings={"steps": 3, "batch_size": 2}, queries=queries)
def train(config: MeZOConfig, run: Run) -> Artifact:
    heldout = heldout_curve(config, run)
    params = trainable(run.model)
    for _ in run.steps(config.steps, heldout, config.eval_every):
        batch = run.batch(config.batch_size)
        seed = int(run.rng.integers(2**31))
        grads, loss, projected = zo_step(params, batch_objective(run, batch, config.objective), seed, config.eps,
                                         config.noise, config.lr, config.weight_decay)
        run.log(loss=loss[torch.isfinite(grads)].mean().item(), projected_grad=projected)
    return run.save_model()
