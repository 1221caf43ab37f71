"""ESSA's cluster claim, modelled: how long one optimizer step of evolution strategies (ES, ESSA)
and of data-parallel GRPO takes on G GPUs, from compute, bytes and a network. Pure functions, no
I/O; `python -m benchmarks.scaling` checks the ES half against Ray points measured on one machine,
and the report draws `speedups` beside ESSA's figures (2x on 16 GPUs, 6x on 128). A MODEL, not a
measurement: nothing here has run on a cluster.

Per step on G GPUs (`es_step_seconds`, `grpo_step_seconds`):

    ES:    T_es(G)   = ceil(N / G) t_member + t_update + 2 G l + (b_out + b_in) / bw
    GRPO:  T_grpo(G) = ceil(R / G) (t_rollout + t_train) + 2 (G - 1) / G S / bw + 2 (G - 1) l

- ES: N members dealt to G workers as jobs/population.py deals them (contiguous shares, at
  most ceil(N / G) each), t_member the rollouts of one member's batch; every worker then applies
  the step's update from the seeds or vectors it is told (t_update); messages go through the
  driver, a star: one message out to each worker (seeds or search vectors, b_out bytes in all)
  and one back (rewards, b_in), each message a latency l, all bytes through the driver's link.
  Beyond one worker per member (G > N), a member's batch is split over G // N workers (the Ray
  pool here does not split a member: a stated extension, `es_rollouts_per_worker`).
- GRPO: R = prompts x group rollouts per step split over G (data parallel), each rolled out
  (t_rollout) and then run forward and backward for the loss (t_train), then a ring all-reduce of
  the gradient of the trainable parameters, S = trainable parameters x bytes per gradient element.
- Compute from parameter count: a token costs 2 P FLOPs forward (P parameters); a rollout of n
  new tokens 2 P n at `rollout_utilisation` of the GPU's peak; a loss pass over prompt + new
  tokens costs `forward_equivalents` forwards (core.meters: the loss forward, the recompute of
  gradient checkpointing, 2 per backward; GRPO's `queries` in methods/grpo.py counts the same) at
  `train_utilisation` of peak.
- The speed-up at G is the time GRPO takes per rollout over the time ES takes per rollout, each on
  G GPUs: the ratio of times to a fixed number of rollouts.

Assumptions (the defaults; each a field below, each named in the report):
- GPU: NVIDIA H100 SXM, 989 TFLOP/s dense bf16; rollouts at 20% of peak (batched decoding is
  bound by memory bandwidth), loss passes at 40% (a typical training MFU).
- Network: 8 GPUs per node on NVLink (ring bandwidth 400 GB/s per GPU, 2 us a message); beyond a
  node, InfiniBand at 200 Gb/s (25 GB/s) per GPU, 5 us a message. A ring spanning nodes runs at
  its slowest link.
- Workload: config/paper.yaml's ESSA (32 problems per member, pycma's population 4 + floor(3 ln d),
  d = 2 r singular values per adapted layer, r = 16, 7 modules a layer) and GRPO (64 prompts x 8
  completions, full parameters, bf16 gradients); 1,024 new tokens a rollout (training.max_new_tokens)
  after a 256-token prompt; ESSA's messages as methods/essa.py logs them: 4 N (d + 1) bytes.
- Models: Qwen2.5-1.5B, 7B and 32B by parameter count and layers.

What the model leaves out, each of which would change its numbers: decoding's memory-bound floor
(a GPU with few rollouts still reads every weight each token), GRPO's optimizer step and weight
sync to a rollout engine, whether a model fits one GPU (32B GRPO at full parameters does not:
sharding would add all-gathers), stragglers, overlap of communication with compute. And it
assumes both methods need the same number of rollouts: ESSA's claim is time to a fixed MATH500
accuracy, which depends on how many steps each needs, which no systems model can give. The model
predicts the systems part only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from core.meters import forward_equivalents

GPUS = (1, 2, 4, 8, 16, 32, 64, 128)
"""The cluster sizes the report's curve runs over."""
PAPER_POINTS = {16: 2.0, 128: 6.0}
"""ESSA's figures (METHODS.md section 1): Qwen2.5-32B on PRM800K, time to a fixed MATH500 accuracy."""


