"""SFT: ESSA's LoRA warm start alone, a control for ESSA (Korotyshova et al., arXiv 2507.04453).

Not a paper's method. ESSA (methods/essa.py) fine-tunes a LoRA adapter before its CMA-ES search;
this method runs that same stage, the same functions with the same settings and seed, and stops
there. On the same problems, ESSA minus SFT is what the search adds to its warm start, which the
ESSA paper does not separate (reviewers name its SFT dependence as a limitation, METHODS.md 1).

Algorithm (ESSA's stage "sft"):

    add a LoRA adapter (A: r x k, B: d x r, scale alpha / r) to every target layer
    for t = 1..sft_steps: AdamW step on the cross-entropy of SFT targets (a batch of them)

The output is the adapter. Choices, ESSA's where METHODS.md marks the paper's detail [uncertain]:
- SFT targets: the task's reference solutions where the training split has them; otherwise the
  model's own samples on the training problems (`self_samples` each, at `self_temperature`) that
  the task's verifier accepts (rejection sampling), scored through the harness's reward, so each
  verification is a metered reward call. Never test items. If none is accepted the run stops
  with an error saying so: a search from an adapter that was never warm-started is not ESSA, and
  must be asked for explicitly (`sft_steps: 0`).
- LoRA rank 16 on all seven projections (METHODS.md's dimension example), alpha = 2r, no dropout;
  SFT recipe (AdamW, lr 2e-4, batch 16, 500 steps) is a common LoRA recipe, not the paper's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Annotated, Sequence

import torch

from core import spaces
from core.config import Positive, Range
from core.contract import Artifact, QueryCounts, Run
from core.errors import NogradError
from core.task import Problem
from methods import register

PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass
class SFTConfig:
    """ESSA's warm-start settings; the paper's values were not retrieved, so each default is a
    stated choice (module docstring)."""

    lora_rank: Positive = 16
    """LoRA rank r of the warm-started adapter."""
    lora_alpha: float = 32.0
    """LoRA alpha: the adapter's update BA is scaled by alpha / r."""
    target_modules: Annotated[list[str], Range(min_items=1)] = field(default_factory=lambda: list(PROJECTIONS))
    """Linear layers given an adapter (names as in the model's modules)."""
    sft_steps: Annotated[int, Range(ge=0)] = 500
    """AdamW steps of the SFT warm start; 0 leaves the adapter untrained (B = 0), from which ESSA then searches."""
    sft_batch_size: Positive = 16
    """SFT targets per warm-start step."""
    sft_lr: Annotated[float, Range(ge=0)] = 2e-4
    """AdamW learning rate of the warm start."""
    sft_weight_decay: Annotated[float, Range(ge=0)] = 0.0
    """AdamW weight decay of the warm start."""
    self_samples: Positive = 4
    """Without reference solutions: samples per training problem; the verified-correct ones are the SFT targets."""
    self_temperature: Annotated[float, Range(ge=0)] = 0.7
    """Sampling temperature of those samples."""


def add_adapter(config: SFTConfig, run: Run) -> None:
    """A fresh LoRA adapter on the target layers (B = 0, so the model is unchanged until trained)."""
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha, target_modules=config.target_modules,
                      lora_dropout=0.0)
    run.model = get_peft_model(run.model, lora)


def sft_targets(config: SFTConfig, run: Run) -> list[Problem]:
    """Reference solutions of the training problems, or else the model's own verified samples."""
    with_solution = [p for p in run.train if p.solution]
    if with_solution:
        return with_solution
    if "sft_targets" not in run.state:
        completions, correct = run.rollout(run.train, n=config.self_samples, temperature=config.self_temperature,
                                           score="correctness")
        run.state["sft_targets"] = [dataclasses.replace(p, solution=c.text)
                                    for p, row, verdicts in zip(run.train, completions, correct)
                                    for c, verdict in zip(row, verdicts) if verdict]
    if not run.state["sft_targets"]:
        raise NogradError(
            f"{run.method} on {run.task.name}: the training split has no reference solutions and none of the "
            f"model's {config.self_samples} samples on each of {len(run.train)} training problems was correct, so "
            "there is nothing to warm-start on (sft_steps: 0 skips the warm start)"
        )
    return run.state["sft_targets"]


def warm_start(config: SFTConfig, run: Run) -> None:
    """Supervised fine-tuning of the LoRA adapter with AdamW (optimizer state kept for a resume)."""
    if config.sft_steps == 0:
        return
    targets = sft_targets(config, run)
    optimizer = torch.optim.AdamW(spaces.lora(run.model), lr=config.sft_lr, weight_decay=config.sft_weight_decay)
    if "sft_optimizer" in run.state:
        optimizer.load_state_dict(run.state["sft_optimizer"])
    for _ in run.steps(config.sft_steps):
        picks = run.rng.choice(len(targets), size=min(config.sft_batch_size, len(targets)), replace=False)
        loss = run.loss([targets[i] for i in picks], grad=True).mean()
        optimizer.zero_grad()
        if torch.isfinite(loss):  # a batch with a loss the harness found non-finite makes no step
            loss.backward()
            optimizer.step()
        run.state["sft_optimizer"] = optimizer.state_dict()
        run.log(loss=loss.item())


def queries(config: SFTConfig, train: Sequence[Problem], model: torch.nn.Module) -> QueryCounts:
    """Per step a loss forward and backward of a batch of targets. A split without reference
    solutions is sampled first, self_samples per problem, and how many samples are verified (the
    targets) is not known before: then the count is a bound."""
    if config.sft_steps == 0:
        return QueryCounts()
    targets = sum(1 for p in train if p.solution)
    sampled = QueryCounts()
    if not targets:
        sampled = dataclasses.replace(QueryCounts.rollouts(len(train) * config.self_samples), bound=True)
        targets = len(train) * config.self_samples
    batch = min(config.sft_batch_size, targets)
    return sampled + QueryCounts(forward_passes=batch, backward_passes=batch) * config.sft_steps


ESSA_BIBTEX = """
@misc{korotyshova2025essa,
  author = {Korotyshova and Shaposhnikov and Malakhov and Khokhulin and Surnachev and Ovcharenko and Bredis and Gorbatovski and Sinii and Gavrilov},
  title = {{ESSA}: Evolutionary Strategies for Scalable Alignment},
  year = {2025},
  eprint = {2507.04453},
  archiveprefix = {arXiv}
}"""  # noqa: E501
"""ESSA's paper, which this warm start comes from: cited for ESSA and for this control."""

TEST_SETTINGS = {"lora_rank": 2, "lora_alpha": 4.0, "target_modules": ["q_proj", "v_proj"], "sft_steps": 2,
                 "sft_batch_size": 2}
"""The warm start's test settings (ESSA adds its search's)."""


@register("sft", config=SFTConfig, display="SFT (ESSA's warm start)", order=40, outputs="adapter", bibtex=ESSA_BIBTEX,
          paper="Control, not a paper's method: the LoRA SFT warm start of ESSA alone, without its CMA-ES search "
                "(Korotyshova et al. 2025, arXiv 2507.04453)",
          test_settings=TEST_SETTINGS, queries=queries)
def train(config: SFTConfig, run: Run) -> Artifact:
    add_adapter(config, run)
    with run.stage("sft"):
        warm_start(config, run)
    return run.save_adapter()
