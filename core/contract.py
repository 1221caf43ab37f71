"""The contract a method is written against: the `run` its `train(config, run) -> Artifact` receives
(`Run`) and the artifact it returns (`Artifact`).

The harness's `jobs.train.TrainingRun` implements `Run` (tests/test_contract.py checks every
member and signature, and that methods/*.py use no member of the run outside it); test doubles
stand in for it by implementing part of it. Besides the run, a method uses only what it imports
from core/ (core.perturb seeded noise, core.fitness fitness shaping, core.spaces parameter
spaces, core.meters, core.sampler), never a job (tests/test_layers.py).

Imported by every method, so it imports nothing heavy at runtime: the types it names (torch,
numpy, transformers, the harness's config and meters) are read by type checkers only.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Callable, Iterator, Literal, Protocol, Sequence, TypedDict

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np
    import torch
    from peft import PeftModel
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from core.backend import Backend
    from core.config import Config
    from core.meters import Meters
    from core.perturb import NoiseMode
    from core.sampler import Completion
    from core.task import Problem, Task

Score = Literal["reward", "correctness"]
"""What a rollout's rewards are: correctness plus the format term (the training reward), or correctness alone."""

ArtifactKind = Literal["model", "adapter", "seeds", "ensemble"]
"""How a trained result is stored; core/artifacts.py loads each kind."""


class _ArtifactKeys(TypedDict):
    kind: ArtifactKind
    """Which of the fields below it has: model and adapter a `path`, seeds `terms` and `mode`, ensemble `members`."""
    trained: bool
    """False only for the base model as loaded (`Run.base_artifact`)."""


class Artifact(_ArtifactKeys, total=False):
    """What a method returns and `artifact.json` holds: a plain JSON dict, made by `Run`'s artifact
    methods; `kind` and `trained` are always there, the other fields as the kind says."""

    path: str
    """model: a directory `from_pretrained` loads; adapter: a PEFT adapter directory on top of `base`."""
    terms: list[list[float]]
    """seeds: the base model plus sum_j coef_j * noise(seed_j), as [seed_j, coef_j] pairs."""
    mode: str
    """seeds: the noise mode of `terms` (core.perturb: 'iid' or 'shared')."""
    members: list[Artifact]
    """ensemble: single-model artifacts that answer by majority vote (K inference passes per answer)."""
    base: str
    """The starting model's path, added by the harness to artifact.json (adapters and seeds build on it)."""
    run_id: str
    """The MLflow training run, added by the harness to artifact.json."""


@dataclass(frozen=True)
class QueryCounts:
    """What a training run asks of the model, in the units the harness's meters count it
    (core/meters.py), as a method's `queries(config, train, model)` predicts it before the run for
    `nograd plan`: what the algorithm box says each step costs, times its steps. A count that
    depends on outcomes (a stage that may stop early, a gate that may not open) is its largest
    (`bound`). Perturbed members skipped as non-finite, which cost nothing, are not foreseen."""

    sequences_generated: int = 0
    """Rollouts: completions sampled or decoded greedily."""
    forward_passes: int = 0
    """Sequences run through the model, a generated one once: rollouts plus loss forwards."""
    backward_passes: int = 0
    """Sequences a backward pass went through."""
    recompute_passes: int = 0
    """Forwards a checkpointed backward recomputes."""
    heldout_forward_passes: int = 0
    """Held-out loss forwards, counted apart from training (MeZO's and SAZO's curve)."""
    inference_passes: int = 1
    """Models the artifact answers with (an ensemble's members): evaluation costs that many times one model's."""
    bound: bool = False
    """True when the counts are the most the run can spend, not what it will spend."""

    def __add__(self, other: QueryCounts) -> QueryCounts:
        return QueryCounts(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)
                          if f.name not in ("inference_passes", "bound")},
                       inference_passes=max(self.inference_passes, other.inference_passes),
                       bound=self.bound or other.bound)

    def __mul__(self, times: int) -> QueryCounts:
        return QueryCounts(**{f.name: getattr(self, f.name) * times for f in fields(self)
                          if f.name not in ("inference_passes", "bound")},
                       inference_passes=self.inference_passes, bound=self.bound)

    @staticmethod
    def rollouts(count: int) -> QueryCounts:
        """`count` completions: one forward pass each, however many tokens it takes."""
        return QueryCounts(sequences_generated=count, forward_passes=count)


