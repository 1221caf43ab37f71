"""ESSAM and ESSAM-F: evolution strategies with a sharpness-aware step (Sun, Dang, Dai, Ye 2026,
arXiv 2602.01003; code `szs777/ESSAM`, `es-sam-SGD_fine-tuning_gsm8k_accl.py` and its `-fen` variant).

Algorithm (one step, i.e. one "generation" on one batch of training problems B):

    ESSAM
        eps_1..eps_N ~ N(0, I), regenerated from seeds
        R_i = mean reward of greedy rollouts on B at theta + sigma eps_i;  z = zscore(R)
        theta_adv = theta - (rho / N) sum_i z_i eps_i          (SAM ascent: toward the worse neighbour)
        eps'_1..eps'_N fresh;  R'_j at theta_adv + sigma eps'_j;  z' = zscore(R')
        theta <- theta_adv + (rho / N) sum_i z_i eps_i         (undo the ascent exactly)
        theta <- theta + (alpha / N) sum_j z'_j eps'_j         (the adversarial estimate, applied at theta)
    ESSAM-F (the accelerated variant): the SAM population is K < N and its step is normalised
        c_i = (R_i - mean R) / K;  g_hat = sum_i c_i eps_i
        theta_adv = theta - rho g_hat / ||g_hat||_F            (||g_hat||_F by regenerating the noise)
        the main population, at theta_adv, stays N with z-scored rewards

sigma is absorbed into alpha (no 1/sigma), as in Qiu et al.'s ES. Rollouts per step: 2 N |B| for
ESSAM, (K + N) |B| for ESSAM-F; logged as `rollouts`, with the mean reward of the population at
theta (`reward`) and of the one at theta_adv (`adversarial_reward`).

Choices, stated because the benchmark runs every method under the same conditions:
- Reward: the harness's `run.reward`, correctness plus `reward.format_weight` (0.1, ESSAM's weight)
  times the task's format term, on the task's own prompt, not ESSAM's `<think>` prompt and
  think-tag format reward.
- Batch: each step draws `batch_size` problems with `run.batch` (without replacement within the
  step). The paper walks reshuffled chunks of 200 through the training set for 40 epochs; the
  default `steps` (1520 = 40 epochs x 38 chunks of the 7,473 GSM8K problems) keeps its number of
  generations, but across steps problems are drawn independently rather than epoch by epoch.
- Noise: `noise: shared` (the default) re-seeds every tensor with the same seed, as the ESSAM code
  does; `noise: iid`, independent per tensor, is an ablation. `antithetic: true` evaluates pairs
  +-eps (not in the paper).
- The code's extra greedy evaluations of the batch around the update (ESSAM after it, ESSAM-F
  before it) only feed its logs and are not run; the harness evaluates the trained model.
- Restoring: a member is scored inside `perturbed` (below fp32 the weights come back bit for
  bit from the harness's fp32 master); the ascent is a move of the centre (`combine_`, on the
  master) undone by `combine_` with the negated terms, whose per-tensor fp32 sum is exactly the
  negation of the ascent's. In fp32 theta returns within the rounding of two additions: per
  element at most u (2|theta| + |t|) for a move t, u the unit roundoff of fp32 (tested).
- ESSAM-F's rho is a radius in the whole parameter space, ESSAM's a scale on an unnormalised sum
  (norm about rho sqrt(d / N)); the code uses rho = 1e-4 for both, so ESSAM-F's ascent is far
  shorter. Kept as published.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Callable, Literal, Sequence

import numpy as np
import torch

from core import fitness
from core.config import Positive, Range
from core.contract import Artifact, QueryCounts, Run
from core.perturb import NoiseMode, combination_norm, combine_, moves, population, trainable
from methods import register

Members = list[tuple[int, float]]
"""A population as (seed, sign): member i is theta + sign_i sigma noise(seed_i)."""
Scorer = Callable[[list[list[tuple[int, float]]]], np.ndarray]
"""The reward R_i of each member theta + sum_j c_j eps_j, given as its (seed, coefficient) terms."""


@dataclass
class ESSAMConfig:
    """ESSAM's defaults (`essam_run.sh`: Qwen2.5-0.5B-Instruct on GSM8K)."""

    steps: Positive = 1520
    """Generations: 40 epochs x 38 chunks of the 7,473 GSM8K training problems."""
    batch_size: Positive = 200
    """Training problems per step, shared by every member of both populations (the paper's chunk size)."""
    population_size: Positive = 40
    """Population N, at theta and again at theta_adv."""
    sigma: Annotated[float, Range(ge=0)] = 1.5e-3
    """Perturbation scale sigma."""
    alpha: Annotated[float, Range(ge=0)] = 2.5e-4
    """Learning rate alpha of theta <- theta + (alpha / N) sum_j z'_j eps'_j (sigma absorbed)."""
    rho: Annotated[float, Range(ge=0)] = 1e-4
    """SAM ascent scale: theta_adv = theta - (rho / N) sum_i z_i eps_i, not normalised."""
    noise: Literal["iid", "shared"] = "shared"
    """Noise across tensors: one seed re-used for every tensor (the ESSAM code), or independent per tensor."""
    antithetic: bool = False
    """Evaluate antithetic pairs theta +- sigma eps (not in the paper); populations must then be even."""

    def __post_init__(self) -> None:
        even_when_antithetic(self, "population_size")


