"""The parameter spaces an ES method searches, each an ordered list of tensors:

- `full(model)`: every weight of the model (`core.perturb.trainable`);
- `lora(model)`: a peft LoRA adapter's matrices, lora_A then lora_B of each adapted layer;
- `SingularValues(model)`: the singular values of each LoRA matrix's SVD (ESSA). With
  A = U_A diag(s_A) V_A^T and B = U_B diag(s_B) V_B^T, the singular vectors are frozen and only
  the s vectors are searched: 2r values per adapted layer. `decompose="product"` instead
  decomposes the layer's update BA = U diag(s) V^T: r values per adapted layer.

The s vectors drive the forward pass through the adapter's own weights: `set` (or `apply`, after
editing `tensors` in place) rewrites each LoRA matrix from its basis, so `model.generate`, peft's
`save_pretrained` and the evaluator see a plain LoRA adapter. A matrix is rewritten as

    W(s) = W0 + U diag(s - s0) V^T

which in exact arithmetic is U diag(s) V^T (W0 = U diag(s0) V^T is its SVD), and which gives W0
bit for bit at s = s0: the adapter's outputs are reproduced exactly, not to the SVD's rounding.
Rewriting the weights, rather than parametrizing them (torch.nn.utils.parametrize), keeps the
model's modules, state dict and checkpoints those of a plain peft model, and costs one small
matrix product per LoRA matrix per `set`, not one per forward call.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Literal, Sequence

import numpy as np
import torch

from core.perturb import trainable

Decomposition = Literal["each", "product"]

full = trainable
"""Every weight of the model, in a fixed order (tied weights once)."""


def lora_pairs(model: torch.nn.Module, adapter: str | None = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(lora_A, lora_B) weights of every adapted layer's active adapters (or of `adapter`), in module order."""
    from peft.tuners.lora import LoraLayer

    return [(layer.lora_A[name].weight, layer.lora_B[name].weight)
            for layer in model.modules() if isinstance(layer, LoraLayer)
            for name in ([adapter] if adapter else layer.active_adapters) if name in layer.lora_A]


def lora(model: torch.nn.Module) -> list[torch.Tensor]:
    """A peft LoRA adapter's matrices: lora_A (r x in) then lora_B (out x r) of each adapted layer."""
    return [weight for pair in lora_pairs(model) for weight in pair]


@dataclass
class Basis:
    """The frozen part of one rewritten matrix: W(s) = weight0 + U diag(s - s0) Vh."""

    weight0: torch.Tensor
    """The matrix when the space was made, in its own dtype."""
    U: torch.Tensor
    """Left singular vectors (float64)."""
    s0: torch.Tensor
    """Singular values of the decomposition (float64, descending)."""
    Vh: torch.Tensor
    """Right factor (float64): V^T, or for `product` the r x r map that turns s into lora_B."""


def _svd(matrix: torch.Tensor) -> Basis:
    U, s, Vh = torch.linalg.svd(matrix.detach().double(), full_matrices=False)
    return Basis(matrix.detach().clone(), U, s, Vh)


def _product(A: torch.Tensor, B: torch.Tensor) -> Basis:
    """The SVD of BA = U diag(s) V^T expressed through lora_B alone, lora_A fixed:
    B(s) = B0 + U diag(s - s0) G with G = V^T A^+, so that B(s) A = U diag(s) V^T.

    From QRs B = Q_B R_B and A^T = Q_A R_A: BA = Q_B (R_B R_A^T) Q_A^T; the r x r core's SVD
    P diag(s) Qh gives U = Q_B P, V^T = Qh Q_A^T, and G = Qh R_A^-T (A must have full rank r).
    """
    Q_B, R_B = torch.linalg.qr(B.detach().double())
    Q_A, R_A = torch.linalg.qr(A.detach().double().T)
    if torch.linalg.matrix_rank(R_A) < R_A.shape[0]:
        raise ValueError("decompose='product' needs every lora_A to have full rank r")
    P, s, Qh = torch.linalg.svd(R_B @ R_A.T)
    G = torch.linalg.solve_triangular(R_A, Qh.T, upper=True).T
    return Basis(B.detach().clone(), Q_B @ P, s, G)


class SingularValues:
    """The singular values of a LoRA adapter's SVD as a search space (see the module docstring).

    `tensors` holds one s vector per rewritten matrix (lora_A and lora_B of each layer for
    `each`, lora_B of each layer for `product`). `fraction` < 1 searches only the largest
    ceil(fraction r) values of each vector and keeps the rest at their SVD values. `bases`
    (from an earlier space on the same model) restores a decomposition instead of computing one,
    as a resumed run must: by then the adapter's weights are no longer the decomposed ones.
    """

    def __init__(self, model: torch.nn.Module, decompose: Decomposition = "each", fraction: float = 1.0,
                 bases: Sequence[Basis] | None = None) -> None:
        pairs = lora_pairs(model)
        if not pairs:
            raise ValueError("the model has no LoRA adapter to decompose")
        if decompose == "each":
            self.weights = [weight for pair in pairs for weight in pair]
        else:
            self.weights = [B for _, B in pairs]
        if bases is None:
            bases = [_svd(w) for w in self.weights] if decompose == "each" else [_product(A, B) for A, B in pairs]
        self.bases = list(bases)
        self.tensors = [basis.s0.clone() for basis in self.bases]
        self.searched = [max(1, math.ceil(fraction * len(s))) for s in self.tensors]

    @property
    def dimension(self) -> int:
        return sum(self.searched)

    def get(self) -> np.ndarray:
        """The searched singular values as one flat float64 vector."""
        return np.concatenate([s[:m].cpu().numpy() for s, m in zip(self.tensors, self.searched)])

    @torch.no_grad()
    def set(self, vector: np.ndarray) -> None:
        """Set the searched singular values from a flat vector and rewrite the adapter."""
        vector = np.asarray(vector, dtype=np.float64)
        if vector.shape != (self.dimension,):
            raise ValueError(f"expected {self.dimension} singular values, got shape {vector.shape}")
        offsets = np.cumsum([0, *self.searched])
        for s, start, end in zip(self.tensors, offsets[:-1], offsets[1:]):
            s[: end - start] = torch.from_numpy(vector[start:end]).to(s.device)
        self.apply()

    @torch.no_grad()
    def apply(self) -> None:
        """Rewrite every matrix from its basis and current s: W = W0 + U diag(s - s0) V^T."""
        for weight, basis, s in zip(self.weights, self.bases, self.tensors):
            delta = (basis.U * (s - basis.s0)) @ basis.Vh
            weight.copy_((basis.weight0.double() + delta).to(weight.dtype))

    @contextmanager
    def population(self, model: torch.nn.Module, vectors: Sequence[np.ndarray]) -> Iterator[list[str]]:
        """One extra LoRA adapter per vector (`member0`, `member1`, ...), each the active adapter
        with its searched singular values set to that vector, for scoring a population in one
        batch (`Run.population_rollout`). The active adapter and s are left as they were; the
        extra adapters are deleted on exit, so checkpoints and the saved adapter never hold them."""
        current, active = self.get(), model.active_adapter
        names = [f"member{j}" for j in range(len(vectors))]
        try:
            for name, vector in zip(names, vectors):
                model.add_adapter(name, model.peft_config[active])
                self.set(vector)
                with torch.no_grad():
                    for pair, copy in zip(lora_pairs(model), lora_pairs(model, name)):
                        for weight, target in zip(pair, copy):
                            target.copy_(weight)
            self.set(current)
            yield names
        finally:
            self.set(current)
            for name in names:
                if name in model.peft_config:
                    model.delete_adapter(name)
