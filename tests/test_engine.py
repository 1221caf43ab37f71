"""The shared ES engine: fitness shaping against hand computations, antithetic populations,
and the error of perturbing a real model in place and restoring it."""

import numpy as np
import pytest
import torch

from harness import fitness, models
from harness.perturb import perturb_, population, trainable


def test_fitness_shaping_by_hand():
    rewards = np.array([0.0, 1.0, 1.0, 2.0])
    assert np.allclose(fitness.centered(rewards), [-1, 0, 0, 1])
    assert np.allclose(fitness.zscore(rewards), np.array([-1, 0, 0, 1]) / np.sqrt(0.5))
    assert np.allclose(fitness.centered_ranks(rewards), [-0.5, -1 / 6, 1 / 6, 0.5])
    e = np.exp([0.0, 1.0, 1.0, 2.0])
    assert np.allclose(fitness.softmax(rewards), e / e.sum())
    assert np.allclose(fitness.softmax(rewards, temperature=0.5), e**2 / (e**2).sum())
    assert np.allclose(fitness.top_k(rewards, 2), [0, 0.5, 0, 0.5]), "ties go to the earlier member"
    assert np.allclose(fitness.zscore(np.ones(3)), 0) and np.allclose(fitness.centered_ranks([3.0]), 0)
    assert np.allclose(fitness.shape(rewards, "top_k", k=1), [0, 0, 0, 1])


def test_antithetic_population_pairs_seeds_with_opposite_signs():
    members = population(np.random.default_rng(0), 6, antithetic=True)
    assert [sign for _, sign in members] == [1.0, -1.0] * 3
    assert members[0][0] == members[1][0] and len({seed for seed, _ in members}) == 3
    plain = population(np.random.default_rng(0), 5)
    assert len(plain) == 5 and all(sign == 1.0 for _, sign in plain)
    with pytest.raises(ValueError):
        population(np.random.default_rng(0), 5, antithetic=True)


def test_restore_error_of_in_place_perturbation_is_bounded(tiny_model_dir):
    """theta + sigma z - sigma z differs from theta by float rounding only: at most a few ulps of
    |theta| + |sigma z| per element, measured here on the tiny model in fp32 after 50 rounds."""
    model, _ = models.load(tiny_model_dir)
    params = trainable(model)
    before = [p.detach().clone() for p in params]
    sigma = 1e-3
    for seed in range(50):
        perturb_(params, seed, sigma)
        perturb_(params, seed, -sigma)
    worst = max(((p - b).abs() / (b.abs() + 5 * sigma)).max().item() for p, b in zip(params, before))
    assert worst < 50 * torch.finfo(torch.float32).eps, f"relative restore error {worst:.2e}"