class Run(Protocol):
    """Everything a method may use of the run it is given, and nothing else."""

    config: Config
    """The whole experiment config (read: `training.max_new_tokens`, `reward.format_weight`, `dtype`, `sampler`...)."""
    method: str
    """The method's registered name, for messages."""
    seed: int
    """The run's seed; `rng` is seeded by it."""
    model: PreTrainedModel | PeftModel
    """The model being trained, metered; a method may replace it (wrap it in a peft adapter) before its step loop."""
    tokenizer: PreTrainedTokenizerBase
    """The model's tokenizer."""
    task: Task
    """The task: its `name`, prompts and verifier."""
    train: list[Problem]
    """The training problems, less any held-out set (`hold_out`)."""
    rng: np.random.Generator
    """The run's generator, seeded by `seed` and saved with every checkpoint: a method draws from it alone."""
    state: dict
    """What the method must carry across a resume, saved with every checkpoint; a resume replaces the dict."""
    meters: Meters
    """The run's meters; a method only attaches a further model it runs (a reference model) so that it is counted."""
    backend: Backend
    """Where the run generates sequences (`backend.vllm`: a vLLM engine) and scores populations (`backend.ray`)."""
    population_workers: int
    """Members `score_population` scores side by side: 1 in the training process, `training.population_workers`
    (one per Ray worker) under `training.population: ray`; a method that scores one member a step scores this
    many per call instead, so that no worker waits."""
    work_dir: Path
    """A scratch directory of this run, outside the declared outputs (a library's own checkpoints), kept
    across a resume and removed once the run's artifact is written."""

    def batch(self, size: int) -> list[Problem]:
        """`size` training problems drawn uniformly without replacement from the run's generator."""

    def hold_out(self, size: int) -> list[Problem]:
        """Remove a fixed held-out set (drawn from the seed alone, at most a third) from `train` and return it;
        call it before drawing anything from `train`."""

    def prompts(self, problems: Sequence[Problem]) -> list[str]:
        """The prompt text of each problem, in the model's chat template (what the sampler and evaluator use)."""

    def reward_terms(self, problem: Problem, completion: str) -> tuple[float, float]:
        """Correctness (0/1) and answer format (0/1) of a completion: one metered reward call."""

    def rollout(self, problems: Sequence[Problem], n: int = 1, temperature: float = 0.0, top_p: float = 1.0,
                score: Score = "reward") -> tuple[list[list[Completion]], np.ndarray]:
        """`n` completions per problem through the metered sampler, and their rewards [problems, n]: correctness
        plus `reward.format_weight` times the format term, or with `score="correctness"` correctness alone."""

    def score_population(self, members: Sequence[Sequence[tuple[int, float]]], problems: Sequence[Problem],
                         score: Score = "reward", noise: NoiseMode = "iid") -> np.ndarray:
        """Greedy rollouts of `problems` by each member theta + sum_j c_j noise(s_j), given as its (seed,
        coefficient) terms in noise mode `noise` (core.perturb), scored as `rollout` scores: rewards
        [members, problems], theta unchanged after. One member after another in the training process, or
        spread over Ray workers under `training.population: ray`, with the same results, meters and draws."""

    def population_rollout(self, problems: Sequence[Problem], adapters: Sequence[str]) -> np.ndarray:
        """Greedy rollouts of every problem under each of the model's named LoRA `adapters`, in one batch;
        rewards [adapters, problems], as `rollout` gives them with that adapter active."""

    def loss(self, problems: Sequence[Problem], grad: bool = False) -> torch.Tensor:
        """Per-problem mean cross-entropy of the reference solution given the prompt (the SFT loss), metered."""

    def heldout_loss(self, problems: Sequence[Problem], batch_size: int) -> float:
        """Mean `loss` over held-out problems, an evaluation counted apart from the training meters."""

    def skip_nonfinite(self, what: str) -> None:
        """`what` (a loss, a batch) is NaN or Inf: counted in the `nonfinite` meter and left out by the caller, or,
        under `training.on_nonfinite: raise`, the run stops with one line naming it and the step."""

    def log(self, logged_elsewhere: dict[str, float] | None = None, **metrics: float) -> None:
        """The method's step metrics, logged beside every meter at the current step (`logged_elsewhere`: already
        in MLflow, kept in the history only)."""

    def steps(self, total: int, evaluate: Callable[[], dict[str, float]] | None = None,
              eval_every: int = 0) -> Iterator[int]:
        """The step loop, yielding 0..total-1: resumes after the last checkpoint, checkpoints, and calls `evaluate`
        every `eval_every` steps and after the last."""

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """A separately reported part of the run holding one step loop; its meters are reported apart."""

    def base_artifact(self) -> Artifact:
        """The untrained starting model."""

    def save_model(self) -> Artifact:
        """The trained model, saved in the standard format `from_pretrained` loads."""

    def save_adapter(self) -> Artifact:
        """The trained PEFT adapter (the model must be a PeftModel), loaded on top of the base."""

    @staticmethod
    def seeds_artifact(terms: list[tuple[int, float]], mode: str = "iid") -> Artifact:
        """The base model plus sum_j coef_j * noise(seed_j), stored as its (seed, coefficient) terms."""

    @staticmethod
    def ensemble_artifact(members: list[Artifact]) -> Artifact:
        """Single-model artifacts that answer by majority vote."""
