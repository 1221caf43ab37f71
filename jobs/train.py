"""The training run every method gets: model, data, reward, metered rollouts and losses,
logging, resumable checkpoints and the artifact it leaves.

A method receives a `Run` and returns an artifact description made by one of the `Run.save_*`
methods; it never opens MLflow, measures itself or writes declared outputs.
"""

from __future__ import annotations

import math
import random
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Sequence

import mlflow
import numpy as np
import torch
from safetensors.torch import load_file, load_model, save_file, save_model
from tqdm.auto import tqdm

from core import meters, models, perturb
from core.backend import Backend
from core.config import Config, config_hash
from core.contract import Artifact, Score
from core.errors import NogradError, one_line
from core.outputs import atomic_dir, finished, read_json, work_dir, write_json
from core.perturb import NoiseMode
from core.sampler import Completion, SamplingParams, prompt_text, sample
from core.task import Problem, graded
from evals.tasks import get_task
from jobs import data, population, tracking
from methods import get_method

HOLD_OUT_STREAM = 1
"""Mixed with the run's seed to seed the held-out draw, so that it never consumes or mirrors `Run.rng`."""


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class TrainingRun:
    """What a method works with: the harness's implementation of `core.contract.Run`, the contract
    that says which of its members a method may use. Attributes a method may read: `config` (the
    whole experiment config), `model`, `tokenizer`, `task`, `train` (the training problems, less any held-out set,
    see `hold_out`), `rng` (a numpy Generator seeded by the run's seed) and `state` (a dict the
    method fills with whatever it must carry across a resume; it is saved with every checkpoint).
    `stages` holds the meters spent in each of the method's separately reported stages (see `stage`)."""

    def __init__(self, cfg: Config, method: str, task: str, seed: int, model_manifest: dict,
                 data_dir: Path, out_dir: Path, work_dir: Path) -> None:
        self.config, self.method, self.seed = cfg, method, seed
        self.task = get_task(task)
        self.sandbox = self.task.sandbox(cfg.sandbox.isolation)  # before the model: a missing sandbox stops at once
        self.train: list[Problem] = data.read_split(data_dir / "train.jsonl")
        self.model_manifest, self.data_dir = model_manifest, data_dir
        self.model, self.tokenizer = models.load(model_manifest, cfg.dtype, cfg.device)
        self.backend = Backend.of(cfg)
        self.meters = meters.Meters()
        self.meters.attach(self.model)
        self.rng = np.random.default_rng(seed)
        self.state: dict = {}
        self.history: list[dict] = []
        self.stages: dict[str, dict[str, float]] = {}
        self.out_dir, self.work_dir = out_dir, work_dir
        self._step = 0
        self._offset = 0  # steps of earlier step loops, so that step numbers keep increasing
        self._stage: str | None = None
        self._stage_start: dict[str, float] = {}
        self._resume_point: dict | None = None
        self._loaded = False
        self._vllm = None  # the vLLM engine of `population_rollout` or `_mirror` under `sampler: vllm`
        self._pool: population.Pool | None = None  # the Ray workers of `score_population` under `population: ray`

    # ------------------------------------------------------------------ data and reward

    def batch(self, size: int) -> list[Problem]:
        """`size` training problems drawn uniformly without replacement from the run's generator."""
        picks = self.rng.choice(len(self.train), size=min(size, len(self.train)), replace=False)
        return [self.train[i] for i in picks]

    def hold_out(self, size: int) -> list[Problem]:
        """Remove a fixed held-out set from `train` and return it: `size` problems, at most a third
        of the split (MeZO's 500 dev examples beside its 1,000 training ones), drawn from the seed
        alone, so every method that holds out the same size on a task and seed holds out the same
        problems, and never trains on them. Call it before drawing anything from `train`."""
        kept = min(size, len(self.train) // 3)
        if kept < 1:
            raise NogradError(f"{self.method}: cannot hold out {size} problems for evaluation: task {self.task.name} "
                              f"has {len(self.train)} training problems and a held-out set takes at most a third")
        picks = set(np.random.default_rng([self.seed, HOLD_OUT_STREAM]).choice(len(self.train), kept, replace=False))
        heldout = [p for i, p in enumerate(self.train) if i in picks]
        self.train = [p for i, p in enumerate(self.train) if i not in picks]
        return heldout

    def prompts(self, problems: Sequence[Problem]) -> list[str]:
        return [prompt_text(self.tokenizer, self.task.messages(p)) for p in problems]

    def reward(self, problem: Problem, completion: str, score: Score = "reward") -> float:
        """Correctness (0/1) plus the configured format term, or with `score="correctness"` the
        correctness term alone (the papers that select on accuracy); one counted reward call."""
        correct, formatted = self.reward_terms(problem, completion)
        return correct if score == "correctness" else correct + self.config.reward.format_weight * formatted

    def reward_terms(self, problem: Problem, completion: str) -> tuple[float, float]:
        """The two terms of `reward`: correctness (0/1) and answer format (0/1), counted as one reward call.

        A verifier that raises or returns NaN stops the run with one line naming the task, the
        problem and the completion; with `reward.on_error: zero` that completion scores 0 on both
        terms instead and is counted in the `reward_errors` meter. Either way no NaN leaves here.
        A completion the verifier refuses is not the verifier's failure: its correctness is 0 and
        it is counted in `reward_errors` when it cannot be graded within the verifier's limits
        (`Ungradable`: built to be slow), in `reward_hacks` when it handed its tests something other
        than plain data (`RewardHack`).
        """
        self.meters.count("reward_calls")
        with self.meters.phase("score"):
            try:
                correct, fault = graded(self.task, problem, completion)
                if fault:
                    self.meters.count(fault)
                terms = correct, float(self.task.has_format(completion))
                if not all(map(math.isfinite, terms)):
                    raise ValueError(f"verifier returned {terms[0]} (correct), {terms[1]} (format)")
            except Exception as error:
                if self.config.reward.on_error == "zero":
                    self.meters.count("reward_errors")
                    return 0.0, 0.0
                raise NogradError(
                    f"task {self.task.name}: reward failed on problem {problem.id} "
                    f"({one_line(error)}); completion: {completion[:200]!r}"
                ) from error
        return terms

    def rollout(self, problems: Sequence[Problem], n: int = 1, temperature: float = 0.0, top_p: float = 1.0,
                score: Score = "reward") -> tuple[list[list[Completion]], np.ndarray]:
        """`n` completions per problem through the metered sampler, and their rewards [problems, n]
        (`score`: the reward, or correctness alone; see `reward`). Inside a perturbation whose
        weights would not be finite, no completions and NaN rewards (`training.on_nonfinite`)."""
        return self._rollout(problems, n, temperature, top_p, score, self._sampling_seed())

    def _sampling_seed(self) -> int:
        """The sampler's seed of one rollout, drawn from `rng` even for greedy decoding, which ignores
        it: the run's draws then do not depend on how a method decodes."""
        return int(self.rng.integers(2**31))

    def _rollout(self, problems: Sequence[Problem], n: int, temperature: float, top_p: float, score: Score,
                 seed: int) -> tuple[list[list[Completion]], np.ndarray]:
        """`rollout` with its sampling seed given (a population worker's is drawn by the driver)."""
        params = SamplingParams(
            n=n, temperature=temperature, top_p=top_p, max_new_tokens=self.config.training.max_new_tokens,
            seed=seed, batch_size=self.config.evaluation.batch_size,
        )
        if not self._member_finite():
            return [[] for _ in problems], np.full((len(problems), n), np.nan)
        if self.backend.vllm and not hasattr(self.model, "peft_config"):
            completions = self._mirror().sample(self.prompts(problems), params, self.meters)
        else:
            completions = sample(self.model, self.tokenizer, self.prompts(problems), params)
        rewards = np.array([[self.reward(p, c.text, score) for c in row] for p, row in zip(problems, completions)])
        return completions, rewards

    def score_population(self, members: Sequence[Sequence[tuple[int, float]]], problems: Sequence[Problem],
                         score: Score = "reward", noise: NoiseMode = "iid") -> np.ndarray:
        """Greedy rollouts of `problems` by each member theta + sum_j c_j noise(s_j), a member given as its
        (seed, coefficient) terms in noise mode `noise`, scored as `rollout` scores them: rewards [members,
        problems]. In the training process one member after another (perturbed, rolled out, restored),
        or under `training.population: ray` spread over the run's Ray workers (jobs/population.py):
        the same rewards, meters and draws from `rng` either way, a sampling seed per member, in order."""
        members = [list(terms) for terms in members]
        seeds = [self._sampling_seed() for _ in members]
        if not self.backend.ray:
            return self._score_members(members, problems, score, noise, seeds)
        if self._pool is None:
            self._pool = population.Pool(self)
        return self._pool.score(members, seeds, problems, score, noise, self._step)

    def _score_members(self, members: list[list[tuple[int, float]]], problems: Sequence[Problem], score: Score,
                       noise: NoiseMode, seeds: list[int]) -> np.ndarray:
        """`score_population` here, each member rolled out with its sampling seed: what a worker runs too."""
        rewards = []
        with perturb.moves(perturb.trainable(self.model)) as weights:
            for terms, seed in zip(members, seeds):
                weights.move(terms, noise)  # leaving the last member as it enters this one
                rewards.append(self._rollout(problems, 1, 0.0, 1.0, score, seed)[1][:, 0])
        return np.array(rewards).reshape(len(members), len(problems))

    @property
    def population_workers(self) -> int:
        """Members `score_population` scores side by side: 1 here, one per Ray worker under `population: ray`."""
        return self.backend.population_workers

    def population_rollout(self, problems: Sequence[Problem], adapters: Sequence[str]) -> np.ndarray:
        """Greedy rollouts of every problem under each LoRA adapter in `adapters`, all in one
        batch (peft's mixed-adapter batches: the base model's matmuls are shared, each row adds
        its own adapter's low-rank term; or, with `sampler: vllm`, one LoRA request per row);
        rewards [adapters, problems]. Each member's completions are those `rollout` gives with
        that adapter active, up to floating-point rounding."""
        params = SamplingParams(max_new_tokens=self.config.training.max_new_tokens,
                                batch_size=self.config.evaluation.batch_size)
        prompts = self.prompts(problems) * len(adapters)
        names = [name for name in adapters for _ in problems]
        if self.backend.vllm:
            with self._served_adapters(adapters) as requests:
                completions = self._vllm.sample(prompts, params, self.meters, [requests[name] for name in names])
        else:
            completions = sample(self.model, self.tokenizer, prompts, params, adapters=names)
        rewards = [self.reward(p, row[0].text) for p, row in zip(list(problems) * len(adapters), completions)]
        return np.array(rewards).reshape(len(adapters), len(problems))

    def _mirror(self):
        """The vLLM engine a full-weight method's rollouts go through under `sampler: vllm`, started
        at the first: it serves the model's weights as they are outside any perturbation, written
        once to the work directory, and from then on follows every move from its seeds
        (`perturb.Weights.attach`), so the torch model and the engine hold the same weights."""
        from core.vllm_sampler import save_centre

        if self._vllm is None:
            weights = perturb.trainable(self.model)
            names = [name for name, _ in self.model.named_parameters()]
            centre = save_centre(weights, names, self.work_dir / "engine" / "centre.safetensors")
            self.meters.disk_sample()
            self._vllm = self.backend.engine(self.model_manifest["path"], weights=centre)
            centre.unlink()
            weights.attach(self._vllm)
        return self._vllm

    @contextmanager
    def _served_adapters(self, names: Sequence[str]) -> Iterator[dict]:
        """The named adapters, as vLLM LoRA requests on an engine serving the base model (started
        at the first call), written to the work directory for one `generate` and removed after
        it: vLLM reads an adapter's files when a request first uses its id, and every adapter
        gets a fresh id, so no later call reads them (and no step's adapters pile up)."""
        if self._vllm is None:
            self._vllm = self.backend.engine(self.model_manifest["path"], lora_rank=self.model.peft_config[names[0]].r,
                                             max_loras=len(names))
        where = self.work_dir / "population"
        self.model.save_pretrained(where, selected_adapters=list(names))
        self.meters.disk_sample()
        yield {name: self._vllm.adapter(where / name) for name in names}
        shutil.rmtree(where)

    def loss(self, problems: Sequence[Problem], grad: bool = False) -> torch.Tensor:
        """Per-problem mean cross-entropy of the reference solution given the prompt: the SFT loss.
        A loss that is not finite, or every loss inside a perturbation that would not be finite, is
        NaN, counted in `nonfinite` (or stops the run, `training.on_nonfinite: raise`)."""
        missing = [p.id for p in problems if not p.solution]
        if missing:
            raise NogradError(f"task {self.task.name}: no reference solution for {missing[0]} "
                              "(loss objectives need one)")
        if not self._member_finite():
            return torch.full((len(problems),), math.nan, device=self.model.device)
        prompts = self.prompts(problems)
        eos = self.tokenizer.eos_token or ""
        rows, masks = [], []
        for prompt, problem in zip(prompts, problems):
            prompt_ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
            answer_ids = self.tokenizer(problem.solution + eos, add_special_tokens=False)["input_ids"]
            rows.append(prompt_ids + answer_ids)
            masks.append([0] * len(prompt_ids) + [1] * len(answer_ids))
        width = max(map(len, rows))
        pad = self.tokenizer.pad_token_id
        # Right padding keeps every row's positions as they would be unpadded.
        ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows], device=self.model.device)
        attention = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], device=self.model.device)
        target_mask = torch.tensor([m + [0] * (width - len(m)) for m in masks], device=self.model.device)
        # Logits only from the position before the earliest answer token on: the prompt's would be
        # masked out, and over a 49k vocabulary they cost more than the answer's.
        start = max(min(m.index(1) for m in masks) - 1, 0)
        with self.meters.phase("forward"), torch.set_grad_enabled(grad):
            logits = self.model(input_ids=ids, attention_mask=attention, logits_to_keep=width - start).logits
            logits = logits[:, :-1].float()
            # Over the vocabulary as the last, contiguous dimension: 5x faster on the CPU than with the
            # classes as dimension 1 (a strided log-softmax), equal to within a few fp32 roundings.
            nll = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, start + 1:].flatten(),
                                                    reduction="none").view(len(rows), -1)
            weights = target_mask[:, start + 1:].to(nll.dtype)
            losses = (nll * weights).sum(1) / weights.sum(1)
        for problem, value in zip(problems, losses.tolist()):
            if not math.isfinite(value):
                self.skip_nonfinite(f"the loss on problem {problem.id}")
        return losses

    def _member_finite(self) -> bool:
        """False, after counting it (or stopping), inside a perturbation that would have made a weight non-finite."""
        if perturb.moved_finite(self.model):
            return True
        self.skip_nonfinite("a perturbed member's weights")
        return False

    def skip_nonfinite(self, what: str) -> None:
        """`what` is NaN or Inf: count it for the caller to leave out (`training.on_nonfinite: skip`), or stop."""
        if self.config.training.on_nonfinite == "raise":
            raise NogradError(f"{self.method}: {what} at step {self._step} is not finite (NaN or Inf); "
                              "training.on_nonfinite: skip would leave it out and count it")
        self.meters.count("nonfinite")

    def heldout_loss(self, problems: Sequence[Problem], batch_size: int) -> float:
        """Mean `loss` over held-out `problems`, `batch_size` at a time. An evaluation of the run's
        progress, not a training query: its forward passes and tokens are counted apart
        (heldout_forward_passes, heldout_tokens_processed, time_heldout_s), never in the training
        meters or forward_equivalents, so that methods compared at equal queries stay equal."""
        with self.meters.heldout():
            losses = [self.loss(problems[i : i + batch_size]) for i in range(0, len(problems), batch_size)]
        return torch.cat(losses).mean().item()

    # ------------------------------------------------------------------ logging and steps

    def log(self, logged_elsewhere: dict[str, float] | None = None, **metrics: float) -> None:
        """Step metrics (the method's own), logged beside every meter at the current step.
        `logged_elsewhere` holds metrics a library already logs to the same MLflow run (TRL's
        loss and reward): they join the history (and the report's curves) but are not logged twice.
        Under `training.population: ray` the row also holds the step's traffic with the workers."""
        record = {**{k: float(v) for k, v in metrics.items()}, **self.meters.snapshot()}
        if self.backend.ray:  # the bytes the step's population and moves took
            record.update(self._pool.traffic() if self._pool else population.NO_TRAFFIC)
        self.history.append({"step": self._step, **record,
                             **{k: float(v) for k, v in (logged_elsewhere or {}).items()}})
        mlflow.log_metrics({k: v for k, v in record.items() if math.isfinite(v)}, step=self._step)

    def steps(self, total: int, evaluate: Callable[[], dict[str, float]] | None = None,
              eval_every: int = 0) -> Iterator[int]:
        """The step loop: resumes after the last checkpoint, checkpoints every `checkpoint_every` steps.

        Yields 0..total-1; the step logged (and shown) continues after any earlier loop's steps.
        A stage that a resumed run had already finished yields nothing.

        `evaluate` (e.g. a `heldout_loss`) is called before step t whenever t is a multiple of
        `eval_every`, and after the last step: at 0, eval_every, ..., and total. Its metrics are
        logged in a history row of their own at step t, the number of updates made before it, so
        the row's meters are exactly what training had spent to reach the weights evaluated.
        """
        if evaluate is not None and eval_every < 1:
            raise NogradError(f"{self.method}: eval_every must be at least 1, not {eval_every}")
        self._resume()
        if self._stage in self.stages:
            return
        start = 0
        if self._resume_point is not None and self._resume_point["stage"] == self._stage:
            start, self._resume_point = self._resume_point["step"], None
        every = self.config.training.checkpoint_every
        desc = f"train {self.method}" + (f" {self._stage}" if self._stage else "")
        bar = tqdm(range(start, total), initial=start, total=total, desc=desc, unit="step", mininterval=2.0)
        for step in bar:
            self._step = self._offset + step
            if evaluate is not None and step % eval_every == 0:
                self.log(**evaluate())
            yield step
            last = self.history[-1] if self.history and self.history[-1]["step"] == self._step else {}
            bar.set_postfix({k: f"{v:.4g}" for k, v in last.items() if k in ("reward", "loss")})
            if (step + 1) % every == 0 and step + 1 < total:
                self._checkpoint(step + 1)
        if evaluate is not None:
            self._step = self._offset + total
            self.log(**evaluate())
        self._offset += total

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """A separately reported part of the run (e.g. a warm start before a search), holding one
        step loop: the meters spent inside it are recorded in `stages[name]` (written to
        metrics.json, logged to MLflow as `stage.<name>.*`). Counters, times and wall-clock are
        the stage's own; the peaks (`meters.PEAKS`) are the job's at the stage's end. After a
        resume, a stage that had already finished runs no steps and keeps its record."""
        self._resume()
        if name not in self.stages:
            resumed = self._resume_point is not None and self._resume_point["stage"] == name
            self._stage_start = self._resume_point["stage_start"] if resumed else self.meters.snapshot()
        self._stage = name
        yield
        if name not in self.stages:
            end = self.meters.snapshot()
            self.stages[name] = {k: v if k in meters.PEAKS else v - self._stage_start[k] for k, v in end.items()}
        self._stage = None

    def _checkpoint(self, next_step: int) -> None:
        with atomic_dir(self.work_dir / "checkpoint") as tmp:
            save_model(self.model, tmp / "model.safetensors")
            if (weights := perturb.master_of(self.model)) is not None:
                save_file(weights.masters, tmp / "master.safetensors")
            torch.save(
                {
                    "step": next_step,
                    "stage": self._stage,
                    "stage_start": self._stage_start,
                    "stages": self.stages,
                    "offset": self._offset,
                    "rng": self.rng.bit_generator.state,
                    "torch_rng": torch.get_rng_state(),
                    "state": self.state,
                    "history": self.history,
                    "counts": self.meters.counts,
                    "seconds": dict(self.meters.seconds),
                    "elapsed": self.meters.snapshot()["wall_clock_s"],
                    "peak_disk_mb": self.meters.peak_disk_mb,
                },
                tmp / "state.pt",
            )
        self.meters.disk_sample()

    def _resume(self) -> None:
        """Load the last checkpoint, once per run, where the first stage or step loop begins."""
        if self._loaded:
            return
        self._loaded = True
        checkpoint = self.work_dir / "checkpoint"
        if not (checkpoint / "state.pt").exists():
            return
        saved = torch.load(checkpoint / "state.pt", weights_only=False)
        load_model(self.model, checkpoint / "model.safetensors")
        if (checkpoint / "master.safetensors").exists():
            perturb.trainable(self.model).load_masters(load_file(checkpoint / "master.safetensors"))
        self.rng.bit_generator.state = saved["rng"]
        torch.set_rng_state(saved["torch_rng"])
        self.state, self.history = saved["state"], saved["history"]
        self.meters.counts.update(saved["counts"])
        self.meters.seconds.update(saved["seconds"])
        self.meters.started -= saved["elapsed"]
        # (a checkpoint of an older version has no disk peak)
        self.meters.peak_disk_mb = max(self.meters.peak_disk_mb, saved.get("peak_disk_mb", 0.0))
        self.stages, self._offset = saved["stages"], saved["offset"]
        self._resume_point = {"stage": saved["stage"], "step": saved["step"], "stage_start": saved["stage_start"]}

    # ------------------------------------------------------------------ artifacts

    def base_artifact(self) -> Artifact:
        """The untrained starting model."""
        return {"kind": "model", "path": self.model_manifest["path"], "trained": False}

    def save_model(self) -> Artifact:
        """The trained model in the standard format `from_pretrained` loads."""
        path = self.out_dir / "model"
        with atomic_dir(path) as tmp:
            self.model.save_pretrained(tmp)
            self.tokenizer.save_pretrained(tmp)
        return {"kind": "model", "path": str(path.resolve()), "trained": True}

    def save_adapter(self) -> Artifact:
        """The trained PEFT adapter (the run's model must be a PeftModel), loaded on top of the base."""
        path = self.out_dir / "adapter"
        with atomic_dir(path) as tmp:
            self.model.save_pretrained(tmp)
        return {"kind": "adapter", "path": str(path.resolve()), "trained": True}

    @staticmethod
    def seeds_artifact(terms: list[tuple[int, float]], mode: str = "iid") -> Artifact:
        """The base model plus sum_j coef_j * noise(seed_j): a model stored as its seeds."""
        return {"kind": "seeds", "terms": [[int(s), float(c)] for s, c in terms], "mode": mode, "trained": True}

    @staticmethod
    def ensemble_artifact(members: list[Artifact]) -> Artifact:
        """Members (single-model artifacts) that answer by majority vote: K inference passes per answer."""
        return {"kind": "ensemble", "members": members, "trained": True}


