"""SAZO: sample-adaptive zeroth-order optimisation (arXiv 2610.12566): MeZO that draws training
examples in proportion to how much they still move the weights, at no extra model call.

*** RECONSTRUCTION, NOT A REPRODUCTION. No text or code of the SAZO paper was available: only a
summary of its abstract (../shared/reference/METHODS.md, section 3.2, marked [uncertain]). The
rule below is that section's design, built from the abstract and standard importance-sampling
SGD; every detail the abstract does not state is a choice made here, marked [choice], and
exposed in the config where it is a setting. Results of this method are results of this design. ***

Algorithm (MeZO's step, methods.mezo, with an adaptive batch and importance weights):

    state: s_j for every training example j (O(N) floats), an EMA of its squared directional derivative
    s_j = s0 for all j; s0 = mean d_j^2 over a warm-up of uniform MeZO steps (default: one epoch)
    for t = 1..T:
        p_j = (1 - beta) / N + beta sqrt(s_j) / sum_k sqrt(s_k)       (p_j >= (1 - beta) / N: none starved)
        draw a batch B of |B| distinct examples, example j included with probability |B| p_j
        draw a step seed; z ~ N(0, I) regenerated from it
        l+_j = l_j(theta + eps z), l-_j = l_j(theta - eps z) for j in B    (MeZO's two forward passes)
        d_j = (l+_j - l-_j) / (2 eps)                                        (~ grad l_j . z, per example)
        g = (1/|B|) sum_{j in B} d_j / (N p_j)        (unbiased: E_B[g] = (1/N) sum_j d_j, MeZO's target)
        theta <- theta - lr (g z + wd theta)
        s_j <- rho s_j + (1 - rho) d_j^2 for j in B   (E_z[(grad l_j . z)^2] = ||grad l_j||^2)
        every eval_every steps, at t = 0 and after t = T: heldout_loss = L(theta; D_dev)   (MeZO's)

The variance-optimal sampling law is p_j proportional to ||grad l_j||; sqrt(s_j) estimates it from
the d_j MeZO computes anyway, so a step costs exactly MeZO's 2 |B| forward passes.

Choices where the abstract is silent:
- [choice] Batches are drawn WITHOUT replacement, as MeZO's are, by systematic sampling over a
  random order (Madow 1949), whose inclusion probabilities are exactly pi_j = |B| p_j; the
  estimate is then Horvitz-Thompson's, (1/N) sum_{j in B} d_j / pi_j, which is the formula above.
  A batch cannot include an example with probability above 1: where |B| p_j > 1 (tiny data sets,
  beta near 1) pi_j is capped at 1 and the other examples share the rest in proportion to p, and
  the weight uses the capped law, so the estimate stays unbiased. With replacement would allow
  the same example twice in a batch, a query that adds nothing.
- [choice] While p is uniform (beta = 0, or the warm-up) the batch is drawn exactly as MeZO draws
  it (`run.batch`), so those steps are MeZO's, draw for draw and bit for bit.
- [choice] s0: the mean d_j^2 of a warm-up of uniform steps (METHODS.md's example), or a constant.
  An example not yet visited keeps s0; as training lowers the gradients, s0 exceeds the visited
  examples' s_j, so unvisited examples are drawn more, not starved.
- [choice] The EMA advances on a visit, not every step; no staleness decay (the uniform share
  1 - beta bounds every weight by 1 / (1 - beta) and revisits every example).
- [choice] beta = 0.5 and rho = 0.9 (METHODS.md's example for rho); the paper's values are unknown.
- Logged each step: `loss`, the importance-weighted batch loss, an unbiased estimate of the mean
  training loss (MeZO's uniform mean is its beta = 0 case), so loss against `forward_passes`
  compares SAZO and MeZO; `sampling_entropy` (nats, of p; log N when uniform);
  `max_importance_weight` (max_j 1 / (N p_j) over the whole data set); `share_visited`.
- The claim's fair yardstick: the importance-weighted `loss` is measured on SAZO's own batches,
  MeZO's on uniform ones; `heldout_loss` (methods.mezo) is the same held-out problems under the
  same evaluation for both, against the same training queries (`forward_equivalents`). N counts
  the training problems left after the held-out set is removed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import numpy as np
import torch

from core.config import Positive, Range
from core.contract import Artifact, Run
from core.perturb import trainable
from methods import register
from methods.mezo import MeZOConfig, batch_objective, finite_mean, heldout_curve, queries, zo_step


@dataclass
class SAZOConfig(MeZOConfig):
    """MeZO's settings (same defaults) plus the sampler's; the sampler's defaults are this reconstruction's choices."""

    beta: Annotated[float, Range(ge=0, lt=1)] = 0.5
    """Adaptive share of the sampling law, in [0, 1): p_j = (1 - beta)/N + beta sqrt(s_j)/sum sqrt(s); 0 is MeZO."""
    rho: Annotated[float, Range(ge=0, lt=1)] = 0.9
    """EMA decay of s_j, in [0, 1): s_j <- rho s_j + (1 - rho) d_j^2 on each visit of example j."""
    s0: Annotated[float, Range(ge=0)] | None = None
    """Initial s_j of every example; null: the mean d_j^2 over the warm-up of uniform (MeZO) steps."""
    warmup_steps: Positive | None = None
    """Uniform steps that measure s0 when s0 is null; null: one epoch, ceil(N / batch_size)."""


def sampling_ratios(scores: np.ndarray, beta: float) -> np.ndarray:
    """N p_j, each example's sampling probability relative to uniform, for
    p_j = (1 - beta) / N + beta sqrt(s_j) / sum_k sqrt(s_k). Written as a ratio so that
    beta = 0 gives exactly 1 (importance weight 1 / ratio = 1, bit for bit MeZO)."""
    root = np.sqrt(scores)
    if root.sum() == 0:  # no example has moved yet: nothing to prefer
        return np.ones(len(scores))
    return (1 - beta) + beta * len(scores) * root / root.sum()


def capped_ratios(ratios: np.ndarray, size: int) -> np.ndarray:
    """The ratios N p_j a batch of `size` distinct examples can realise: its inclusion probability
    pi_j = size * ratio_j / N is at most 1, so ratios above N / size are capped there and the
    others rescaled in proportion to keep their sum N. Unchanged when no ratio exceeds the cap."""
    n, cap = len(ratios), len(ratios) / size
    capped = ratios
    while (capped > cap).any():  # each pass caps at least one more example, so at most N passes
        full = capped >= cap
        capped = np.where(full, cap, ratios * (n - full.sum() * cap) / ratios[~full].sum())
    return capped


def systematic_sample(rng: np.random.Generator, inclusion: np.ndarray) -> np.ndarray:
    """Indices of distinct examples, example j included with probability inclusion[j] (each at most
    1, summing to the batch size): systematic sampling over a random order (Madow 1949). With
    equal probabilities the batch is a uniformly random subset, MeZO's law."""
    order = rng.permutation(len(inclusion))
    edges = np.cumsum(inclusion[order])
    size = round(edges[-1])
    edges[-1] = size  # float rounding must not leave the last point past the end
    return order[np.searchsorted(edges, rng.random() + np.arange(size), side="right")]