@dataclass
class ESSAMFConfig(ESSAMConfig):
    """ESSAM-F's defaults (`essam-fen_run.sh`): ESSAM's, plus the smaller SAM population."""

    population_size: Positive = 40
    """Main population N, at theta_adv (the SAM population at theta is K)."""
    rho: Annotated[float, Range(ge=0)] = 1e-4
    """SAM radius: theta_adv = theta - rho g_hat / ||g_hat||_F, so ||theta_adv - theta||_F = rho."""
    sam_population_size: Positive = 10
    """SAM population K, scored with raw centred rewards (the main population stays N)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        even_when_antithetic(self, "sam_population_size")


def even_when_antithetic(config: ESSAMConfig, key: str) -> None:
    """Antithetic members come in pairs (theta +- sigma eps), so the population `key` must be even."""
    if config.antithetic and getattr(config, key) % 2:
        raise ValueError(f"{key} ({getattr(config, key)}) must be even with antithetic: true (members come in "
                         "pairs theta +- sigma eps)")


def in_place(params: Sequence[torch.Tensor], reward: Callable[[], float], noise: NoiseMode) -> Scorer:
    """Scores members one after another: perturb `params` in place, call reward(), restore."""

    def score(members: list[list[tuple[int, float]]]) -> np.ndarray:
        rewards = []
        with moves(params) as weights:
            for member in members:
                weights.move(member, noise)  # leaving the last member as it enters this one
                rewards.append(float(reward()))
        return np.asarray(rewards)

    return score


def population_rewards(members: Members, sigma: float, score: Scorer) -> np.ndarray:
    """R_i at theta + sign_i sigma eps_i, for each member."""
    return score([[(seed, sign * sigma)] for seed, sign in members])


def terms(members: Members, weights: np.ndarray, scale: float) -> list[tuple[int, float]]:
    """scale * sum_i w_i sign_i eps_i as (seed, coefficient) terms for `combine_`."""
    return [(seed, scale * sign * float(w)) for (seed, sign), w in zip(members, weights)]


def sam_ascent(params: Sequence[torch.Tensor], members: Members, rewards: np.ndarray,
               config: ESSAMConfig) -> tuple[list[tuple[int, float]], dict[str, float]]:
    """theta_adv - theta as seed terms, with what the step logs about it."""
    if isinstance(config, ESSAMFConfig):
        g_hat = terms(members, fitness.centered(rewards), 1 / len(members))
        g_norm = combination_norm(params, g_hat, config.noise)
        # The code's 1e-12 guard: equal rewards give g_hat = 0 and no ascent.
        return [(seed, -config.rho * c / (g_norm + 1e-12)) for seed, c in g_hat], {"sam_grad_norm": g_norm}
    return terms(members, fitness.zscore(rewards), -config.rho / len(members)), {}


def essam_step(params: Sequence[torch.Tensor], reward: Callable[[], float] | None, rng: np.random.Generator,
               config: ESSAMConfig, score: Scorer | None = None) -> dict[str, float]:
    """One ESSAM (or, with an ESSAMFConfig, ESSAM-F) step on `params` in place.

    `reward()` scores the parameters as they are when it is called; or `score(members)` scores a
    whole population around them at once (in training: `run.score_population`, the mean reward of
    greedy rollouts on the step's batch, perhaps on workers). Returns the step's metrics;
    `evaluations` is the number of perturbed models scored.
    """
    score = score or in_place(params, reward, config.noise)
    sam_size = config.sam_population_size if isinstance(config, ESSAMFConfig) else config.population_size
    members = population(rng, sam_size, config.antithetic)
    rewards = population_rewards(members, config.sigma, score)
    ascent, metrics = sam_ascent(params, members, rewards, config)
    combine_(params, ascent, config.noise)
    adversarial = population(rng, config.population_size, config.antithetic)
    adversarial_rewards = population_rewards(adversarial, config.sigma, score)
    combine_(params, [(seed, -c) for seed, c in ascent], config.noise)
    step = terms(adversarial, fitness.zscore(adversarial_rewards), config.alpha / len(adversarial))
    combine_(params, step, config.noise)
    return {"reward": rewards.mean(), "adversarial_reward": adversarial_rewards.mean(),
            "evaluations": len(members) + len(adversarial), **metrics}


def queries(config: ESSAMConfig, train: Sequence, model: torch.nn.Module) -> QueryCounts:
    """Per step every member of the SAM population and of the adversarial one rolls out the batch greedily."""
    sam_size = config.sam_population_size if isinstance(config, ESSAMFConfig) else config.population_size
    return QueryCounts.rollouts((sam_size + config.population_size) * min(config.batch_size, len(train))) * config.steps


def train(config: ESSAMConfig, run: Run) -> Artifact:
    params = trainable(run.model)
    for _ in run.steps(config.steps):
        batch = run.batch(config.batch_size)
        metrics = essam_step(params, None, run.rng, config,
                             score=lambda members: run.score_population(members, batch, noise=config.noise).mean(1))
        run.log(rollouts=metrics.pop("evaluations") * len(batch), **metrics)
    return run.save_model()


PAPER = ("Sun, Dang, Dai, Ye 2026, ESSAM: A Novel Competitive Evolution Strategies Approach to Reinforcement "
         "Learning for Memory Efficient LLMs Fine-Tuning (arXiv 2602.01003)")
BIBTEX = """
@misc{sun2026essam,
  author = {Sun and Dang and Dai and Ye},
  title = {{ESSAM}: A Novel Competitive Evolution Strategies Approach to Reinforcement Learning for Memory Efficient {LLMs} Fine-Tuning},
  year = {2026},
  eprint = {2602.01003},
  archiveprefix = {arXiv},
  note = {ESSAM and ESSAM-F}
}"""  # noqa: E501
TEST_SETTINGS = {"steps": 1, "batch_size": 2, "population_size": 2}
register("essam", config=ESSAMConfig, display="ESSAM", order=60, outputs="model", paper=PAPER, bibtex=BIBTEX,
         test_settings=TEST_SETTINGS, queries=queries, workers=True)(train)
register("essam_f", config=ESSAMFConfig, display="ESSAM-F", order=70, outputs="model",
         paper=PAPER + ", accelerated variant ESSAM-F", bibtex=BIBTEX,
         test_settings={**TEST_SETTINGS, "sam_population_size": 2},
         queries=queries, workers=True)(train)
