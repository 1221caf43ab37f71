"""The same meters for every method, hooked into the model so that no method can forget to count.

Counted by hooks on the model:
- forward_passes: sequences run through the model from an empty key/value cache (a training
  forward, a prefill); a generated sequence counts once, however many decode steps it takes,
  since its decode steps extend the same forward pass.
- tokens_processed: token positions computed in forward calls (prefill, decode steps, training).
- backward_passes: sequences whose logits (or, under TRL's fused LM head, whose token
  log-probabilities) a backward pass went through.
- recomputed_layers: decoder-layer forwards, per sequence, that a backward pass ran again under
  gradient checkpointing (transformers checkpoints each decoder layer's `forward`, so the
  recompute is seen by a hook on the layer's first submodule firing while autograd's engine runs
  a backward). recompute_passes = recomputed_layers / decoder layers: the sequences whose forward
  was recomputed, in whole forwards (fractional when only some layers are checkpointed).
Counted by the harness's sampler (GRPO's rollouts included) and reward: sequences_generated,
tokens_generated, reward_calls, reward_errors (completions scored 0 because the verifier failed,
under `reward.on_error: zero`, or could not grade them within its limits, evals/grading.py),
reward_hacks (code completions scored 0 because they answered their tests with something other
than plain data, or exited while the tests ran, evals/sandbox).
Counted by the harness where a value stops being finite (`training.on_nonfinite`): nonfinite
(losses, perturbed weights and training batches found not finite and skipped).
Set aside (`heldout`): evaluation a training run makes of its own progress (MeZO's and SAZO's
held-out loss) is not a training query; its forward passes and tokens are counted as
heldout_forward_passes and heldout_tokens_processed, its time as time_heldout_s, and never in
the training meters above.
Derived: forward_equivalents = forward_passes + recompute_passes + 2 x backward_passes (a backward
costs about two forwards, and a checkpointed backward also re-runs the forward it did not store).

Wall-clock per phase: `generate` (sampler), `score` (rewards and verifiers), `forward` (loss
forwards), `heldout` (set-aside evaluation); `update` is the rest of a training run's time
(perturbations, optimizer steps).
Peak memory: peak RSS of the process (CPU) and torch.cuda.max_memory_allocated (GPU).
Peak disk (`peak_disk_mb`): the largest size of the whole run's `results/` (every job's files, not
only this job's) that this job measured at the points where it writes most (`disk_sample`, called by
the harness: after each training checkpoint, after writing weights for vLLM, and at the job's end,
before its work directory is removed). Sampled, and jobs run side by side, so it is a lower bound of
the true peak. MLflow's database and artifacts count where the tracking URI puts them under
`results/` (the default: `results/mlflow.db`, `results/mlartifacts`).
"""

from __future__ import annotations

import resource
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import torch

from core.outputs import RESULTS, disk_mb

COUNTERS = (
    "forward_passes",
    "tokens_processed",
    "backward_passes",
    "recomputed_layers",
    "sequences_generated",
    "tokens_generated",
    "reward_calls",
    "reward_errors",
    "reward_hacks",
    "nonfinite",
    "heldout_forward_passes",
    "heldout_tokens_processed",
)
PHASES = ("generate", "score", "forward", "heldout")
PEAKS = ("peak_memory_mb", "peak_disk_mb")
"""High-water marks, not running totals: a stage records them as they are at its end."""
HELD_OUT = ("forward_passes", "tokens_processed")
"""The counters a held-out loss forward adds to; `heldout` moves its share to `heldout_<name>`."""


def forward_equivalents(forward_passes: float, recompute_passes: float, backward_passes: float) -> float:
    """A run's queries in forward passes: a backward costs about two, and a recomputed forward one."""
    return forward_passes + recompute_passes + 2 * backward_passes


