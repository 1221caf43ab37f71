"""CoRP (Zhang, Yang & Kasneci, "Consolidating Rewarded Perturbations for LLM Post-Training", COLM
2026 Efficient Reasoning workshop, arXiv 2605.31494; code `oooranz/CoRP`: `corp.py`,
`core/collapse_ops.py`, `core/recenter_ops.py`, `core/corp_ops.py`), built on RandOpt.

Stage 0, isotropic discovery (RandOpt's loop, shared: `methods.randopt.discover`):
    N distinct seeds, sigma_i uniform on a grid; r_i = mean greedy correctness on the support set S
Stage 1, constructive collapse; every (q, beta, s) of a grid is scored on the probe set P:
    E = {i : r_i >= quantile_q(r)}
    w1 = softmax(beta r_E);  m = sum_E w1_i sigma_i eps_i                                  (pass 1)
    a_i = cos(sigma_i eps_i, m);  d_i = ||sigma_i eps_i||^2 - <sigma_i eps_i, m / ||m||>^2
    w2 = softmax(beta r_E + zscore(a) - zscore(d));  Delta = sum_E w2_i sigma_i eps_i      (pass 2)
    the best theta_0 + s Delta on P becomes the centre
Stage 2, adaptive constructive re-centring, rounds t = 1..T (S split once into select/gate halves):
    sample L candidates around the centre:
        sigma sqrt(lam) eps_iso + sum_{k<=8} sigma sqrt(1 - lam) sqrt(lam_k) z_k u_k
        (u_k, lam_k: principal directions and eigenvalues of the search cloud, at first Stage 1's)
    score each on the select half against the centre: (fixes - lambda_reg regressions) / n
    search cloud <- the positive-score candidates, softmax-weighted to a target ESS (16 -> 4);
    lam <- (lam + clip(0.15 + 0.8 (1 - share positive), 0.15, 0.95)) / 2
    proposals: the two-pass merge of the candidates (rewards: select accuracy) per (q, beta),
        its unit direction times eta in {0.5, 1, 2} x eta_current, ranked by select score
    gate: the best proposal with gate-half score > 0 and paired LCB (mean - 1 SE) > 0
    probe line search over alpha in {0.5, 1, 2}; accept if the probe paired LCB > 0 and probe
        accuracy does not drop: commit (re-centre); otherwise sigma <- sigma / 2
    stop after 2 accepted rounds or 2 rejections in a row

Seed-coefficient space, as in the code: every direction is sum_j c_j eps(s_j), stored as
{seed: c}; inner products treat distinct seeds as orthonormal axes, so sigma_i eps_i has norm
sigma_i (true up to O(1/sqrt(dim)) in high dimension; the weight-space norm is sqrt(dim) times
larger, a factor common to every member). The code keys its axes by (seed, sigma); here by seed,
which is the same whenever seeds differ, and right when they coincide. The eigenvalues lam_k keep
the cloud's own units (amplitude^2), as in the code, so at the papers' sigma the low-rank term
sigma sqrt(lam_k) is small next to the isotropic one.

As in the code, every tensor is re-seeded with the same seed (`noise: shared`) and every score,
support, probe, select and gate, is per-example correctness (`score: correctness`); `noise: iid`
and `score: reward` are ablations. Under `score: reward` (the harness's training reward,
correctness plus its format term) a fix is an example whose reward rises above the centre's, a
regression one whose reward falls, and the paired differences are reward differences; with
correctness, 0/1, these are the code's definitions exactly.

Choices where the harness differs from the code:
- z-score: the code's (x - mean) / std, zeros when std <= 1e-12; not `core.fitness.zscore`,
  whose + 1e-8 is not negligible next to dispersions of order sigma^2 ~ 1e-7.
- The centre is committed in place. Its select/gate scores are read from one evaluation on the
  whole support set, and after an accepted round its probe scores are the line search's (the
  code evaluates the same weights again).
- Output: the centre theta_0 + sum_j c_j eps(s_j) is one model (1 inference pass), saved as its
  seed list (`Run.seeds_artifact`), which rebuilds it exactly.
- `perturbations` counts every perturbed model CoRP scores, i.e. every theta_0 + direction it
  builds to evaluate: Stage 0's N members, Stage 1's |q| |beta| |s| grid candidates, and in each
  Stage 2 round its L local candidates, its proposals (|q| |beta| x the distinct steps eta; one
  model scored on the select and the gate half) and, when the gate passes, its line-search points
  (one per alpha). The committed centre is not a perturbation. The paper's "500 vs 5000" counts
  Stage 0 only; the cost of all of them is in the meters. `support_reward` and `probe_reward` are
  the centre's, logged after Stage 1 and after every round.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Annotated, Literal, Sequence

import numpy as np

from core.config import Positive, Range
from core.contract import Artifact, QueryCounts, Run
from core.errors import NogradError
from core.fitness import softmax
from core.perturb import combine_, trainable
from methods import register
from methods.randopt import check_slice, discover, train_slice

EPS = 1e-12

Direction = dict[int, float]
"""sum_j c_j eps(s_j) as {s_j: c_j}."""
Grid = Annotated[list[float], Range(min_items=1)]
"""Values a stage tries (or draws from): at least one."""
Quantiles = Annotated[list[Annotated[float, Range(ge=0, le=1)]], Range(min_items=1)]
"""Quantile levels q in [0, 1]: at least one."""


@dataclass
class CoRPConfig:
    """CoRP's `scripts/run.sh`: 500 perturbations (a tenth of RandOpt's), support 500, probe 100."""

    population: Positive = 500
    """Stage 0 perturbations N, each scored on the support set."""
    sigmas: Grid = field(default_factory=lambda: [0.0005, 0.001, 0.002])
    """Grid the noise scale sigma_i of each Stage 0 member is drawn from, uniformly."""
    support_size: Positive = 500
    """Support set S: the first support_size training problems."""
    probe_size: Positive = 100
    """Probe set P: the next probe_size training problems, disjoint from S."""
    q_grid: Quantiles = field(default_factory=lambda: [0.5, 0.7, 0.9])
    """Elite quantiles q: members with r_i >= quantile_q(r) are merged."""
    beta_grid: Grid = field(default_factory=lambda: [0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0])
    """Inverse temperatures beta of the softmax reward weights."""
    scale_grid: Grid = field(default_factory=lambda: [0.5, 1.0, 2.0, 4.0, 8.0, 16.0])
    """Stage 1 step scales s of the candidate theta_0 + s Delta."""
    rank: Annotated[int, Range(ge=0)] = 8
    """Principal directions u_k of a weighted cloud kept for Stage 2's sampling."""
    rounds: Annotated[int, Range(ge=0)] = 3
    """Stage 2 re-centring rounds T at most (0 skips Stage 2)."""
    max_accepted: Annotated[int, Range(ge=0)] = 2
    """Stage 2 stops after this many accepted re-centrings."""
    patience: Annotated[int, Range(ge=0)] = 2
    """Stage 2 stops after this many rejected rounds in a row."""
    local_population: Positive = 100
    """Stage 2 candidates L sampled around the centre per round."""
    iso_lambda: Annotated[float, Range(ge=0, le=1)] = 0.5
    """Initial isotropic share lambda of the local sampling variance."""
    sigma_down: Annotated[float, Range(gt=0)] = 0.5
    """Factor on the local sigma after a rejected round (it starts at Stage 0's best sigma)."""
    regression_lambda: Annotated[float, Range(ge=0)] = 2.0
    """lambda_reg: weight of a regression against a fix in the constructive score."""
    ess_initial: Annotated[float, Range(gt=0)] = 16.0
    """Target effective sample size of the search-cloud weights in the first round."""
    ess_final: Annotated[float, Range(gt=0)] = 4.0
    """Target effective sample size in the last round (geometric interpolation in between)."""
    step_factors: Grid = field(default_factory=lambda: [0.5, 1.0, 2.0])
    """Stage 2 proposal steps eta, as multiples of the current one (Stage 1's s ||Delta||, then the last accepted)."""
    line_search: Grid = field(default_factory=lambda: [0.5, 1.0, 2.0])
    """Probe line search: the gated proposal is tried at alpha eta for each alpha."""
    gate_z: Annotated[float, Range(ge=0)] = 1.0
    """z of the paired lower confidence bound mean - z SE on the gate half and the probe set."""
    accept_epsilon: float = 0.0
    """An accepted round must reach the current probe accuracy plus this."""
    noise: Literal["iid", "shared"] = "shared"
    """Noise across tensors: one seed re-used for every tensor (CoRP's code), or independent per tensor."""
    score: Literal["correctness", "reward"] = "correctness"
    """Per-example score on the support, probe, select and gate sets: correctness (CoRP's code), or
    the training reward with its format term (reward.format_weight)."""

    def __post_init__(self) -> None:
        if self.rounds > 0 and self.support_size < 2:
            raise ValueError(f"support_size ({self.support_size}) must be at least 2 when rounds > 0: Stage 2 splits "
                             "the support set into a select and a gate half")