@dataclass(frozen=True)
class Link:
    """One hop of the network: bytes per second each way and seconds a message."""

    bandwidth: float
    latency: float

    def seconds(self, nbytes: float, messages: int = 1) -> float:
        return messages * self.latency + nbytes / self.bandwidth


@dataclass(frozen=True)
class Cluster:
    """The hardware the model assumes (module docstring)."""

    peak_flops: float = 989e12
    """Dense bf16 FLOP/s of one GPU (H100 SXM)."""
    rollout_utilisation: float = 0.2
    """Share of peak that rollouts (batched decoding) reach."""
    train_utilisation: float = 0.4
    """Share of peak that loss forward and backward passes reach."""
    gpus_per_node: int = 8
    intra: Link = Link(400e9, 2e-6)
    """NVLink inside a node."""
    inter: Link = Link(25e9, 5e-6)
    """InfiniBand between nodes, 200 Gb/s per GPU."""

    def link(self, gpus: int) -> Link:
        """The slowest link of a ring or star over `gpus` GPUs."""
        return self.intra if gpus <= self.gpus_per_node else self.inter


@dataclass(frozen=True)
class Model:
    name: str
    params: float
    layers: int
    adapted_per_layer: int = 7
    """LoRA-adapted matrices per layer (q, k, v, o, gate, up, down: paper.yaml's target_modules)."""
    lora_rank: int = 16

    @property
    def essa_dimension(self) -> int:
        """Singular values ESSA searches: 2 r per adapted matrix (`decompose: each`)."""
        return self.layers * self.adapted_per_layer * 2 * self.lora_rank

    @property
    def essa_population(self) -> int:
        """pycma's default population for that dimension, as ESSA's `population_size: null` takes it."""
        return 4 + math.floor(3 * math.log(self.essa_dimension))


MODELS = (Model("Qwen2.5-1.5B", 1.54e9, 28), Model("Qwen2.5-7B", 7.62e9, 28), Model("Qwen2.5-32B", 32.8e9, 64))


@dataclass(frozen=True)
class Workload:
    """One step of each method at paper scale (config/paper.yaml; tests/test_cluster_model.py holds them to it)."""

    essa_batch: int = 32
    grpo_prompts: int = 64
    grpo_group: int = 8
    prompt_tokens: int = 256
    new_tokens: int = 1024
    gradient_bytes: int = 2
    """Bytes per gradient element (bf16)."""
    train_forward_equivalents: float = field(default_factory=lambda: forward_equivalents(1, 1, 1))
    """Per rollout: the loss forward, its recompute under gradient checkpointing, a backward (2)."""

    @property
    def grpo_rollouts(self) -> int:
        return self.grpo_prompts * self.grpo_group


# ---------------------------------------------------------------- the equations


def ring_allreduce_seconds(nbytes: float, gpus: int, link: Link) -> float:
    """A ring all-reduce of `nbytes` over `gpus`: 2 (G - 1) / G x S / bandwidth + 2 (G - 1) latencies."""
    if gpus == 1:
        return 0.0
    return 2 * (gpus - 1) / gpus * nbytes / link.bandwidth + 2 * (gpus - 1) * link.latency


def star_seconds(bytes_out: float, bytes_in: float, workers: int, link: Link) -> float:
    """The driver's scatter to `workers` and gather from them: a message each way per worker, every
    byte through the driver's link."""
    return link.seconds(bytes_out + bytes_in, messages=2 * workers)


def es_step_seconds(members: int, workers: int, member_s: float, update_s: float, bytes_out: float,
                    bytes_in: float, link: Link) -> float:
    """T_es(G) = ceil(N / G) t_member + t_update + the star's messages."""
    return math.ceil(members / workers) * member_s + update_s + star_seconds(bytes_out, bytes_in, workers, link)


def grpo_step_seconds(rollouts: int, gpus: int, rollout_s: float, train_s: float, gradient_bytes: float,
                      link: Link) -> float:
    """T_grpo(G) = ceil(R / G) (t_rollout + t_train) + a ring all-reduce of the gradient."""
    return math.ceil(rollouts / gpus) * (rollout_s + train_s) + ring_allreduce_seconds(gradient_bytes, gpus, link)


