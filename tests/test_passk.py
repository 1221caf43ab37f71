"""The pass@k estimator against exact combinatorics, and the bootstrap intervals' behaviour, over
problems and over seeds."""

import math
import random
import time
from fractions import Fraction

import numpy as np
import pytest

from evals.passk import combination_ci, default_ks, mean_ci, pass_at_k, pass_at_k_curve


def exact_pass_at_k(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def test_matches_exact_combinatorics_on_random_inputs():
    rng = random.Random(0)
    cases = [(256, rng.randint(0, 256), rng.randint(1, 256)) for _ in range(200)]
    for _ in range(300):
        n = rng.randint(1, 64)
        cases.append((n, rng.randint(0, n), rng.randint(1, n)))
    for n, c, k in cases:
        exact = float(exact_pass_at_k(n, c, k))
        assert pass_at_k(n, c, k) == pytest.approx(exact, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("n", [1, 7, 16, 256])
def test_edge_cases(n):
    for k in range(1, n + 1):
        assert pass_at_k(n, 0, k) == 0.0
        assert pass_at_k(n, n, k) == 1.0
    # Fewer wrong samples than k: every draw of k contains a correct one.
    c = max(n - 3, 0)
    for k in range(n - c + 1, n + 1):
        assert pass_at_k(n, c, k) == 1.0


def test_pass_at_1_is_the_fraction_correct():
    for n in (1, 5, 16, 256):
        for c in range(n + 1):
            assert pass_at_k(n, c, 1) == pytest.approx(c / n, abs=1e-15)


@pytest.mark.parametrize("n, c, k", [(4, 1, 5), (4, 5, 1), (4, 1, 0), (4, -1, 1)])
def test_invalid_arguments_raise(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_curve_k_above_n_raises():
    with pytest.raises(ValueError):
        pass_at_k_curve([1, 2], n=4, ks=[1, 8])


def test_default_ks():
    assert default_ks(1) == [1]
    assert default_ks(16) == [1, 2, 4, 8, 16]
    assert default_ks(256) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert default_ks(12) == [1, 2, 4, 8, 12]


def test_curve_is_monotone_and_intervals_contain_value():
    rng = np.random.default_rng(1)
    correct = rng.binomial(16, rng.beta(0.3, 2.0, size=200))
    curve = pass_at_k_curve(correct, n=16)
    assert [row["k"] for row in curve] == [1, 2, 4, 8, 16]
    values = [row["value"] for row in curve]
    assert values == sorted(values)
    assert values[0] == pytest.approx(correct.mean() / 16)
    for row in curve:
        assert 0.0 <= row["low"] <= row["value"] <= row["high"] <= 1.0
        assert row["low"] < row["high"]


def test_interval_shrinks_with_more_problems():
    rng = np.random.default_rng(2)

    def width(num_problems):
        correct = rng.binomial(8, 0.3, size=num_problems)
        row = pass_at_k_curve(correct, n=8, ks=[1])[0]
        return row["high"] - row["low"]

    assert width(1000) < width(100) / 2


def test_deterministic_for_a_seed():
    correct = [0, 3, 8, 1, 5, 2, 0, 7]
    assert pass_at_k_curve(correct, 8, seed=3) == pass_at_k_curve(correct, 8, seed=3)
    assert pass_at_k_curve(correct, 8, seed=3) != pass_at_k_curve(correct, 8, seed=4)
    assert mean_ci([0, 1, 1, 0, 1], seed=5) == mean_ci([0, 1, 1, 0, 1], seed=5)


def test_mean_ci():
    result = mean_ci([1.0, 0.0, 0.0, 1.0] * 25)
    assert result["value"] == 0.5
    assert result["low"] < 0.5 < result["high"]
    assert mean_ci([0.0] * 10) == {"value": 0.0, "low": 0.0, "high": 0.0}
    with pytest.raises(ValueError):
        mean_ci([])


def test_full_scale_curve_is_fast():
    correct = np.random.default_rng(3).integers(0, 257, size=500)
    start = time.perf_counter()
    curve = pass_at_k_curve(correct, n=256, bootstrap_samples=1000)
    assert len(curve) == 9
    assert time.perf_counter() - start < 2.0


def test_one_seed_is_the_problem_bootstrap():
    values = np.random.default_rng(4).random(50)
    assert mean_ci(values[None, :], seed=7) == mean_ci(values, seed=7)
    assert combination_ci([values], [1.0], seed=7) == mean_ci(values, seed=7)
    curve = pass_at_k_curve([1, 0, 3, 4, 2], n=4, ks=[1], seed=7)[0]
    assert {k: curve[k] for k in ("value", "low", "high")} == mean_ci(np.array([1, 0, 3, 4, 2]) / 4, seed=7)


def test_seeds_that_disagree_widen_the_interval():
    # The same 200 problems; one training seed solves 30% of them, another 70%.
    problems = 200
    first = (np.arange(problems) < 60).astype(float)
    second = (np.arange(problems) < 140).astype(float)
    one_seed = mean_ci(first)
    two_seeds = mean_ci(np.stack([first, second]))
    # What an interval over problems alone says of the same data: the per-problem means over seeds.
    problems_only = mean_ci(np.stack([first, second]).mean(axis=0))
    assert two_seeds["value"] == pytest.approx(0.5)
    width = lambda ci: ci["high"] - ci["low"]  # noqa: E731
    assert width(two_seeds) > 2 * width(one_seed)
    assert width(two_seeds) > 2 * width(problems_only), "the seed level must add the seeds' disagreement"
    assert two_seeds["low"] <= 0.35 and two_seeds["high"] >= 0.65
    # Seeds that agree add nothing.
    assert mean_ci(np.stack([first, first, first])) == mean_ci(first)


def test_paired_combination_resamples_problems_once_for_both_terms():
    rng = np.random.default_rng(5)
    row = (rng.random(300) < 0.5).astype(float)
    a = np.tile(row, (3, 1))
    assert combination_ci([a, row], [1.0, -1.0]) == {"value": 0.0, "low": 0.0, "high": 0.0}, \
        "the same scores, problem by problem, differ by nothing in every resample"
    shifted = combination_ci([a[:, ::-1], a], [1.0, -1.0])
    assert shifted["low"] < 0 < shifted["high"], "scores that differ problem by problem keep their spread"
    # Each term's seeds are drawn on their own: two methods' seed k are separate runs.
    seeds = (rng.random((3, 300)) < np.array([[0.2], [0.5], [0.8]])).astype(float)
    apart = combination_ci([seeds, seeds], [1.0, -1.0])
    assert apart["value"] == 0.0 and apart["low"] < -0.1 and apart["high"] > 0.1
    with pytest.raises(ValueError):
        combination_ci([a, a[:, :10]], [1.0, -1.0])
    with pytest.raises(ValueError):
        combination_ci([a], [1.0, -1.0])
