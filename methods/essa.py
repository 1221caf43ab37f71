"""ESSA: Evolutionary Strategies for Scalable Alignment (Korotyshova et al., arXiv 2507.04453).

Algorithm (METHODS.md section 1; no official code exists):

    Stage "sft" (the warm start, reported separately; methods/sft.py, also run alone as the `sft` control):
        add a LoRA adapter (A: r x k, B: d x r, scale alpha / r) to every target layer
        for t = 1..sft_steps: AdamW step on the cross-entropy of SFT targets (a batch of them)
    Stage "search" (inference only):
        A = U_A diag(s_A) V_A^T, B = U_B diag(s_B) V_B^T for every adapter; U, V frozen
        x = concatenated singular values (2r per adapted layer); CMA-ES(x0 = x, sigma0)
        for g = 1..generations:
            draw a batch of training problems
            x_1..x_lambda = ask()
            R_j = mean reward of greedy rollouts on the batch with the adapter's s set to x_j
            tell(x_j, -R_j)                   (CMA-ES minimises: rank-based weights on -R)
        the adapter at the final mean (or best candidate) is the output: a plain LoRA adapter

Rollouts per generation: lambda |B|, each one model query; no backward pass after the warm start.

Choices where METHODS.md marks the paper's detail [uncertain] (each a config field):
- The warm start's SFT targets, LoRA and SFT recipe: methods/sft.py, whose settings ESSAConfig
  extends, so that the `sft` control runs exactly this stage.
- Decomposition: A and B separately (the literal reading), or `decompose: product`, the SVD of
  the update BA (r values per layer; lora_B is rewritten so that BA = U diag(s) V^T, lora_A kept).
  All r singular values are searched (`fraction` < 1 searches only the largest ones).
- CMA-ES: pycma with its default population 4 + floor(3 ln d) unless `population_size` is set;
  sigma0 = `sigma0` x mean |x0| (METHODS.md's assumption: 0.1 of the mean singular value); full
  covariance. The output is the CMA-ES mean (`final: mean`, pycma's favourite under noisy
  fitness), or the best candidate seen (`final: best`).
- No INT8/INT4 quantisation of the base during the search: every method runs in the configured
  dtype, so that the comparison is like for like.

Logged per generation: `reward` (population mean), `reward_best`, `sigma` (CMA-ES step size) and
`bytes_exchanged`, what a distributed ESSA sends per generation when a coordinator runs CMA-ES
and workers score candidates: lambda candidate vectors of d float32 singular values out, lambda
float32 fitnesses back, i.e. bytes_exchanged = 4 lambda (d + 1). (With the CMA-ES state replicated
on every worker, only the 4 lambda bytes of fitnesses would travel.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Callable, Literal

import numpy as np
import torch

from core import spaces
from core.config import Positive, Range
from core.contract import Artifact, QueryCounts, Run
from core.task import Problem
from methods import register
from methods.sft import ESSA_BIBTEX, TEST_SETTINGS, SFTConfig, add_adapter, warm_start
from methods.sft import queries as warm_start_queries

if TYPE_CHECKING:
    import cma


@dataclass
class ESSAConfig(SFTConfig):
    """ESSA's settings: the warm start's (SFTConfig) and the search's; the paper's values were not
    retrieved, so each default is a stated choice (module docstring)."""

    decompose: Literal["each", "product"] = "each"
    """'each': SVDs of lora_A and lora_B (2r values per layer); 'product': the SVD of their product BA (r values)."""
    fraction: Annotated[float, Range(gt=0, le=1)] = 1.0
    """Share of each matrix's singular values searched (the largest); the rest stay at their SVD values."""
    generations: Positive = 200
    """CMA-ES generations (ask, score, tell)."""
    population_size: Annotated[int, Range(ge=2)] | None = None
    """CMA-ES lambda; null for pycma's default 4 + floor(3 ln d)."""
    sigma0: Annotated[float, Range(gt=0)] = 0.1
    """Initial CMA-ES step size, as a fraction of the mean absolute singular value searched."""
    batch_size: Positive = 32
    """Training problems per generation, scored by every candidate with greedy rollouts."""
    final: Literal["mean", "best"] = "mean"
    """Output adapter: the CMA-ES mean after the last generation, or the best candidate scored."""
    population_batch: bool = True
    """Score all candidates in one batch, each row with its candidate's adapter; false: one candidate after another."""


