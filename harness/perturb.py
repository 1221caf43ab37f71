"""Seeded Gaussian perturbations applied in place: the "seed trick" of MeZO and the ES methods.

Only (seed, scale) is ever stored; the noise is regenerated tensor by tensor when needed, so a
perturbation costs one tensor-sized buffer, not a copy of the model.

Noise modes:
- "iid" (default): tensor i draws from a generator seeded by (seed, i), so tensors get
  independent noise (as MeZO's sequential generator does).
- "shared": every tensor re-seeds with `seed`, as the RandOpt, CoRP, ESSAM and Qiu et al. code
  does; tensors of equal shape then receive identical noise. Offered for fidelity.
"""

from __future__ import annotations

import math
from typing import Iterable, Literal, Sequence

import numpy as np
import torch

NoiseMode = Literal["iid", "shared"]


def tensor_seed(seed: int, index: int, mode: NoiseMode = "iid") -> int:
    if mode == "shared":
        return int(seed)
    # SeedSequence mixes (seed, index) so neighbouring seeds do not give correlated streams.
    return int(np.random.SeedSequence([int(seed), index]).generate_state(1, dtype=np.uint64)[0] >> 1)


def noise(param: torch.Tensor, seed: int, index: int, mode: NoiseMode = "iid") -> torch.Tensor:
    """The standard-normal noise of tensor `index` under `seed`: fp32, on the tensor's device."""
    generator = torch.Generator(device=param.device).manual_seed(tensor_seed(seed, index, mode))
    return torch.randn(param.shape, generator=generator, device=param.device, dtype=torch.float32)


@torch.no_grad()
def perturb_(params: Sequence[torch.Tensor], seed: int, scale: float, mode: NoiseMode = "iid") -> None:
    """params += scale * noise(seed), tensor by tensor, in place."""
    for index, param in enumerate(params):
        param.add_(noise(param, seed, index, mode).to(param.dtype), alpha=scale)


def _combination(param: torch.Tensor, index: int, terms: list[tuple[int, float]], mode: NoiseMode) -> torch.Tensor:
    """sum_j coef_j * noise(seed_j) for tensor `index`, in fp32: one accumulator and one noise tensor."""
    total = torch.zeros(param.shape, dtype=torch.float32, device=param.device)
    for seed, coef in terms:
        total.add_(noise(param, seed, index, mode), alpha=coef)
    return total


@torch.no_grad()
def combine_(params: Sequence[torch.Tensor], terms: Iterable[tuple[int, float]], mode: NoiseMode = "iid") -> None:
    """params += sum_j coef_j * noise(seed_j): an ES or zeroth-order update, accumulated in fp32.

    The sum for a tensor is formed in a fixed order, so applying the negated terms adds exactly
    the negated sum: a move is undone up to the rounding of the two additions to the parameters.
    """
    terms = list(terms)
    for index, param in enumerate(params):
        param.add_(_combination(param, index, terms, mode).to(param.dtype))


@torch.no_grad()
def combination_norm(params: Sequence[torch.Tensor], terms: Iterable[tuple[int, float]],
                     mode: NoiseMode = "iid") -> float:
    """||sum_j coef_j * noise(seed_j)||_F over all tensors, regenerating the noise tensor by tensor."""
    terms = list(terms)
    return math.sqrt(sum(_combination(param, index, terms, mode).square().sum(dtype=torch.float64).item()
                         for index, param in enumerate(params)))


def population(rng: np.random.Generator, size: int, antithetic: bool = False) -> list[tuple[int, float]]:
    """`size` members as (seed, sign): member i is theta + sign * sigma * noise(seed).

    Antithetic pairs (EGGROLL; an option for every ES method) share a seed with opposite signs,
    so `size` must then be even.
    """
    if antithetic and size % 2:
        raise ValueError(f"antithetic sampling needs an even population, got {size}")
    seeds = rng.integers(2**31, size=size // 2 if antithetic else size).tolist()
    if antithetic:
        return [(seed, sign) for seed in seeds for sign in (1.0, -1.0)]
    return [(seed, 1.0) for seed in seeds]


def trainable(model: torch.nn.Module) -> list[torch.Tensor]:
    """The parameters a full-parameter method perturbs, in a fixed order (tied weights once)."""
    return list(model.parameters())
