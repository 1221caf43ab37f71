"""The pass@k estimator against exact combinatorics, and the bootstrap intervals' behaviour, over
problems and over seeds."""

import math
import random
import time
from fractions import Fraction

import numpy as np
import pytest

from evals.passk import default_ks, mean_ci, pass_at_k, pass_at_k_curve


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


def test_one_evaluation_is_the_problem_bootstrap():
    curve = pass_at_k_curve([1, 0, 3, 4, 2], n=4, ks=[1], seed=7)[0]
    assert {k: curve[k] for k in ("value", "low", "high")} == mean_ci(np.array([1, 0, 3, 4, 2]) / 4, seed=7)
    with pytest.raises(ValueError, match="one value per problem"):
        mean_ci(np.zeros((2, 5)))
