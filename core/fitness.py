"""Fitness shaping: from a population's rewards to the coefficients of its update.

The ES methods differ in how rewards become weights; each function here is one paper's rule,
applied to a 1-D array of member rewards R_1..R_N:
- `zscore`: (R - mean) / (std + 1e-8)                  (Qiu et al., ESSAM, EGGROLL)
- `centered_ranks`: ranks mapped to [-0.5, 0.5]         (Salimans et al., OpenAI ES)
- `centered`: R - mean                                  (ESSAM-F's SAM step)
- `softmax`: exp(R / T) / sum exp(R / T)                (CoRP's reward weights)
- `top_k`: 1/K on the K best members, 0 elsewhere      (RandOpt's selection)

A member whose reward is not finite (NaN: a member the harness skipped, `training.on_nonfinite`)
gets coefficient 0, and the statistics (mean, std, ranks, normaliser) are those of the others.
Equal rewards carry no signal: zscore, centered and centered_ranks then give all zeros (tied
members share their mean rank), so the update is zero; softmax gives equal weights, top_k the
earliest members.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

Shaping = Literal["zscore", "centered_ranks", "centered", "softmax", "top_k"]


def _finite(rewards: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rewards as float64, mask of the finite ones)."""
    rewards = np.asarray(rewards, dtype=np.float64)
    return rewards, np.isfinite(rewards)


def _on_finite(rewards: np.ndarray, rule) -> np.ndarray:
    """`rule` applied to the finite rewards; 0 for the others."""
    rewards, ok = _finite(rewards)
    out = np.zeros_like(rewards)
    if ok.any():
        out[ok] = rule(rewards[ok])
    return out


def zscore(rewards: np.ndarray) -> np.ndarray:
    return _on_finite(rewards, lambda r: (r - r.mean()) / (r.std() + 1e-8))


def centered_ranks(rewards: np.ndarray) -> np.ndarray:
    """Ranks 0..N-1 scaled to [-0.5, 0.5], tied rewards sharing their mean rank; a single member gets 0."""

    def ranks(r: np.ndarray) -> np.ndarray:
        if r.size < 2:
            return np.zeros_like(r)
        values, tie, counts = np.unique(r, return_inverse=True, return_counts=True)
        first = np.cumsum(counts) - counts  # the rank of each distinct value's first member
        return (first + (counts - 1) / 2)[tie] / (r.size - 1) - 0.5

    return _on_finite(rewards, ranks)


def centered(rewards: np.ndarray) -> np.ndarray:
    return _on_finite(rewards, lambda r: r - r.mean())


def softmax(rewards: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    def weights(r: np.ndarray) -> np.ndarray:
        logits = r / temperature
        e = np.exp(logits - logits.max())
        return e / e.sum()

    return _on_finite(rewards, weights)


def top_k(rewards: np.ndarray, k: int) -> np.ndarray:
    """Weight 1/K on the K highest finite rewards (ties: the earlier member), 0 elsewhere; fewer
    than K finite rewards share the weight among themselves."""
    rewards, ok = _finite(rewards)
    k = min(k, int(ok.sum()))
    weights = np.zeros_like(rewards)
    if k:
        order = np.argsort(-np.where(ok, rewards, -np.inf), kind="stable")
        weights[order[:k]] = 1.0 / k
    return weights


def shape(rewards: np.ndarray, how: Shaping, temperature: float = 1.0, k: int = 1) -> np.ndarray:
    """Apply the named shaping (`temperature` for softmax, `k` for top_k)."""
    if how == "softmax":
        return softmax(rewards, temperature)
    if how == "top_k":
        return top_k(rewards, k)
    return {"zscore": zscore, "centered_ranks": centered_ranks, "centered": centered}[how](rewards)