class Meters:
    def __init__(self) -> None:
        self.counts: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self.seconds: dict[str, float] = defaultdict(float)
        self.started = time.perf_counter()
        self.peak_disk_mb = 0.0
        self._active_phase: str | None = None
        self._handles: list = []
        self._decoder_layers = 1

    # -------------------------------------------------------------- counting

    def count(self, name: str, amount: int = 1) -> None:
        self.counts[name] += int(amount)

    def generated(self, completions) -> None:
        """Count generated sequences and their tokens (token id lists, end-of-sequence included)."""
        self.count("sequences_generated", len(completions))
        self.count("tokens_generated", sum(map(len, completions)))

    def attach(self, model: torch.nn.Module) -> torch.nn.Module:
        """Hook the counters into a causal LM; returns the model for chaining. Models attached
        together (a policy and its reference model) all count until `detach`."""
        # Imported here: the collect and report jobs use this module's cost figures and load no
        # model, and this import is 2 s of theirs.
        from transformers.modeling_layers import GradientCheckpointingLayer

        self._handles.append(model.register_forward_pre_hook(self._on_forward, with_kwargs=True))
        self._handles.append(model.register_forward_hook(self._on_output))
        self._handles.append(model.get_output_embeddings().register_forward_hook(self._on_logits))
        layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
        for layer in layers:
            first = next(layer.children())
            self._handles.append(first.register_forward_pre_hook(self._on_layer, with_kwargs=True))
        self._decoder_layers = max(len(layers), 1)
        model._nograd_meters = self
        return model

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _on_forward(self, module, args, kwargs) -> None:
        tokens = kwargs.get("input_ids", args[0] if args else None)
        if tokens is None:
            tokens = kwargs["inputs_embeds"]
        batch, length = tokens.shape[:2]
        self.count("tokens_processed", batch * length)
        # transformers 5.24 passes the key/value cache as `cache`, 5.19 (vLLM 0.32's pin) as `past_key_values`.
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        if cache is None or cache.get_seq_length() == 0:
            self.count("forward_passes", batch)

    def _on_layer(self, module, args, kwargs) -> None:
        # A layer's submodules run inside a backward only when a checkpoint recomputes the layer.
        if torch._C._current_graph_task_id() != -1:
            hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
            self.count("recomputed_layers", hidden.shape[0])

    def _on_logits(self, module, args, output) -> None:
        if output.requires_grad:
            batch = output.shape[0]
            output.register_hook(lambda grad: self.count("backward_passes", batch))

    def _on_output(self, module, args, output) -> None:
        # TRL's fused LM head (trl.trainer.utils.add_fused_lm_head) multiplies by the head's weight
        # without calling the head module, so `_on_logits` never sees it; its per-token
        # log-probabilities are where the backward pass enters the model instead.
        log_probs = getattr(output, "log_probs", None)
        if isinstance(log_probs, torch.Tensor):
            self._on_logits(module, args, log_probs)

    @contextmanager
    def heldout(self):
        """A held-out evaluation inside is not training: what it adds to the HELD_OUT counters
        moves to `heldout_<counter>`, and its time is phase `heldout`."""
        before = {name: self.counts[name] for name in HELD_OUT}
        with self.phase("heldout"):
            try:
                yield
            finally:
                for name in HELD_OUT:
                    self.counts[f"heldout_{name}"] += self.counts[name] - before[name]
                    self.counts[name] = before[name]

    # -------------------------------------------------------------- time and memory

    @contextmanager
    def phase(self, name: str):
        """Time a phase; nested phases count only toward the outermost one."""
        if self._active_phase is not None:
            yield
            return
        self._active_phase = name
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start
            self._active_phase = None

    @staticmethod
    def peak_memory_mb() -> float:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            return torch.cuda.max_memory_allocated() / 2**20
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    def disk_sample(self, root: Path = RESULTS) -> float:
        """Measure the size of `root` (the run's results/) now, keep the largest size seen as
        `peak_disk_mb`, and return the size (MB)."""
        size = disk_mb(root)
        self.peak_disk_mb = max(self.peak_disk_mb, size)
        return size

    def snapshot(self) -> dict[str, float]:
        """All meters now, under the names the result files and MLflow use."""
        total = time.perf_counter() - self.started
        phases = {f"time_{p}_s": self.seconds.get(p, 0.0) for p in PHASES}
        recompute = self.counts["recomputed_layers"] / self._decoder_layers
        return {
            **self.counts,
            "recompute_passes": recompute,
            "forward_equivalents": forward_equivalents(self.counts["forward_passes"], recompute,
                                                       self.counts["backward_passes"]),
            **phases,
            "time_update_s": max(total - sum(phases.values()), 0.0),
            "wall_clock_s": total,
            "peak_memory_mb": self.peak_memory_mb(),
            "peak_disk_mb": self.peak_disk_mb,
        }


def of(model: torch.nn.Module) -> Meters:
    """The meters attached to a model (through any PEFT or TRL wrapper)."""
    while not hasattr(model, "_nograd_meters"):
        inner = getattr(model, "base_model", None) or getattr(model, "model", None)
        if inner is None or inner is model:
            raise RuntimeError("no meters attached to this model: load it through core.models")
        model = inner
    return model._nograd_meters
