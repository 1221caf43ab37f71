"""RandOpt: random perturbations and a top-K vote (Gan & Isola, "Neural Thickets: Diverse Task
Experts Are Dense Around Pretrained Weights", ICML 2026, arXiv 2603.12228; code `sunrainyg/RandOpt`,
`randopt.py`).

Algorithm (`run_sampling`, the selection in `main`, `run_ensemble_evaluation`):

    draw N distinct seeds s_i and, per seed, sigma_i uniformly from a grid
    for i = 1..N:
        theta <- theta_0 + sigma_i eps(s_i)                (in place)
        r_i = mean correctness of greedy rollouts on the support set S
        theta <- theta - sigma_i eps(s_i)                  (restore)
    keep the K members with the highest r_i (ties: the member evaluated first), best first
    answer each test question by majority vote over the K members' greedy answers

The centre never moves. The output is the ensemble of K seed-list members, which the evaluator
runs one at a time and votes (K inference passes per answer). The support set is the first
`support_size` problems of the run's training split, as RandOpt takes the first
`train_samples` items of the train file.

As in the code, every tensor is re-seeded with the member's seed (`noise: shared`) and a member
is scored by correctness alone (`score: correctness`); `noise: iid` and `score: reward` (the
harness's training reward, correctness plus its format term) are ablations.

Each step scores one member, or, where the run scores several side by side (`run.population_workers`,
under `training.population: ray`), the next members at once, then logs them a step each.

Stage 0 of CoRP (`methods/corp.py`) is this discovery loop: `discover` is shared with it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Annotated, Literal, Sequence

import numpy as np

from core.config import Positive, Range
from core.contract import Artifact, QueryCounts, Run
from core.errors import NogradError
from core.fitness import top_k
from core.perturb import NoiseMode
from core.task import Problem
from methods import register


@dataclass
class RandOptConfig:
    """RandOpt's paper scripts (`scripts/*.sh`): 5000 perturbations, the top 1% voting."""

    population: Positive = 5000
    """Perturbations N, each scored on the support set."""
    sigmas: Annotated[list[float], Range(min_items=1)] = field(default_factory=lambda: [0.0005, 0.001, 0.002])
    """Grid the noise scale sigma_i of each member is drawn from, uniformly."""
    top_k: Positive = 50
    """Ensemble size K: the best K members vote (1% of N = 50 in the paper)."""
    support_size: Positive = 200
    """Support problems: the first support_size training problems, scored with greedy decoding."""
    noise: Literal["iid", "shared"] = "shared"
    """Noise across tensors: one seed re-used for every tensor (RandOpt's code), or independent per tensor."""
    score: Literal["correctness", "reward"] = "correctness"
    """A member's support score: mean correctness (RandOpt's code), or the training reward with its
    format term (reward.format_weight)."""

    def __post_init__(self) -> None:
        if self.top_k > self.population:
            raise ValueError(f"top_k ({self.top_k}) must be at most population ({self.population}): the best K of "
                             "the N members vote")


def check_slice(train: Sequence[Problem], start: int, size: int, what: str, task: str = "the task") -> None:
    """Training problems [start, start + size) exist, or one line says which setting asks for more."""
    if start + size > len(train):
        raise NogradError(f"the {what} needs training problems {start}..{start + size - 1}, but {task} has "
                          f"{len(train)}; lower it or raise the task's train_size")


def train_slice(run: Run, start: int, size: int, what: str) -> list[Problem]:
    """Training problems [start, start + size): a fixed slice, the same for every member."""
    try:
        check_slice(run.train, start, size, what, f"task {run.task.name}")
    except NogradError as error:
        raise NogradError(f"{run.method}: {error}") from None
    return run.train[start : start + size]


def discover(run: Run, step: int, population: int, sigmas: Sequence[float], support: Sequence[Problem],
             noise: NoiseMode, score: str) -> None:
    """Score member `step` of the seeded population on the support set (RandOpt; CoRP's stage 0).

    The members are drawn at step 0 and kept in `run.state` with their rewards, so a resumed run
    carries on with the same population. Members are scored `run.population_workers` at a time, at
    the first step of each such group, whose rewards the state then holds for the group's steps.
    """
    if step == 0:
        seeds = run.rng.choice(2**31, size=population, replace=False)
        run.state["members"] = list(zip(seeds.tolist(), run.rng.choice(sigmas, size=population).tolist()))
        run.state["rewards"] = []
    rewards = run.state["rewards"]
    if step == len(rewards):
        group = run.state["members"][step : step + run.population_workers]
        scored = run.score_population([[member] for member in group], support, score=score, noise=noise)
        rewards += [float(row.mean()) for row in scored]
    run.log(reward=rewards[step], sigma=run.state["members"][step][1], perturbations=step + 1)


def select(rewards: Sequence[float], k: int) -> list[int]:
    """Indices of the K best members, best first; among equal rewards the earlier member wins."""
    kept = np.flatnonzero(top_k(np.asarray(rewards), k))
    return sorted(kept.tolist(), key=lambda i: -rewards[i])


def queries(config: RandOptConfig, train: Sequence[Problem], model) -> QueryCounts:
    """Every member rolls out the support set greedily; the ensemble answers with its top_k members."""
    check_slice(train, 0, config.support_size, "support set")
    return dataclasses.replace(QueryCounts.rollouts(config.population * config.support_size),
                               inference_passes=config.top_k)


BIBTEX = """
@inproceedings{gan2026thickets,
  author = {Gan and Isola},
  title = {Neural Thickets: Diverse Task Experts Are Dense Around Pretrained Weights},
  booktitle = {International Conference on Machine Learning (ICML)},
  year = {2026},
  eprint = {2603.12228},
  archiveprefix = {arXiv},
  note = {RandOpt}
}"""


@register("randopt", config=RandOptConfig, display="RandOpt", order=80, outputs="ensemble", bibtex=BIBTEX,
          paper="Gan & Isola 2026, Neural Thickets: Diverse Task Experts Are Dense Around Pretrained Weights, "
                "ICML (arXiv 2603.12228)",
          test_settings={"population": 3, "top_k": 2, "support_size": 2}, queries=queries, workers=True)
def train(config: RandOptConfig, run: Run) -> Artifact:
    support = train_slice(run, 0, config.support_size, "support set")
    for step in run.steps(config.population):
        discover(run, step, config.population, config.sigmas, support, config.noise, config.score)
    members, rewards = run.state["members"], run.state["rewards"]
    best = select(rewards, config.top_k)
    run.log(perturbations=len(rewards), members=len(best), support_reward=float(np.mean([rewards[i] for i in best])))
    return run.ensemble_artifact([run.seeds_artifact([members[i]], config.noise) for i in best])