def es_rollouts_per_worker(members: int, batch: int, gpus: int) -> int:
    """The most rollouts one GPU does in an ES step: ceil(N / G) members' batches, or, with more GPUs
    than members, a member's batch split over G // N of them."""
    if gpus <= members:
        return math.ceil(members / gpus) * batch
    return math.ceil(batch / (gpus // members))


def token_seconds(params: float, flops: float) -> float:
    """Seconds of one token through a model of `params` parameters: 2 P FLOPs at `flops` per second."""
    return 2 * params / flops


# ---------------------------------------------------------------- at paper scale


def essa_step(model: Model, gpus: int, cluster: Cluster = Cluster(), work: Workload = Workload()) -> float:
    """ESSA's modelled step on `gpus` GPUs: its rollouts, its messages (4 N d out, 4 N back). The
    update (recomposing each adapter from its singular values, about 2 r FLOPs per LoRA parameter
    per member, a few GFLOP) is left out: under a millisecond beside seconds of rollouts."""
    members, d = model.essa_population, model.essa_dimension
    rollout_s = work.new_tokens * token_seconds(model.params, cluster.peak_flops * cluster.rollout_utilisation)
    rollouts = es_rollouts_per_worker(members, work.essa_batch, gpus)
    return (rollouts * rollout_s + star_seconds(4 * members * d, 4 * members, gpus, cluster.link(gpus)))


def grpo_step(model: Model, gpus: int, cluster: Cluster = Cluster(), work: Workload = Workload()) -> float:
    """Data-parallel GRPO's modelled step on `gpus` GPUs, full parameters."""
    rollout_s = work.new_tokens * token_seconds(model.params, cluster.peak_flops * cluster.rollout_utilisation)
    train_s = (work.train_forward_equivalents * (work.prompt_tokens + work.new_tokens)
               * token_seconds(model.params, cluster.peak_flops * cluster.train_utilisation))
    return grpo_step_seconds(work.grpo_rollouts, gpus, rollout_s, train_s, model.params * work.gradient_bytes,
                             cluster.link(gpus))


def speedup(model: Model, gpus: int, cluster: Cluster = Cluster(), work: Workload = Workload()) -> float:
    """ESSA over GRPO on `gpus` GPUs: GRPO's seconds per rollout over ESSA's (time to a fixed number of rollouts)."""
    essa = essa_step(model, gpus, cluster, work) / (model.essa_population * work.essa_batch)
    grpo = grpo_step(model, gpus, cluster, work) / work.grpo_rollouts
    return grpo / essa


def speedups(models=MODELS, gpus=GPUS, cluster: Cluster = Cluster(),
             work: Workload = Workload()) -> dict[str, list[float]]:
    """The modelled curve: per model, the speed-up at each cluster size in `gpus`."""
    return {m.name: [speedup(m, g, cluster, work) for g in gpus] for m in models}


def assumptions(cluster: Cluster = Cluster(), work: Workload = Workload()) -> str:
    """The model's inputs in one sentence, for the report's caption and claim row."""
    return (f"{cluster.peak_flops / 1e12:,.0f} TFLOP/s per GPU (H100 bf16), rollouts at "
            f"{cluster.rollout_utilisation:.0%} and training passes at {cluster.train_utilisation:.0%} of it; "
            f"{cluster.gpus_per_node} GPUs a node on NVLink ({cluster.intra.bandwidth / 1e9:,.0f} GB/s, "
            f"{cluster.intra.latency * 1e6:g} us), InfiniBand between nodes ({cluster.inter.bandwidth * 8 / 1e9:,.0f} "
            f"Gb/s per GPU, {cluster.inter.latency * 1e6:g} us), ring all-reduce of GRPO's bf16 gradient of every "
            f"parameter; ESSA {work.essa_batch} problems a member, pycma's population, its vectors and fitnesses "
            f"through the driver; GRPO {work.grpo_prompts} x {work.grpo_group} rollouts a step; "
            f"{work.prompt_tokens} + {work.new_tokens} tokens a rollout; equal rollouts to the accuracy "
            "for both methods")
