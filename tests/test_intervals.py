"""The crossed seeds x problems interval (reports/intervals.py) against a hand computation of the
two-way analysis of variance, and its behaviour where seeds agree, disagree or share work. Its
coverage by simulation is in tests/test_calibration.py."""

import numpy as np
import pytest
from scipy import stats

from reports.intervals import crossed, median_unbiased, ratio_interval


def by_hand(y: np.ndarray) -> tuple[float, float, float]:
    """(mean, variance, degrees of freedom) of one (seeds x problems) matrix, loop by loop."""
    seeds, problems = y.shape
    grand = sum(y[s, p] for s in range(seeds) for p in range(problems)) / (seeds * problems)
    seed_mean = [sum(y[s]) / problems for s in range(seeds)]
    problem_mean = [sum(y[:, p]) / seeds for p in range(problems)]
    ms_problems = seeds * sum((m - grand) ** 2 for m in problem_mean) / (problems - 1)
    ms_seeds = problems * sum((m - grand) ** 2 for m in seed_mean) / (seeds - 1)
    ms_error = sum((y[s, p] - seed_mean[s] - problem_mean[p] + grand) ** 2
                   for s in range(seeds) for p in range(problems)) / ((seeds - 1) * (problems - 1))
    n = seeds * problems
    problem_part, seed_part = ms_problems / n, (ms_seeds - ms_error) / n
    factor = (seeds - 1) / stats.chi2.median(seeds - 1)
    variance = max(problem_part + (factor * seed_part if seed_part > 0 else seed_part), problem_part / 2)
    seed_denominator = (ms_seeds / n) ** 2 / (seeds - 1) + (ms_error / n) ** 2 / ((seeds - 1) * (problems - 1))
    df = variance ** 2 / (problem_part ** 2 / (problems - 1) + (factor ** 2 * seed_denominator if seed_part > 0 else 0))
    return grand, variance, df


@pytest.mark.parametrize("y", [
    [[1, 0, 1, 1, 0, 1], [1, 1, 1, 0, 0, 1], [0, 0, 1, 0, 0, 1]],  # seeds differ: a positive seed term
    [[1, 0, 1, 1, 0, 1, 0, 1], [1, 1, 0, 1, 0, 0, 1, 1], [0, 1, 1, 1, 1, 0, 0, 1]],  # a negative one
])
def test_one_method_against_a_hand_computation(y):
    y = np.array(y, dtype=float)
    estimate = crossed([y], [1.0])
    mean, variance, df = by_hand(y)
    assert estimate.value == pytest.approx(mean)
    assert estimate.se == pytest.approx(variance ** 0.5)
    assert estimate.df == pytest.approx(df)
    low, high = estimate.interval(0.95)
    assert high - mean == pytest.approx(stats.t.ppf(0.975, df) * variance ** 0.5)
    assert median_unbiased(2) == pytest.approx(2 / 1.3862944, rel=1e-6)


def test_seeds_that_agree_add_nothing_and_seeds_that_disagree_widen():
    row = (np.arange(200) < 60).astype(float)
    alone = crossed([row], [1.0])
    assert alone.se == pytest.approx(row.std(ddof=1) / np.sqrt(200)) and alone.df == pytest.approx(199)
    same = crossed([np.stack([row] * 3)], [1.0])
    assert (same.value, same.se, same.df) == pytest.approx((alone.value, alone.se, alone.df))
    apart = crossed([np.stack([(np.arange(200) < k).astype(float) for k in (40, 60, 80)])], [1.0])
    assert apart.se > 2 * alone.se and apart.df < 10, "three seeds that disagree: a seed term of 2 degrees of freedom"


def test_a_difference_pairs_problems_and_keeps_each_methods_seeds_apart():
    rng = np.random.default_rng(5)
    row = (rng.random(300) < 0.5).astype(float)
    a = np.tile(row, (3, 1))
    same = crossed([a, row], [1.0, -1.0])
    assert same.value == 0.0 and same.se == 0.0, "the same scores, problem by problem, differ by nothing"
    seeds = (rng.random((3, 300)) < np.array([[0.2], [0.5], [0.8]])).astype(float)
    apart = crossed([seeds, seeds], [1.0, -1.0])
    assert apart.value == 0.0 and apart.se > 0.1, "two methods' seed k are separate runs by default"
    paired = crossed([seeds, seeds], [1.0, -1.0], groups=["essa", "essa"])
    assert paired.se == 0.0, "paired seed by seed, what seed k shares cancels"
    with pytest.raises(ValueError, match="different numbers of problems"):
        crossed([a, a[:, :10]], [1.0, -1.0])
    with pytest.raises(ValueError, match="one coefficient per term"):
        crossed([a], [1.0, -1.0])
    with pytest.raises(ValueError, match="different numbers of seeds"):
        crossed([a, a[:2]], [1.0, -1.0], groups=[0, 0])


def test_fiellers_interval_is_where_the_margin_holds_zero():
    rng = np.random.default_rng(6)
    base = (rng.random(500) < 0.3).astype(float)
    grpo = np.maximum(base, rng.random((3, 500)) < 0.25)
    ours = np.maximum(base, rng.random((3, 500)) < 0.2)
    terms = [ours, base, grpo]
    low, high = ratio_interval(terms, [1, -1, 0], [0, -1, 1])
    assert low < crossed(terms, [1, -1, 0]).value / crossed(terms, [0, -1, 1]).value < high
    for share in (low - 0.01, low + 0.01, high - 0.01, high + 0.01):
        margin_low, margin_high = crossed(terms, [1, -(1 - share), -share]).interval(0.95)
        assert (margin_low > 0) == (share < low) and (margin_high < 0) == (share > high), share
    assert ratio_interval([ours, base, base], [1, -1, 0], [0, -1, 1]) is None, "no gain to take a share of"


def test_the_report_pairs_the_seeds_of_methods_that_build_on_each_other():
    """ESSA's seed k starts from SFT's seed k (the registry's builds_on): their shared luck cancels."""
    from reports.scores import Intervals

    rng = np.random.default_rng(7)
    luck = np.array([[-0.1], [0.0], [0.1]])
    sft = (rng.random((3, 400)) < 0.4 + luck).astype(float)
    essa = np.maximum(sft, rng.random((3, 400)) < 0.1)
    paired = Intervals(paired=(("essa", "sft"),)).combination([essa, sft], [1.0, -1.0], ("essa", "sft"))
    apart = Intervals().combination([essa, sft], [1.0, -1.0], ("essa", "sft"))
    assert paired["value"] == apart["value"]
    assert paired["estimate"].se < apart["estimate"].se / 2
    assert Intervals(paired=(("essa", "sft"),)).groups([essa, sft[:2]], ("essa", "sft")) == [0, 1], \
        "different seeds cannot be paired"


def test_seeds_that_all_score_alike_add_no_degrees_of_freedom():
    """The base model's three evaluations of one untrained model are one row, three times: the
    margin's interval is the same as with the row once."""
    rng = np.random.default_rng(8)
    base = (rng.random(300) < 0.3).astype(float)
    luck = np.array([[-0.1], [0.0], [0.1]])  # the trained methods' seeds differ
    ours, grpo = ((rng.random((3, 300)) < p + luck).astype(float) for p in (0.5, 0.55))
    once = crossed([ours, base, grpo], [1.0, -0.2, -0.8])
    thrice = crossed([ours, np.stack([base] * 3), grpo], [1.0, -0.2, -0.8])
    assert (thrice.value, thrice.se, thrice.df) == pytest.approx((once.value, once.se, once.df))