# ---------------------------------------------------------------- seed-coefficient space


def stack(directions: Sequence[Direction]) -> tuple[np.ndarray, list[int]]:
    """Coefficient rows over the sorted union of seeds: distinct seeds are orthonormal axes."""
    basis = sorted(set().union(*directions))
    column = {seed: j for j, seed in enumerate(basis)}
    matrix = np.zeros((len(directions), len(basis)))
    for i, direction in enumerate(directions):
        for seed, coef in direction.items():
            matrix[i, column[seed]] = coef
    return matrix, basis


def terms(vector: np.ndarray, basis: Sequence[int]) -> list[tuple[int, float]]:
    """(seed, coefficient) pairs of a coefficient vector, zeros dropped: what `combine_` applies."""
    return [(seed, float(coef)) for seed, coef in zip(basis, vector) if coef != 0.0]


def standardize(values: np.ndarray) -> np.ndarray:
    """CoRP's z-score: (x - mean) / std, zeros when std <= 1e-12."""
    std = values.std()
    return np.zeros_like(values) if std <= EPS else (values - values.mean()) / std


def compatibility(members: np.ndarray, mean: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Alignment cos(x_i, m) and orthogonal dispersion ||x_i||^2 - <x_i, m/||m||>^2 of each row x_i."""
    norms = np.linalg.norm(members, axis=1)
    mean_norm = np.linalg.norm(mean)
    if mean_norm <= EPS:
        return np.zeros_like(norms), norms**2
    along = members @ mean / mean_norm
    alignment = np.where(norms > EPS, along / np.maximum(norms, EPS), 0.0)
    return alignment, np.maximum(norms**2 - along**2, 0.0)


def weighted_cloud(members: np.ndarray, weights: np.ndarray, rank: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weighted mean, top-`rank` principal directions (unit rows) and their eigenvalues."""
    mean = weights @ members
    _, singular, axes = np.linalg.svd(np.sqrt(weights)[:, None] * (members - mean), full_matrices=False)
    return mean, axes[:rank], singular[:rank] ** 2


@dataclass
class Merge:
    """The two-pass compatibility-weighted merge of a population (indices into its rows)."""

    elite: np.ndarray
    pass1: np.ndarray
    alignment: np.ndarray
    dispersion: np.ndarray
    pass2: np.ndarray
    delta: np.ndarray
    """Delta = sum_E w2_i x_i, a coefficient vector."""
    axes: np.ndarray
    eigenvalues: np.ndarray


def merge(members: np.ndarray, rewards: np.ndarray, q: float, beta: float, rank: int) -> Merge:
    """Elite by reward quantile, softmax(beta r) weights, then re-weighted by compatibility. Members
    the harness skipped (NaN rewards, `training.on_nonfinite`) are left out of the elite."""
    rewards = np.asarray(rewards, dtype=np.float64)
    finite = np.isfinite(rewards)
    if not finite.any():
        raise NogradError("corp: every member of the population was skipped as non-finite: nothing to merge")
    elite = np.flatnonzero(finite & (rewards >= np.quantile(rewards[finite], q)))
    cloud, reward = members[elite], rewards[elite]
    pass1 = softmax(beta * reward)
    alignment, dispersion = compatibility(cloud, pass1 @ cloud)
    pass2 = softmax(beta * reward + standardize(alignment) - standardize(dispersion))
    delta, axes, eigenvalues = weighted_cloud(cloud, pass2, rank)
    return Merge(elite, pass1, alignment, dispersion, pass2, delta, axes, eigenvalues)


def mean_or_worst(rewards: np.ndarray) -> float:
    """The mean reward, or -inf for a member the harness skipped (NaN rewards): never the best."""
    return float(rewards.mean()) if np.isfinite(rewards).all() else -math.inf


def unit(vector: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(vector)
    return vector / norm if norm > EPS else vector


# ---------------------------------------------------------------- stage 2 statistics


def constructive(candidate: np.ndarray, centre: np.ndarray, regression_lambda: float) -> tuple[float, int]:
    """(fixes - lambda_reg regressions) / n against the centre, and fixes - regressions."""
    fixes, regressions = int((candidate > centre).sum()), int((candidate < centre).sum())
    return (fixes - regression_lambda * regressions) / len(centre), fixes - regressions


def paired_lcb(candidate: np.ndarray, centre: np.ndarray, z: float) -> float:
    """Lower confidence bound mean - z SE of the per-example differences candidate - centre."""
    diff = np.asarray(candidate, dtype=np.float64) - centre
    se = diff.std(ddof=1) / math.sqrt(len(diff)) if len(diff) > 1 else 0.0
    return float(diff.mean() - z * se)


def ess_weights(scores: np.ndarray, target: float) -> np.ndarray:
    """softmax(scores / T), the temperature T found by bisection so that the effective sample size
    1 / sum w^2 reaches `target`; uniform when it cannot, or when every weight would be equal."""
    size = len(scores)
    target = float(np.clip(target, 1.0, size))
    uniform = np.full(size, 1.0 / size)
    if size == 1 or scores.std() <= EPS or target >= size - 1e-6:
        return uniform

    def ess(temperature: float) -> float:
        return 1.0 / np.square(softmax(scores, max(temperature, EPS))).sum()

    low, high = EPS, 1.0
    while ess(high) < target and high < 1e6:
        high *= 2.0
    if ess(high) < target:
        return uniform
    for _ in range(60):
        mid = 0.5 * (low + high)
        low, high = (low, mid) if ess(mid) >= target else (mid, high)
    return softmax(scores, high)


def sample_local(rng: np.random.Generator, size: int, sigma: float, iso_lambda: float, basis: Sequence[int],
                 axes: np.ndarray, eigenvalues: np.ndarray) -> list[Direction]:
    """Candidates sigma sqrt(lam) eps_iso + sum_k sigma sqrt(1 - lam) sqrt(lam_k) z_k u_k (fresh seeds)."""
    seeds = rng.choice(2**31, size=size, replace=False).tolist()
    low_rank = sigma * math.sqrt(max(1.0 - iso_lambda, 0.0)) * np.sqrt(np.maximum(eigenvalues, 0.0))
    candidates = []
    for seed in seeds:
        candidate = dict(terms(rng.standard_normal(len(eigenvalues)) * low_rank @ axes, basis))
        candidate[seed] = candidate.get(seed, 0.0) + sigma * math.sqrt(iso_lambda)
        candidates.append(candidate)
    return candidates


# ---------------------------------------------------------------- the stages


def rewards_of(run: Run, config: CoRPConfig, vectors: Sequence[np.ndarray], basis: Sequence[int],
               problems) -> np.ndarray:
    """Per-example scores [candidates, problems] of theta + each coefficient vector, a population scored at once."""
    return run.score_population([terms(vector, basis) for vector in vectors], problems, score=config.score,
                                noise=config.noise)


def commit(run: Run, config: CoRPConfig, direction: Direction, support) -> None:
    """Move the centre by `direction` in place and score it on the whole support set."""
    combine_(trainable(run.model), list(direction.items()), config.noise)
    centre = run.state["centre"]
    for seed, coef in direction.items():
        centre[seed] = centre.get(seed, 0.0) + coef
    run.state["centre_support"] = run.rollout(support, score=config.score)[1][:, 0]


def collapse(run: Run, config: CoRPConfig, support, probe) -> None:
    """Stage 1: the (q, beta, s) grid on the probe set; the best candidate becomes the centre."""
    members, rewards = run.state["members"], np.asarray(run.state["rewards"])
    population, basis = stack([{seed: sigma} for seed, sigma in members])
    grid = [(merge(population, rewards, q, beta, config.rank), q, beta) for q in config.q_grid
            for beta in config.beta_grid]
    grid = [(merged, q, beta, scale) for merged, q, beta in grid for scale in config.scale_grid]
    best = None
    for probe_rewards, point in zip(rewards_of(run, config, [s * m.delta for m, _, _, s in grid], basis, probe), grid):
        if best is None or mean_or_worst(probe_rewards) > mean_or_worst(best[0]):
            best = (probe_rewards, *point)
    probe_rewards, merged, q, beta, scale = best

    by_sigma = {s: [r for (_, sigma), r in zip(members, rewards) if sigma == s] for s in config.sigmas}
    order = run.rng.permutation(len(support))
    run.state.update(
        centre={}, probe_rewards=probe_rewards, eta=scale * float(np.linalg.norm(merged.delta)),
        sigma=max(config.sigmas, key=lambda s: np.mean(by_sigma[s]) if by_sigma[s] else 0.0),
        iso_lambda=config.iso_lambda, search=(basis, merged.axes, merged.eigenvalues), accepted=0, rejects=0,
        select=np.sort(order[: len(support) // 2]), gate=np.sort(order[len(support) // 2 :]),
        perturbations=len(members) + len(config.q_grid) * len(config.beta_grid) * len(config.scale_grid),
    )
    commit(run, config, dict(terms(scale * merged.delta, basis)), support)
    run.log(q=q, beta=beta, scale=scale, elite=len(merged.elite), perturbations=run.state["perturbations"],
            support_reward=run.state["centre_support"].mean(), probe_reward=probe_rewards.mean())


def recentre(run: Run, config: CoRPConfig, round_index: int, support, probe) -> bool:
    """Stage 2, one round; True when Stage 2 stops (enough accepted rounds, or out of patience)."""
    state = run.state
    progress = (round_index - 1) / (config.rounds - 1) if config.rounds > 1 else 1.0
    target_ess = math.exp((1 - progress) * math.log(config.ess_initial) + progress * math.log(config.ess_final))
    select, gate = [support[i] for i in state["select"]], [support[i] for i in state["gate"]]
    centre_select, centre_gate = state["centre_support"][state["select"]], state["centre_support"][state["gate"]]

    # Local population around the centre, scored on the select half.
    candidates = sample_local(run.rng, config.local_population, state["sigma"], state["iso_lambda"], *state["search"])
    population, basis = stack(candidates)
    select_rewards = rewards_of(run, config, population, basis, select)
    scores = np.array([constructive(r, centre_select, config.regression_lambda)[0] for r in select_rewards])
    state["perturbations"] += len(candidates)

    # The search cloud follows the constructive candidates; lambda grows when few are constructive.
    positive = scores > 0
    if positive.any():
        cloud, cloud_basis = stack([c for c, keep in zip(candidates, positive) if keep])
        weights = ess_weights(scores[positive], min(positive.sum(), 2 * target_ess))
        state["search"] = (cloud_basis, *weighted_cloud(cloud, weights, config.rank)[1:])
    target_lambda = float(np.clip(0.15 + 0.8 * (1 - positive.mean()), 0.15, 0.95))
    state["iso_lambda"] = float(np.clip(0.5 * state["iso_lambda"] + 0.5 * target_lambda, 0.05, 0.95))

    # Merged proposals, ranked on the select half, gated on the other half.
    accuracy = np.array([r.mean() for r in select_rewards])
    steps = sorted({max(state["eta"] * f, 1e-8) for f in config.step_factors})
    moves = [(eta, unit(merge(population, accuracy, q, beta, config.rank).delta)) for q in config.q_grid
             for beta in config.beta_grid for eta in steps]
    proposals = []
    vectors = [eta * direction for eta, direction in moves]
    for (eta, direction), on_select, gate_rewards in zip(moves, rewards_of(run, config, vectors, basis, select),
                                                         rewards_of(run, config, vectors, basis, gate)):
        select_score, net = constructive(on_select, centre_select, config.regression_lambda)
        gate_score = constructive(gate_rewards, centre_gate, config.regression_lambda)[0]
        gate_lcb = paired_lcb(gate_rewards, centre_gate, config.gate_z)
        proposals.append((select_score, net, gate_score > 0 and gate_lcb > 0, gate_lcb, eta, direction))
    state["perturbations"] += len(proposals)
    ranked = sorted(proposals, key=lambda p: (p[0], p[1]), reverse=True)  # stable: grid order breaks ties
    _, _, gate_passed, gate_lcb, eta, direction = next((p for p in ranked if p[2]), ranked[0])
    metrics = {"gate_lcb": gate_lcb}

    # Probe line search and acceptance; a rejected round halves sigma.
    accepted = False
    if gate_passed:
        line = None
        state["perturbations"] += len(config.line_search)
        points = [alpha * eta for alpha in config.line_search]
        for probe_rewards, point in zip(rewards_of(run, config, [p * direction for p in points], basis, probe), points):
            if line is None or mean_or_worst(probe_rewards) > mean_or_worst(line[0]):
                line = (probe_rewards, point)
        probe_rewards, eta = line
        metrics["probe_lcb"] = paired_lcb(probe_rewards, state["probe_rewards"], config.gate_z)
        if metrics["probe_lcb"] > 0 and probe_rewards.mean() >= state["probe_rewards"].mean() + config.accept_epsilon:
            commit(run, config, dict(terms(eta * direction, basis)), support)
            state.update(probe_rewards=probe_rewards, eta=eta, accepted=state["accepted"] + 1, rejects=0)
            accepted = True
    if not accepted:
        state.update(sigma=max(state["sigma"] * config.sigma_down, 1e-8), rejects=state["rejects"] + 1)

    run.log(accepted=float(accepted), **metrics, sigma=state["sigma"], iso_lambda=state["iso_lambda"],
            positive_share=positive.mean(), perturbations=state["perturbations"],
            support_reward=state["centre_support"].mean(), probe_reward=state["probe_rewards"].mean())
    if accepted:
        return state["accepted"] >= config.max_accepted
    return config.patience > 0 and state["rejects"] >= config.patience


def queries(config: CoRPConfig, train: Sequence, model) -> QueryCounts:
    """Greedy rollouts. Stage 0: every member on the support set; Stage 1: each grid point on the
    probe set, then the centre on the support set; Stage 2, at most `rounds` rounds, each: the
    local candidates on the select half, every proposal on both halves and, when the gate opens,
    the line search on the probe set and an accepted centre on the support set. A round may stop
    Stage 2, find the gate shut or reject: with rounds, the count is a bound."""
    check_slice(train, 0, config.support_size, "support set")
    check_slice(train, config.support_size, config.probe_size, "probe set")
    select = config.support_size // 2
    proposals = len(config.q_grid) * len(config.beta_grid) * len(set(config.step_factors))
    grid = len(config.q_grid) * len(config.beta_grid) * len(config.scale_grid)
    round_ = (config.local_population * select + proposals * config.support_size
              + len(config.line_search) * config.probe_size + config.support_size)
    rollouts = (config.population * config.support_size + grid * config.probe_size + config.support_size
                + config.rounds * round_)
    return dataclasses.replace(QueryCounts.rollouts(rollouts), bound=config.rounds > 0)


BIBTEX = """
@inproceedings{zhang2026corp,
  author = {Zhang and Yang and Kasneci},
  title = {Consolidating Rewarded Perturbations for {LLM} Post-Training},
  booktitle = {COLM 2026 Workshop on Efficient Reasoning},
  year = {2026},
  eprint = {2605.31494},
  archiveprefix = {arXiv},
  note = {CoRP}
}"""


@register("corp", config=CoRPConfig, display="CoRP", order=90, outputs="seeds", bibtex=BIBTEX,
          paper="Zhang, Yang & Kasneci 2026, Consolidating Rewarded Perturbations for LLM Post-Training, "
                "COLM Efficient Reasoning workshop (arXiv 2605.31494)",
          test_settings={"population": 3, "support_size": 2, "probe_size": 2, "q_grid": [0.5], "beta_grid": [10.0],
                "scale_grid": [1.0], "rounds": 1, "local_population": 2, "rank": 2, "step_factors": [1.0],
                "line_search": [1.0]}, queries=queries, workers=True)
def train(config: CoRPConfig, run: Run) -> Artifact:
    support = train_slice(run, 0, config.support_size, "support set")
    probe = train_slice(run, config.support_size, config.probe_size, "probe set")
    for step in run.steps(config.population + 1 + config.rounds):
        if step < config.population:
            discover(run, step, config.population, config.sigmas, support, config.noise, config.score)
        elif step == config.population:
            collapse(run, config, support, probe)
        elif recentre(run, config, step - config.population, support, probe):
            break
    return run.seeds_artifact(sorted(run.state["centre"].items()), config.noise)
