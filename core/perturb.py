"""Seeded Gaussian perturbations applied in place: the "seed trick" of MeZO and the ES methods.

Only (seed, scale) is ever stored; the noise is regenerated tensor by tensor when needed, so a
perturbation costs one tensor-sized buffer, not a copy of the model. A sequence of temporary moves
(a population scored member by member, MeZO's two points and its update) goes through `moves`:
each move leaves the last one in the same pass over the tensors (`Weights.move`), drawing a seed
shared by both once.

Noise modes:
- "iid" (default): tensor i draws from a generator seeded by (seed, i), so tensors get
  independent noise (as MeZO's sequential generator does).
- "shared": every tensor re-seeds with `seed`, as the RandOpt, CoRP, ESSAM and Qiu et al. code
  does; tensors of equal shape then receive identical noise. Offered for fidelity.

Precision: the updates these methods make are tiny (MeZO's lr g z is about 1e-6 per element,
ESSAM's about 4e-5), below half a bf16 ulp of most weights, so added straight into bf16 or fp16
weights they would round away and the method would not train. `trainable` therefore gives a
method fp32 tensors (`Weights`): the weights themselves when the model is in fp32, else one fp32
master copy, kept for the whole run, that every perturbation and update goes to and that the
model's weights are a cast of. A temporary move (`perturbed`) shows the model the cast of
master + offset and then the cast of the master again, so the low-precision weights return bit
for bit and the master never moves. The master is a real cost of the method: it is allocated in
the training process, where the memory meters see it.

Non-finite moves. A move whose result would not be finite (a coefficient so large that a weight
overflows) is caught tensor by tensor before it is written: inside `perturbed` that tensor is left
as it was and `Weights.finite` is False until the block ends, which the training run (jobs/train.py) reads
(`training.on_nonfinite`: the member is skipped, or the run stops); a lasting move (`perturb_`,
`combine_`) with a non-finite coefficient or result stops the run with one line, since its weights
cannot be trusted after it.
"""

from __future__ import annotations

import math
from collections import Counter
from contextlib import contextmanager
from typing import Iterable, Iterator, Literal, Sequence

import numpy as np
import torch

from core.errors import NogradError

NoiseMode = Literal["iid", "shared"]


def tensor_seed(seed: int, index: int, mode: NoiseMode = "iid") -> int:
    if mode == "shared":
        return int(seed)
    # SeedSequence mixes (seed, index) so neighbouring seeds do not give correlated streams.
    return int(np.random.SeedSequence([int(seed), index]).generate_state(1, dtype=np.uint64)[0] >> 1)


def noise(param: torch.Tensor, seed: int, index: int, mode: NoiseMode = "iid",
          out: torch.Tensor | None = None) -> torch.Tensor:
    """The standard-normal noise of tensor `index` under `seed`: fp32, on the tensor's device; drawn
    into `out` (fp32, of the tensor's shape) where given, with the same numbers (`torch.randn` is
    `normal_` on a new tensor)."""
    generator = torch.Generator(device=param.device).manual_seed(tensor_seed(seed, index, mode))
    if out is not None:
        return out.normal_(generator=generator)
    return torch.randn(param.shape, generator=generator, device=param.device, dtype=torch.float32)


