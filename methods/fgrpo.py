"""F-GRPO: focal-weighted GRPO (Plyusov et al., "Don't Let Your Policy Learn the Obvious and
Forget the Rare", arXiv 2602.06717), as a small subclass of TRL's GRPOTrainer.

Algorithm (METHODS.md section 2): GRPO (methods/grpo.py), with every prompt's advantages scaled
by a focal weight that shrinks as the prompt gets easy:

    mu_hat(x) = X / G                  X of the G rollouts of prompt x are correct
    g(x)      = (1 - mu_hat(x))^gamma
    A_i^F     = g(x) A_i^GRPO          the same scalar for every token of every rollout of x
    the rest of the loss unchanged; gamma = 0 is GRPO exactly

"Correct" is the verifier's correctness alone (the `correctness` reward column), not the reward
with its format term: mu_hat is the paper's per-prompt success rate, which a format bonus would
inflate (a group of well-formatted wrong answers is not partly solved). The paper uses the raw
group estimate, no smoothing; its group size is 8 and its gamma 0.5 (chosen in 6 of 9 settings).

On TRL (METHODS.md section 7.3): a group's rollouts can sit on different processes, so mu_hat
comes from the gathered rewards, and only this process's slice of the weights scales its local
advantages, sliced as TRL slices the advantages themselves. Two of TRL's private methods are
overridden, each calling TRL's own first: `_calculate_rewards` (to keep the gathered reward
columns) and `_generate_and_score_completions` (to scale the advantages it returns).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Annotated

import torch

from core.config import Range
from core.contract import Artifact, Run
from methods import register
from methods.grpo import TEST_SETTINGS, GRPOMethodConfig, metered_trainer, queries, run_trainer


@dataclass
class FGRPOConfig(GRPOMethodConfig):
    """F-GRPO: GRPO's settings (the paper's group of 8) plus the focal exponent gamma."""

    gamma: Annotated[float, Range(ge=0)] = 0.5
    """Focal exponent: each prompt's advantages are scaled by (1 - mu_hat)^gamma; 0 is GRPO exactly."""


def focal_weights(correct: torch.Tensor, group_size: int, gamma: float) -> torch.Tensor:
    """(1 - mu_hat)^gamma for every rollout, mu_hat the share of correct rollouts in its group;
    `correct` (0/1) holds the whole batch, groups of `group_size` contiguous, as TRL orders them."""
    mu_hat = torch.nanmean(correct.view(-1, group_size), dim=1)
    # A group that no reward function could score (all NaN) already has zero advantages in TRL.
    return torch.nan_to_num((1 - mu_hat).pow(gamma), nan=1.0).repeat_interleave(group_size)


@functools.cache
def focal_trainer() -> type:
    """`FGRPOTrainer`, defined at first use, on GRPO's trainer (see `methods.grpo.metered_trainer`)."""

    class FGRPOTrainer(metered_trainer()):
        """TRL's GRPOTrainer with focal-weighted advantages. The overridden methods are private to
        TRL: the pin trl==1.16.0 (pyproject.toml, requirements.lock) is what guarantees that
        `_calculate_rewards` returns the rewards gathered across processes (rows in group order) and
        that `_generate_and_score_completions` returns this process's slice of the advantages under
        "advantages", the slice [process_index * n, (process_index + 1) * n) of the gathered batch.
        Check both before moving the pin."""

        def __init__(self, *args, gamma: float, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            if "correctness" not in self.reward_func_names:
                raise ValueError(f"F-GRPO needs a reward function named 'correctness'; got {self.reward_func_names}")
            self.focal_gamma = gamma
            self._correctness_column = self.reward_func_names.index("correctness")
            self._correct: torch.Tensor | None = None

        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
            rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            self._correct = rewards_per_func[:, self._correctness_column]
            return rewards_per_func

        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            mode = "train" if self.model.training else "eval"
            group_size = self.num_generations if mode == "train" else self.num_generations_eval
            weights = focal_weights(self._correct, group_size, self.focal_gamma)
            start = self.accelerator.process_index * len(inputs)
            advantages = output["advantages"]
            output["advantages"] = advantages * weights[start : start + len(inputs)].to(advantages.device)
            self._metrics[mode]["focal_weight/mean"].append(weights.mean().item())
            self._correct = None
            return output

    return FGRPOTrainer


BIBTEX = """
@misc{plyusov2026fgrpo,
  author = {Plyusov and Gorbatovski and Shaposhnikov and Sinii and Malakhov and Korotyshova and Gavrilov},
  title = {Don't Let Your Policy Learn the Obvious and Forget the Rare},
  year = {2026},
  eprint = {2602.06717},
  archiveprefix = {arXiv},
  note = {F-GRPO}
}"""


@register("fgrpo", config=FGRPOConfig, display="F-GRPO", order=30, outputs=("model", "adapter"), bibtex=BIBTEX,
          paper="Plyusov et al. 2026, Don't Let Your Policy Learn the Obvious and Forget the Rare (F-GRPO), "
                "arXiv 2602.06717; run on TRL's GRPOTrainer (trl 1.16.0)",
          test_settings={**TEST_SETTINGS, "gamma": 0.5}, queries=queries)
def train(config: FGRPOConfig, run: Run) -> Artifact:
    return run_trainer(focal_trainer(), config, run, gamma=config.gamma)
