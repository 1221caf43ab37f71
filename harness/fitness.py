"""Fitness shaping: from a population's rewards to the coefficients of its update.

The ES methods differ in how rewards become weights; each function here is one paper's rule,
applied to a 1-D array of member rewards R_1..R_N:
- `zscore`: (R - mean) / (std + 1e-8)                  (Qiu et al., ESSAM, EGGROLL)
- `centered_ranks`: ranks mapped to [-0.5, 0.5]         (Salimans et al., OpenAI ES)
- `centered`: R - mean                                  (ESSAM-F's SAM step)
- `softmax`: exp(R / T) / sum exp(R / T)                (CoRP's reward weights)
- `top_k`: 1/K on the K best members, 0 elsewhere      (RandOpt's selection)
"""

from __future__ import annotations

from typing import Literal

import numpy as np

Shaping = Literal["zscore", "centered_ranks", "centered", "softmax", "top_k"]


def zscore(rewards: np.ndarray) -> np.ndarray:
    rewards = np.asarray(rewards, dtype=np.float64)
    return (rewards - rewards.mean()) / (rewards.std() + 1e-8)


def centered_ranks(rewards: np.ndarray) -> np.ndarray:
    """Ranks 0..N-1 (ties broken by position) scaled to [-0.5, 0.5]; a single member gets 0."""
    rewards = np.asarray(rewards, dtype=np.float64)
    if rewards.size < 2:
        return np.zeros_like(rewards)
    ranks = np.empty(rewards.size)
    ranks[np.argsort(rewards, kind="stable")] = np.arange(rewards.size)
    return ranks / (rewards.size - 1) - 0.5


def centered(rewards: np.ndarray) -> np.ndarray:
    rewards = np.asarray(rewards, dtype=np.float64)
    return rewards - rewards.mean()


def softmax(rewards: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    logits = np.asarray(rewards, dtype=np.float64) / temperature
    weights = np.exp(logits - logits.max())
    return weights / weights.sum()


def top_k(rewards: np.ndarray, k: int) -> np.ndarray:
    """Weight 1/K on the K highest rewards (ties: the earlier member), 0 elsewhere."""
    rewards = np.asarray(rewards, dtype=np.float64)
    k = min(k, rewards.size)
    weights = np.zeros_like(rewards)
    weights[np.argsort(-rewards, kind="stable")[:k]] = 1.0 / k
    return weights


def shape(rewards: np.ndarray, how: Shaping, temperature: float = 1.0, k: int = 1) -> np.ndarray:
    """Apply the named shaping (`temperature` for softmax, `k` for top_k)."""
    if how == "softmax":
        return softmax(rewards, temperature)
    if how == "top_k":
        return top_k(rewards, k)
    return {"zscore": zscore, "centered_ranks": centered_ranks, "centered": centered}[how](rewards)