def ema_(scores: np.ndarray, picks: np.ndarray, grads: np.ndarray, rho: float) -> None:
    """s_j <- rho s_j + (1 - rho) d_j^2 for the examples just visited; the others keep theirs."""
    scores[picks] = rho * scores[picks] + (1 - rho) * grads**2


BIBTEX = """
@misc{sazo2026,
  title = {{SAZO}: Sample-Adaptive Zeroth-Order Optimisation},
  year = {2026},
  eprint = {2610.12566},
  archiveprefix = {arXiv},
  note = {Authors not recorded in this suite's sources; nograd runs a reconstruction from the abstract}
}"""


@register("sazo", config=SAZOConfig, display="SAZO", order=100, outputs="model", bibtex=BIBTEX,
          paper="SAZO: Sample-Adaptive Zeroth-Order optimisation (arXiv 2610.12566); reconstructed from its abstract",
          test_settings={"steps": 2, "batch_size": 2, "warmup_steps": 1}, queries=queries)
def train(config: SAZOConfig, run: Run) -> Artifact:
    heldout = heldout_curve(config, run)
    n = len(run.train)
    size = min(config.batch_size, n)
    if config.s0 is None:
        warmup = math.ceil(n / size) if config.warmup_steps is None else config.warmup_steps
    else:
        warmup = 0
    params = trainable(run.model)
    position = {problem.id: j for j, problem in enumerate(run.train)}
    # Everything carried from step to step lives in run.state, which every checkpoint saves.
    run.state.update(scores=np.full(n, np.nan if config.s0 is None else config.s0), visited=np.zeros(n, bool),
                     warmup_d2=0.0, warmup_count=0)
    for step in run.steps(config.steps, heldout, config.eval_every):
        state = run.state  # read every step: a resume replaces run.state with the checkpoint's
        scores, visited = state["scores"], state["visited"]
        if step == warmup and config.s0 is None:
            scores[:] = state["warmup_d2"] / state["warmup_count"]
        if step < warmup or config.beta == 0:
            ratios = np.ones(n)
            batch = run.batch(size)
            picks = np.array([position[problem.id] for problem in batch])
        else:
            ratios = capped_ratios(sampling_ratios(scores, config.beta), size)
            picks = systematic_sample(run.rng, size * ratios / n)
            batch = [run.train[j] for j in picks]
        seed = int(run.rng.integers(2**31))
        importance = 1 / ratios[picks]

        def weighted(values: torch.Tensor) -> torch.Tensor:  # finite where the values are: the weights are
            return torch.as_tensor(importance, dtype=values.dtype, device=values.device) * values

        grads, loss, projected = zo_step(params, batch_objective(run, batch, config.objective), seed, config.eps,
                                         config.noise, config.lr, config.weight_decay,
                                         lambda grads: finite_mean(weighted(grads)))
        kept = torch.isfinite(grads)  # every example, unless the harness skipped a non-finite loss
        d = grads[kept].detach().double().cpu().numpy()
        picks = picks[kept.cpu().numpy()]
        if step < warmup:
            state["warmup_d2"] += float((d**2).sum())
            state["warmup_count"] += len(d)
        else:
            ema_(scores, picks, d, config.rho)
        visited[picks] = True
        p = ratios / n
        run.log(loss=weighted(loss)[kept].mean().item(), projected_grad=projected,
                sampling_entropy=float(-(p * np.log(p)).sum()), max_importance_weight=float(1 / ratios.min()),
                share_visited=float(visited.mean()))
    return run.save_model()