def with_noise_device(artifact: Artifact, device: str) -> Artifact:
    """The artifact with every model stored as seeds (itself or an ensemble's members) recording
    where its noise was drawn (`perturb.noise_device`), so that it is rebuilt from the same numbers."""
    if artifact["kind"] == "seeds":
        return {**artifact, "noise_device": device}
    if artifact["kind"] == "ensemble":
        return {**artifact, "members": [with_noise_device(member, device) for member in artifact["members"]]}
    return artifact


def train(cfg: Config, method: str, task: str, seed: int, model_manifest: Path, data_dir: Path,
          tracking_file: Path, out: Path) -> Artifact:
    """Run one (method, task, seed): train, then write `metrics.json` and, last, `artifact.json`;
    then the work directory (checkpoints, the MLflow run id to resume) goes."""
    spec = get_method(method)
    out_dir = out.parent
    work = work_dir("train", method, task, seed, config_hash(cfg))
    seed_everything(seed)
    run = TrainingRun(cfg, method, task, seed, read_json(model_manifest), data_dir, out_dir, work)
    manifest = read_json(data_dir / "manifest.json")
    run_id_file = work / "mlflow_run_id"
    resume_id = run_id_file.read_text().strip() if run_id_file.exists() else None
    tags = {
        "nograd.kind": "train", "nograd.method": method, "nograd.task": task, "nograd.seed": str(seed),
        "nograd.model": f"{run.model_manifest['name']} ({run.model_manifest['source']})",
        "nograd.data_train": data.describe(manifest["train"]), "nograd.data_train_hash": manifest["train"]["hash"],
    }
    name = f"train {method} {task} seed{seed}"
    with tracking.mlflow_run(read_json(tracking_file), cfg, name, tags, resume_id) as active:
        run_id_file.write_text(active.info.run_id)
        try:
            artifact = with_noise_device(spec.train(cfg.methods[method], run), perturb.noise_device(run.model.device))
        finally:
            if run._pool is not None:
                run._pool.close()
        run.meters.disk_sample()
        final = run.meters.snapshot()
        if (weights := perturb.master_of(run.model)) is not None:
            # The fp32 copies a low-precision model's moves go to (4 bytes a parameter): within the
            # peak, and reported apart, since a bf16 GRPO carries none (reports/measures.py).
            final["master_mb"] = sum(m.numel() * m.element_size() for m in weights.masters.values()) / 2**20
        if run.backend.ray:
            final.update(population.totals(run.history, cfg.training.population_workers))
        mlflow.log_metrics({f"final.{k}": v for k, v in final.items()})
        mlflow.log_metrics({f"stage.{name}.{k}": v for name, record in run.stages.items() for k, v in record.items()})
        result = {"method": method, "task": task, "seed": seed, "run_id": active.info.run_id,
                  "config_hash": config_hash(cfg), "meters": final, "stages": run.stages, "history": run.history,
                  "trained": artifact.get("trained", True), "sandbox": run.sandbox}
        write_json(out_dir / "metrics.json", result)
        mlflow.log_artifact(str(out_dir / "metrics.json"))
        write_json(out, {**artifact, "run_id": active.info.run_id, "base": run.model_manifest["path"]})
    finished(work)
    return artifact