class Scratch:
    """Where one pass over the weights draws its noise and sums its moves: two flat fp32 buffers the
    size of the largest tensor, allocated once a pass, each tensor's noise and sum a view of them.

    On a CPU a fresh buffer costs about half what drawing the noise into it costs (its memory is
    faulted in page by page): allocated per tensor and per step, the noise, the sum and the moved
    weight came to more than the draws (135M parameters, one thread: 0.6 s of allocations beside
    0.5-0.7 s of draws a pass). Drawn into, the numbers are the same; the memory is what one move
    held before (a noise tensor and a sum).

    Under "shared" noise every tensor of a shape gets the same numbers from a seed, so a shape that
    recurs in the pass (each layer's projections, norms) is drawn once per seed and kept for the
    pass: one layer's worth of noise a seed (9 MB for SmolLM2-135M), and about a quarter of the
    draws, the embedding matrix being the one large tensor drawn alone."""

    def __init__(self, tensors: Sequence[torch.Tensor]) -> None:
        largest = max(tensors, key=torch.Tensor.numel)
        self.device = largest.device
        self.buffers = [torch.empty(largest.numel(), dtype=torch.float32, device=largest.device) for _ in range(2)]
        shapes = Counter(t.shape for t in tensors if t.device == self.device)
        self.recurring = {shape for shape, count in shapes.items() if count > 1}
        self.kept: dict[tuple[int, torch.Size], torch.Tensor] = {}

    def noise(self, like: torch.Tensor) -> torch.Tensor | None:
        """A buffer of `like`'s shape to draw into (None for a tensor on another device)."""
        return self.buffers[0][: like.numel()].view(like.shape) if like.device == self.device else None

    def draw(self, like: torch.Tensor, seed: int, index: int, mode: NoiseMode) -> torch.Tensor:
        """`noise(like, seed, index, mode)`, to be read, not written: drawn into the buffer, or under
        "shared" noise for a recurring shape, drawn the first time and kept."""
        if mode != "shared" or like.device != self.device or like.shape not in self.recurring:
            return noise(like, seed, index, mode, self.noise(like))
        key = (seed, like.shape)
        if key not in self.kept:
            self.kept[key] = noise(like, seed, index, mode)
        return self.kept[key]

    def sum(self, like: torch.Tensor) -> torch.Tensor:
        """A buffer of `like`'s shape in fp32 to sum into, its contents left as they were."""
        if like.device != self.device:
            return torch.empty(like.shape, dtype=torch.float32, device=like.device)
        return self.buffers[1][: like.numel()].view(like.shape)


