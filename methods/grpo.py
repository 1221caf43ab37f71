"""GRPO: group relative policy optimisation (Shao et al. 2024, DeepSeekMath, arXiv 2402.03300),
run by TRL's own `GRPOTrainer` (trl 1.16.0, pinned), not a reimplementation.

Algorithm (TRL's `_generate_and_score_completions` and `_compute_loss`, METHODS.md section 7):

    for t = 1..T:
        draw B prompts; sample G completions o_1..o_G of each at temperature tau
        r_i = correct_i + w format_i                  (the task's verifier: the harness's reward)
        A_i = (r_i - mean(r_group)) / (std(r_group) + 1e-4)
        one AdamW step on -min(rho_i,t A_i, clip(rho_i,t, 1 - eps, 1 + eps_high) A_i) + beta KL_k3,
        rho = pi_theta / pi_old per token, aggregated over tokens and rollouts by `loss_type`

B = prompts_per_step, G = num_generations; rollouts are as long as `training.max_new_tokens`.
Defaults are the F-GRPO paper's GRPO setting (METHODS.md sections 2 and 7.3): G = 8,
loss_type 'grpo', group-scaled rewards, no KL term (beta = 0), eps = 0.2 on both sides, learning
rate 1e-6, constant; the paper's batch size and step count were not retrieved, so B = 64 and
T = 300 are stated choices. `lora_rank` > 0 trains a peft LoRA adapter instead of every weight.

How it sits in the harness:
- Prompts are the harness's own (`run.prompts`: the model's chat template, the same text the
  evaluator samples from), given to TRL as plain strings, which TRL tokenises as the sampler does.
- The reward is the harness's (`run.reward_terms`, so every completion is one metered reward
  call and a failing verifier raises or scores 0 as `reward.on_error` says), passed to TRL as
  two reward functions, `correctness` and `format`, weighted 1 and `reward.format_weight`: TRL's
  summed reward is the harness's reward, and F-GRPO reads the correctness column on its own.
- Rollouts: drawn by the harness's sampler (the trainer below overrides TRL's generation step),
  so GRPO's sampling costs what every other method's does, and are counted and timed as the
  sampler counts every other method's.
- Meters: TRL's generation, log-prob and loss forwards go through the model's hooks, backward
  passes through the fused LM head's log-probs (core/meters.py); a reference model (beta > 0,
  full parameters) is hooked too.
- Precision: the configured dtype; in bfloat16 or float16, full-parameter training keeps fp32
  master weights and autocasts the computation, as TRL and verl train in half precision.
- MLflow: the harness has opened the run; TRL's MLflowCallback (report_to mlflow) finds it active
  and logs into it without ending it: TRL's arguments as params, and at TRL's global step
  (optimizer steps done, 1..T) its loss, reward, rewards/correctness/mean, rewards/format/mean,
  kl, entropy, completions/mean_length, completions/clipped_ratio, clip_ratio/*. The harness
  meters are logged at the harness's step index (0..T-1, as for every method): TRL's step s sits
  beside the meters' step s - 1.
- Resume: the harness's step loop runs in step with TRL's (a callback advances it at each
  optimizer step), so the harness checkpoints its meters, history and weights every
  `training.checkpoint_every` steps, right after TRL has saved its own checkpoint of the same
  step (weights, optimizer, scheduler, RNG, data position) in run.work_dir/trl, outside the
  declared outputs. A killed run restarts from the harness's last checkpoint and TRL's checkpoint
  of that step (`resume_from_checkpoint`); the artifact is written only after the last step, so a
  killed run is never taken as done.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Callable, Literal

import torch

from core.config import Positive, Range
from core.contract import Artifact, QueryCounts, Run
from core.errors import NogradError
from methods import register

if TYPE_CHECKING:
    from trl import GRPOConfig, GRPOTrainer

PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass
class GRPOMethodConfig:
    """GRPO as the F-GRPO paper runs it (METHODS.md section 7.3); batch size and steps are stated choices."""

    steps: Positive = 300
    """Optimizer steps T (TRL's max_steps); each samples a fresh batch of prompts."""
    prompts_per_step: Positive = 64
    """Prompts B per step; each is sampled num_generations times."""
    num_generations: Annotated[int, Range(ge=2)] = 8
    """Group size G: completions per prompt, whose rewards are normalised against each other (F-GRPO paper: 8)."""
    micro_batch_size: Positive = 8
    """Completions per forward/backward pass; a step accumulates gradients over B x G of them
    (memory, not the algorithm)."""
    learning_rate: Annotated[float, Range(ge=0)] = 1e-6
    """AdamW learning rate, constant over the run."""
    beta: Annotated[float, Range(ge=0)] = 0.0
    """Coefficient of the KL penalty to the starting model; 0 loads no reference model."""
    epsilon: Annotated[float, Range(ge=0)] = 0.2
    """Clipping range of the importance ratio: 1 - epsilon below (and above unless epsilon_high is set)."""
    epsilon_high: Annotated[float, Range(ge=0)] | None = None
    """Upper clipping range; null for epsilon (GRPO); DAPO uses 0.28."""
    loss_type: Literal["grpo", "dapo", "dr_grpo", "bnpo", "cispo"] = "grpo"
    """TRL's loss aggregation: 'grpo' averages tokens within each completion, then completions;
    'dapo' averages all tokens of the batch."""
    scale_rewards: Literal["group", "batch", "none"] = "group"
    """Advantages divided by the group's reward std (GRPO), the batch's, or by nothing (Dr. GRPO)."""
    temperature: Annotated[float, Range(ge=0)] = 1.0
    """Sampling temperature of the rollouts."""
    gradient_checkpointing: bool = True
    """Recompute activations in the backward pass (TRL's default): less memory for about one more forward."""
    lora_rank: Annotated[int, Range(ge=0)] = 0
    """0 trains every parameter; r > 0 trains a LoRA adapter of rank r (peft) and leaves the base frozen."""
    lora_alpha: float = 32.0
    """LoRA alpha: the adapter's update BA is scaled by alpha / r."""
    lora_target_modules: list[str] = field(default_factory=lambda: list(PROJECTIONS))
    """Linear layers given an adapter when lora_rank > 0."""

    def __post_init__(self) -> None:
        rollouts = self.prompts_per_step * self.num_generations
        if rollouts % self.micro_batch_size:
            raise ValueError(f"micro_batch_size ({self.micro_batch_size}) must divide prompts_per_step x "
                             f"num_generations ({self.prompts_per_step} x {self.num_generations} = {rollouts})")


class VerifierRewards:
    """The task's verifier as two TRL reward functions over the same completions. TRL calls them
    in order on one batch; `correctness` verifies each completion once (one metered reward call)
    and leaves its format terms for `format`."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self._format: list[float] | None = None

    def correctness(self, completions: list[str], problem_index: list[int], **_) -> list[float]:
        terms = [self.run.reward_terms(self.run.train[i], text) for i, text in zip(problem_index, completions)]
        self._format = [formatted for _, formatted in terms]
        return [correct for correct, _ in terms]

    def format(self, completions: list[str], **_) -> list[float]:
        terms, self._format = self._format, None
        if terms is None or len(terms) != len(completions):
            raise RuntimeError("TRL called the format reward without the correctness reward on the same batch")
        return terms


@functools.cache
def metered_trainer() -> type[GRPOTrainer]:
    """`MeteredGRPOTrainer`, defined at first use: importing TRL's trainer takes seconds, and of
    all the jobs that import the method registry only GRPO's and F-GRPO's training jobs need it."""
    from trl import GRPOTrainer

    from core import meters, sampler

    class MeteredGRPOTrainer(GRPOTrainer):
        """TRL's GRPOTrainer with its rollouts drawn by the harness's sampler, as every other
        method's are: `_generate_single_turn` hands the prompt ids to `core.sampler.decode` (each
        group's prompt prefilled once, a preallocated cache, finished rows retired, temperature and
        top-p as `generate` applies them) and returns the completion ids as TRL's own path does; TRL's
        path remains for what the sampler does not do (vLLM, images, top-k, min-p, repetition
        penalty), metered as the sampler meters its own. `_generate_single_turn` is private to TRL:
        the pin trl==1.16.0 (pyproject.toml) is what keeps its signature and return value as used
        here.

        A micro-batch whose loss is NaN or Inf adds no gradient: `compute_loss` hands the harness's
        `skip_nonfinite` (counted, or the run stops under `training.on_nonfinite: raise`) a zero instead."""

        def __init__(self, *args, skip_nonfinite: Callable[[str], None], **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.skip_nonfinite = skip_nonfinite

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            if torch.isfinite(loss):
                return loss
            self.skip_nonfinite("the loss of a micro-batch")
            return loss.new_zeros((), requires_grad=True)

        def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
            if (self.use_vllm or self.use_transformers_continuous_batching or images is not None or multimodal_fields
                    or self.top_k or self.min_p or self.repetition_penalty != 1.0):
                meter = meters.of(self.model)
                with meter.phase("generate"):
                    completion_ids, logprobs = super()._generate_single_turn(prompt_ids, images, multimodal_fields,
                                                                             num_generations, has_tool_images)
                meter.generated(completion_ids)
                return completion_ids, logprobs
            distinct, owners = [], []
            for ids in prompt_ids:  # a group's G copies of its prompt are adjacent
                if not distinct or distinct[-1] != ids:
                    distinct.append(ids)
                owners.append(len(distinct) - 1)
            width, pad = max(map(len, distinct)), self._tokenizer.pad_token_id
            device = self.accelerator.device
            ids = torch.tensor([[pad] * (width - len(p)) + p for p in distinct], device=device)
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in distinct], device=device)
            params = sampler.SamplingParams(temperature=self.temperature, top_p=self.top_p or 1.0,
                                            max_new_tokens=self.max_completion_length)
            with sampler.eval_mode(self.model):
                completion_ids = sampler.decode(self.model, ids, mask, owners, params, set(self.eos_token_ids), None)
            return completion_ids, None

    return MeteredGRPOTrainer


def check(config: GRPOMethodConfig, run: Run) -> None:
    """One line naming the setting, before any work, for what TRL would reject given this run's
    data (the config's own bounds and `micro_batch_size` are checked when it is validated)."""
    if config.prompts_per_step > len(run.train):
        raise NogradError(f"methods.{run.method}: prompts_per_step ({config.prompts_per_step}) must be at most the "
                          f"{len(run.train)} training problems of task {run.task.name}")


def trl_config(config: GRPOMethodConfig, run: Run) -> GRPOConfig:
    """TRL's arguments: the method's settings, the harness's rollout length, reward weights,
    checkpoint cadence, dtype (autocast to it unless it is float32) and sampler."""
    from trl import GRPOConfig

    rollouts = config.prompts_per_step * config.num_generations
    return GRPOConfig(
        output_dir=str(run.work_dir / "trl"),
        max_steps=config.steps,
        per_device_train_batch_size=config.micro_batch_size,
        gradient_accumulation_steps=rollouts // config.micro_batch_size,
        num_generations=config.num_generations,
        max_completion_length=run.config.training.max_new_tokens,
        temperature=config.temperature,
        learning_rate=config.learning_rate,
        lr_scheduler_type="constant",
        beta=config.beta,
        epsilon=config.epsilon,
        epsilon_high=config.epsilon_high,
        loss_type=config.loss_type,
        scale_rewards=config.scale_rewards,
        reward_weights=[1.0, run.config.reward.format_weight],
        gradient_checkpointing=config.gradient_checkpointing,
        bf16=run.config.dtype == "bfloat16",
        fp16=run.config.dtype == "float16",
        use_cpu=run.model.device.type == "cpu",
        seed=run.seed,
        logging_steps=1,
        report_to=["mlflow"],
        save_strategy="steps",
        save_steps=run.config.training.checkpoint_every,
        save_total_limit=2,  # the harness's last checkpoint is at most one TRL checkpoint behind
        disable_tqdm=True,  # the harness's step loop shows the progress
        # `sampler: vllm`: TRL generates with vLLM in this process, its weights synced each step.
        use_vllm=run.backend.vllm,
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=run.backend.gpu_memory,
    )


def run_trainer(trainer_class: type[GRPOTrainer], config: GRPOMethodConfig, run: Run, **trainer_kwargs) -> Artifact:
    """Train with `trainer_class` (TRL's GRPOTrainer or a subclass) inside the harness's step loop."""
    from datasets import Dataset
    from transformers import TrainerCallback

    class HarnessSteps(TrainerCallback):
        """Runs the harness's step loop in step with TRL's optimizer steps: the harness numbers, logs
        (its meters, after the optimizer step) and checkpoints step k while TRL runs its step k."""

        def __init__(self, loop, first: int) -> None:
            self.loop, self.step = loop, first

        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step != self.step:
                self.step = next(self.loop)
            if state.global_step != self.step:
                raise RuntimeError(f"TRL is at step {state.global_step}, the harness at {self.step}")

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:  # a step's log, not the summary TRL logs when training ends
                run.log(logged_elsewhere={"loss": logs["loss"], "reward": logs["reward"]})

    check(config, run)
    # Both before the step loop starts, so that a resumed run loads its weights into the same model.
    if config.lora_rank:
        from peft import LoraConfig, get_peft_model

        run.model = get_peft_model(run.model, LoraConfig(
            r=config.lora_rank, lora_alpha=config.lora_alpha, target_modules=config.lora_target_modules,
            lora_dropout=0.0, task_type="CAUSAL_LM"))
    elif run.config.dtype != "float32":
        # Mixed precision, as TRL and verl train in half precision: fp32 master weights (an AdamW
        # update of about lr = 1e-6 is below bfloat16's resolution of most weights), computation
        # autocast to the configured dtype. A LoRA adapter is kept in fp32 by peft already.
        run.model.float()
    loop = run.steps(config.steps)
    first = next(loop, None)
    if first is not None:
        rewards = VerifierRewards(run)
        dataset = Dataset.from_dict({"prompt": run.prompts(run.train), "problem_index": list(range(len(run.train)))})
        trainer = trainer_class(
            model=run.model, reward_funcs=[rewards.correctness, rewards.format], args=trl_config(config, run),
            train_dataset=dataset, processing_class=run.tokenizer, callbacks=[HarnessSteps(loop, first)],
            skip_nonfinite=run.skip_nonfinite, **trainer_kwargs,
        )
        if trainer.ref_model is not None:
            run.meters.attach(trainer.ref_model)
        resume = None
        if first > 0:
            resume = Path(trainer.args.output_dir) / f"checkpoint-{first}"
            if not (resume / "trainer_state.json").exists():
                raise NogradError(f"{run.method}: the harness checkpoint is at step {first} but TRL's {resume} is "
                                  f"missing; delete {run.work_dir} to start over")
        trainer.train(resume_from_checkpoint=str(resume) if resume else None)
        if next(loop, None) is not None:
            raise RuntimeError(f"TRL stopped at step {trainer.state.global_step} of {config.steps}")
    return run.save_adapter() if config.lora_rank else run.save_model()


def queries(config: GRPOMethodConfig, train, model: torch.nn.Module) -> QueryCounts:
    """Per step B x G rollouts, each run once more for its log-probabilities in the loss (and once
    through the reference model when beta > 0), one backward each, recomputed under gradient
    checkpointing."""
    rollouts = config.prompts_per_step * config.num_generations
    return QueryCounts(sequences_generated=rollouts, forward_passes=rollouts * (3 if config.beta else 2),
                   backward_passes=rollouts,
                   recompute_passes=rollouts if config.gradient_checkpointing else 0) * config.steps


BIBTEX = """
@misc{shao2024deepseekmath,
  author = {Shao, Zhihong and others},
  title = {{DeepSeekMath}: Pushing the Limits of Mathematical Reasoning in Open Language Models},
  year = {2024},
  eprint = {2402.03300},
  archiveprefix = {arXiv},
  note = {GRPO; run here with TRL's GRPOTrainer}
}"""

TEST_SETTINGS = {"steps": 1, "prompts_per_step": 2, "num_generations": 2, "micro_batch_size": 4,
                 "gradient_checkpointing": False}
"""GRPO's test settings: one step of 2 prompts x 2 rollouts (F-GRPO adds its gamma)."""


@register("grpo", config=GRPOMethodConfig, display="GRPO", order=20, outputs=("model", "adapter"), bibtex=BIBTEX,
          paper="Shao et al. 2024, DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models "
                "(arXiv 2402.03300); run with TRL's GRPOTrainer (trl 1.16.0)",
          test_settings=TEST_SETTINGS, queries=queries)
def train(config: GRPOMethodConfig, run: Run) -> Artifact:
    return run_trainer(metered_trainer(), config, run)