def new_search(x0: np.ndarray, config: ESSAConfig, seed: int) -> cma.CMAEvolutionStrategy:
    """CMA-ES from the SVD's singular values. Its normal draws come from its own seeded RandomState
    (pycma's `seed` would seed numpy's global generator, which no checkpoint captures); that
    generator is pickled with the strategy, so a resumed run draws the same candidates."""
    options = {"randn": np.random.RandomState(seed).randn, "seed": np.nan, "verbose": -9, "verb_log": 0,
               "verb_disp": 0}
    if config.population_size is not None:
        options["popsize"] = config.population_size
    import cma  # here: importing pycma takes a second, and only ESSA's training jobs need it

    return cma.CMAEvolutionStrategy(x0, config.sigma0 * float(np.abs(x0).mean()), options)


def generation(es: cma.CMAEvolutionStrategy, space: spaces.SingularValues,
               score: Callable[[list[np.ndarray]], np.ndarray]) -> np.ndarray:
    """One CMA-ES generation: `score` gives every candidate's reward, CMA-ES is told -reward.
    Leaves the adapter at the new mean; returns the rewards."""
    candidates = es.ask()
    rewards = np.asarray(score(candidates), dtype=float)
    es.tell(candidates, [-r for r in rewards])
    space.set(es.mean)
    return rewards


def scorer(config: ESSAConfig, run: Run, space: spaces.SingularValues, batch: list[Problem]):
    """Mean greedy reward on `batch` of each candidate: all candidates in one batch (each a LoRA
    adapter of its own, `population_batch`), or one after another with the adapter rewritten."""
    def batched(candidates: list[np.ndarray]) -> np.ndarray:
        with space.population(run.model, candidates) as adapters:
            return run.population_rollout(batch, adapters).mean(axis=1)

    def in_turn(candidates: list[np.ndarray]) -> np.ndarray:
        rewards = []
        for x in candidates:
            space.set(x)
            rewards.append(run.rollout(batch)[1].mean())
        return np.asarray(rewards)

    return batched if config.population_batch else in_turn


def queries(config: ESSAConfig, train: list[Problem], model: torch.nn.Module) -> QueryCounts:
    """The warm start's (methods.sft), then per generation every candidate rolls out the batch
    greedily. pycma's default population depends on the search's dimension: 2r (or r, `product`)
    singular values, ceil(fraction r) of them searched, per layer the adapter targets in `model`."""
    population = config.population_size
    if population is None:
        import cma
        from peft import LoraConfig
        from peft.tuners.tuners_utils import check_target_module_exists

        lora = LoraConfig(r=config.lora_rank, target_modules=config.target_modules)  # matched as peft matches
        layers = sum(1 for name, module in model.named_modules()
                     if isinstance(module, torch.nn.Linear) and check_target_module_exists(lora, name))
        vectors = layers * (2 if config.decompose == "each" else 1)
        dimension = vectors * max(1, math.ceil(config.fraction * config.lora_rank))
        population = cma.CMAEvolutionStrategy(np.zeros(dimension), 1.0, {"verbose": -9}).popsize
    search = QueryCounts.rollouts(population * min(config.batch_size, len(train))) * config.generations
    return warm_start_queries(config, train, model) + search


@register("essa", config=ESSAConfig, display="ESSA", order=50, outputs="adapter", bibtex=ESSA_BIBTEX,
          paper="Korotyshova et al. 2025, ESSA: Evolutionary Strategies for Scalable Alignment (arXiv 2507.04453)",
          test_settings={**TEST_SETTINGS, "generations": 2, "population_size": 2, "batch_size": 1}, queries=queries,
          builds_on="sft")
def train(config: ESSAConfig, run: Run) -> Artifact:
    add_adapter(config, run)
    with run.stage("sft"):
        warm_start(config, run)
    with run.stage("search"):
        space = spaces.SingularValues(run.model, config.decompose, config.fraction, run.state.get("svd"))
        run.state["svd"] = space.bases
        if "cma" not in run.state:
            run.state["cma"] = new_search(space.get(), config, int(run.rng.integers(2**31)))
        es = run.state["cma"]
        space.set(es.mean)  # after a resume the bases are restored but s is not
        for _ in run.steps(config.generations):
            batch = run.batch(config.batch_size)
            rewards = generation(es, space, scorer(config, run, space, batch))
            run.log(reward=rewards.mean(), reward_best=rewards.max(), sigma=es.sigma,
                    bytes_exchanged=4 * len(rewards) * (space.dimension + 1))
        space.set(es.result.xbest if config.final == "best" else es.mean)
    return run.save_adapter()