def noise_device(device: torch.device) -> str:
    """Where `noise` for a tensor on `device` is drawn, as far as its numbers depend on it: 'cpu',
    or the GPU's name. The same seed gives other numbers on the CPU and on a GPU (each has its own generator),
    and need not give the same on another GPU model, so a model stored as seeds records this and
    is rebuilt there (`core.artifacts.load`)."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type


def _below_fp32(tensor: torch.Tensor) -> bool:
    return tensor.is_floating_point() and torch.finfo(tensor.dtype).bits < 32


class Weights(list):
    """The tensors a full-parameter method does arithmetic on, in `trainable` order: each model
    weight itself where it is fp32 (or wider), an fp32 master copy of it where it is not.

    This module's functions keep the model a cast of the masters. A method that changes the
    tensors in place by other means (MeZO's weight decay) calls `sync` after."""

    def __init__(self, params: Sequence[torch.Tensor]) -> None:
        self.model_weights = list(params)
        super().__init__(p.detach().float() if _below_fp32(p) else p for p in self.model_weights)
        self._move: tuple[list[tuple[int, float]], NoiseMode] | None = None
        """The temporary move the model is at ((seed, coefficient) terms and noise mode), None at the centre."""
        self._skipped: set[int] = set()
        """Tensors the temporary move would have made non-finite, left at the centre."""
        self.finite = True
        """False inside a `perturbed` block whose move would have made a weight NaN or Inf."""
        self.mirrors: list = []
        """Engines holding a copy of these weights (a vLLM engine under `sampler: vllm`), told every
        move below as its (seed, coefficient) terms, which they regenerate the noise of and apply
        themselves: `perturb(terms, mode)` and `restore()` around a `perturbed` block, `combine(terms,
        mode)` for a lasting move. A change made by other means cannot be mirrored (`sync`)."""

    def centre(self) -> Iterator[torch.Tensor]:
        """Each tensor in fp32 as it is outside any `perturbed` block: the master where there is
        one (a block never moves it), else the weight less the block's offset, computed as the
        block's exit computes it; what a mirror attached inside a block is started from."""
        for index, (tensor, target) in enumerate(zip(self, self.model_weights)):
            if self._move is not None and tensor is target and index not in self._skipped:
                terms, mode = self._move
                yield tensor - combination(tensor, index, terms, mode)
            else:
                yield tensor

    def attach(self, mirror) -> None:
        """Tell `mirror`, which serves `centre()`, every move from now on; inside a `perturbed`
        block it is moved as the block moved these weights, and restored with them."""
        self.mirrors.append(mirror)
        if self._move is not None and self.finite:
            mirror.perturb(*self._move)

    @property
    def masters(self) -> dict[str, torch.Tensor]:
        """The fp32 master copies by tensor index (empty for an fp32 model): what a checkpoint saves."""
        return {str(i): t for i, (t, w) in enumerate(zip(self, self.model_weights)) if t is not w}

    @torch.no_grad()
    def load_masters(self, masters: dict[str, torch.Tensor]) -> None:
        """Restore master copies saved from `masters` (a resumed run) and cast them into the model."""
        for key, saved in masters.items():
            self[int(key)].copy_(saved)
        self.sync()

    @torch.no_grad()
    def sync(self, index: int | None = None) -> None:
        """Cast the masters (or the one of tensor `index`) into the model's weights. The moves of
        this module sync tensor by tensor; a method that calls it after changing the tensors by
        other means (MeZO's weight decay) cannot run beside a mirror, which follows seeds alone."""
        for i in range(len(self)) if index is None else (index,):
            if self[i] is not self.model_weights[i]:
                self.model_weights[i].copy_(self[i])

    @torch.no_grad()
    def move(self, terms: Iterable[tuple[int, float]] = (), mode: NoiseMode = "iid",
             update: Iterable[tuple[int, float]] = (), decay: float = 0.0) -> None:
        """Leave the temporary move the model is at, make a lasting `update`, and show the model the
        temporary move `terms` (none: the centre), in one pass over the tensors.

        Per tensor, in this order, each step as it is made alone:
        - leave: a low-precision weight takes the cast of its master (bit for bit what it was); an
          fp32 weight has the move's offset subtracted (within two roundings of where it was);
        - update: tensors of two or more dimensions scaled by 1 - `decay` (decoupled weight decay,
          which spares biases and norms), then each (seed, coefficient) added as `perturb_` adds it;
          a non-finite result stops the run;
        - enter: the weight set to (the cast of) tensor + `combination(terms)`, unless that is not
          finite: the tensor then stays at the centre and `finite` is False until the next move.
        Where every step uses one seed (MeZO leaves +eps z, enters -eps z, updates along z), its
        noise is drawn once per tensor, not once per step: the same numbers, and no more memory
        than one step holds (the noise and an accumulator)."""
        terms, update = list(terms), _finite_terms(list(update))
        left, left_mode = self._move or ([], mode)
        skipped, self._skipped = self._skipped, set()
        uses = {(seed, left_mode) for seed, _ in left} | {(seed, mode) for seed, _ in update + terms}
        one_seed = len(uses) == 1 and len(left) + len(update) + len(terms) > 1
        scratch = Scratch(self)
        for index, (tensor, target) in enumerate(zip(self, self.model_weights)):
            drawn = {(seed, how): scratch.draw(tensor, seed, index, how) for seed, how in uses} if one_seed else {}
            if left and index not in skipped and tensor is target:  # a master's weight is set at the end
                tensor.sub_(combination(tensor, index, left, left_mode, drawn, scratch).to(tensor.dtype))
            if decay and tensor.ndim >= 2:
                tensor.mul_(1 - decay)
            for seed, coef in update:
                z = drawn[seed, mode] if one_seed else scratch.draw(tensor, seed, index, mode)
                tensor.add_(z.to(tensor.dtype), alpha=coef)
            if update or decay:
                _checked(tensor, index)
            if terms:
                moved = combination(tensor, index, terms, mode, drawn, scratch).to(tensor.dtype).add_(tensor)
                if tensor is not target:
                    moved = target.copy_(moved)  # the cast to a low-precision weight may overflow too
                if not all_finite(moved):
                    self._skipped.add(index)
                    if tensor is not target:
                        target.copy_(tensor)
                elif tensor is target:
                    tensor.copy_(moved)  # tensor + offset, summed in the scratch buffer
            elif tensor is not target and (left or update or decay):
                target.copy_(tensor)
        was_finite, self.finite = self.finite, not self._skipped
        self._move = (terms, mode) if terms else None
        for mirror in self.mirrors:
            if left and was_finite and (update or not (terms and self.finite)):
                mirror.restore()
            if update:
                mirror.combine(update, mode)
            if terms and self.finite:  # a member that is not finite is not rolled out
                mirror.perturb(terms, mode)


def in_fp32(params: Sequence[torch.Tensor]) -> Iterator[tuple[int, torch.Tensor]]:
    """(index, tensor) for each tensor, the tensor in fp32 or wider: a `Weights` master, or, for a
    plain list, a transient fp32 copy of one weight at a time. What the caller adds to it before
    asking for the next item is cast into the model's weight."""
    for index, param in enumerate(params):
        if isinstance(params, Weights):
            yield index, param
            params.sync(index)
        else:
            tensor = param.float() if _below_fp32(param) else param
            yield index, tensor
            if tensor is not param:
                param.copy_(tensor)


def _finite_terms(terms: list[tuple[int, float]]) -> list[tuple[int, float]]:
    if bad := [(seed, coef) for seed, coef in terms if not math.isfinite(coef)]:
        raise NogradError(f"an update by a non-finite coefficient ({bad[0][1]} on seed {bad[0][0]}) was refused: "
                          "the weights are unchanged")
    return terms


def all_finite(tensor: torch.Tensor) -> bool:
    """Whether every element is finite, at the cost of one sum where they are: an Inf or NaN
    carries into the sum, so a finite sum proves them all finite; only a sum that is not (an element
    is not, or a sum of finite elements overflowed) is checked element by element. Over a model's
    weights this is an order of magnitude faster than `isfinite(...).all()`, and gives its answer."""
    return bool(torch.isfinite(tensor.sum(dtype=torch.float32))) or bool(torch.isfinite(tensor).all())


def _checked(tensor: torch.Tensor, index: int) -> None:
    if not all_finite(tensor):
        raise NogradError(f"an update made weight tensor {index} non-finite (overflow): the run stops, "
                          "its last checkpoint holds finite weights")


@torch.no_grad()
def perturb_(params: Sequence[torch.Tensor], seed: int, scale: float, mode: NoiseMode = "iid") -> None:
    """params += scale * noise(seed), tensor by tensor, in place (on the masters, if any)."""
    _finite_terms([(seed, scale)])
    scratch = Scratch(params)
    for index, tensor in in_fp32(params):
        tensor.add_(scratch.draw(tensor, seed, index, mode).to(tensor.dtype), alpha=scale)
        _checked(tensor, index)
    for mirror in getattr(params, "mirrors", ()):
        mirror.combine([(seed, scale)], mode)


def combination(param: torch.Tensor, index: int, terms: list[tuple[int, float]], mode: NoiseMode,
                drawn: dict[tuple[int, str], torch.Tensor] | None = None,
                scratch: Scratch | None = None) -> torch.Tensor:
    """sum_j coef_j * noise(seed_j) for tensor `index`, in fp32: one accumulator and one noise tensor,
    in `scratch` where given (`drawn` holds noise already drawn for this tensor, by (seed, mode)).
    What every move adds, here and in a vLLM engine that mirrors the weights (core/vllm_sampler.py)."""
    drawn = drawn or {}
    total = None
    for seed, coef in terms:
        z = drawn.get((seed, mode))
        if z is None:
            z = scratch.draw(param, seed, index, mode) if scratch else noise(param, seed, index, mode)
        if total is None:  # 0 + coef z, the numbers of adding it to zeros, without a pass that zeroes
            total = torch.mul(z, coef, out=scratch.sum(param)) if scratch else z * coef
        else:
            total.add_(z, alpha=coef)
    return torch.zeros(param.shape, dtype=torch.float32, device=param.device) if total is None else total


@torch.no_grad()
def combine_(params: Sequence[torch.Tensor], terms: Iterable[tuple[int, float]], mode: NoiseMode = "iid") -> None:
    """params += sum_j coef_j * noise(seed_j): an ES or zeroth-order update, accumulated in fp32.

    The sum for a tensor is formed in a fixed order, so applying the negated terms adds exactly
    the negated sum: a move is undone up to the rounding of the two additions to the parameters
    (the fp32 masters, for a low-precision model).
    """
    terms = _finite_terms(list(terms))
    scratch = Scratch(params)
    for index, tensor in in_fp32(params):
        tensor.add_(combination(tensor, index, terms, mode, scratch=scratch).to(tensor.dtype))
        _checked(tensor, index)
    for mirror in getattr(params, "mirrors", ()):
        mirror.combine(terms, mode)


@contextmanager
def moves(params: Sequence[torch.Tensor]) -> Iterator[Weights]:
    """`params` as `Weights`, to move from one temporary move to the next (`Weights.move`), each
    entered as the last is left, in one pass; at the block's end, however it ends, the weights are
    back at the centre. Blocks do not nest: a method moves the centre (an ascent, say) with `combine_`."""
    weights = params if isinstance(params, Weights) else Weights(params)
    if weights._move is not None:
        raise RuntimeError("perturbed() blocks do not nest; move the centre with combine_ instead")
    try:
        yield weights
    finally:
        if weights._move is not None:
            weights.move()


@contextmanager
def perturbed(params: Sequence[torch.Tensor], terms: Iterable[tuple[int, float]],
              mode: NoiseMode = "iid") -> Iterator[None]:
    """Inside the block the model is at theta + sum_j coef_j * noise(seed_j); after it, at theta.

    A low-precision weight is set to the cast of master + offset and then to the cast of the
    master again: bit for bit what it was, with the master never moved. An fp32 weight gets the
    offset added and then subtracted, and returns within the rounding of the two additions.
    A tensor the move would make non-finite is left unmoved, and `Weights.finite` is False inside.
    """
    with moves(params) as weights:
        weights.move(terms, mode)
        yield


@torch.no_grad()
def combination_norm(params: Sequence[torch.Tensor], terms: Iterable[tuple[int, float]],
                     mode: NoiseMode = "iid") -> float:
    """||sum_j coef_j * noise(seed_j)||_F over all tensors, regenerating the noise tensor by tensor."""
    terms, scratch = list(terms), Scratch(params)
    squares = (combination(param, index, terms, mode, scratch=scratch).square_() for index, param in enumerate(params))
    return math.sqrt(sum(square.sum(dtype=torch.float64).item() for square in squares))


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


def trainable(model: torch.nn.Module) -> Weights:
    """The parameters a full-parameter method perturbs, in a fixed order (tied weights once), as
    fp32 `Weights`. Every call on a model returns the same object, so a run keeps one master copy."""
    weights = model.__dict__.get("_nograd_weights")
    if weights is None:
        weights = model.__dict__["_nograd_weights"] = Weights(list(model.parameters()))
    return weights


def moved_finite(model: torch.nn.Module) -> bool:
    """False while the model is inside a `perturbed` block whose move would have made a weight non-finite."""
    weights = model.__dict__.get("_nograd_weights")
    return weights is None or weights.finite


def master_of(model: torch.nn.Module) -> Weights | None:
    """The model's `Weights` when it has fp32 master copies (a low-precision model that a method moved)."""
    weights = model.__dict__.get("_nograd_weights")
    return weights if weights is not None and weights.masters else None
