"""Grading that cannot hang: verifiers run in a worker process under a wall-clock limit
(evals/grading.py); an answer built to be slow scores 0 and is counted in reward_errors."""

from __future__ import annotations

import math
import time
from types import SimpleNamespace

import pytest

from core import config, meters
from core.task import Problem, Ungradable, graded
from evals import grading
from evals.tasks import get_task
from jobs import train as training

SLOW = r"The answer is \boxed{9^{9^{9^{9}}}}."
"""math-verify tries to evaluate the power tower exactly and never finishes."""
PROBLEM = Problem(id="math/test/0", question="What is 1?", answer="1")


def test_a_call_past_its_limit_is_ungradable_and_the_next_call_gets_a_new_worker():
    assert grading.call(math.sqrt, 16.0) == 4.0
    start = time.monotonic()
    with pytest.raises(Ungradable, match="longer than 0.5 s"):
        grading.call(time.sleep, 30, timeout_s=0.5)
    assert time.monotonic() - start < 5
    assert grading.call(math.sqrt, 9.0) == 3.0


def test_a_failing_verifier_still_raises_its_own_error():
    with pytest.raises(RuntimeError, match="ValueError: math domain error"):
        grading.call(math.sqrt, -1.0)


def test_an_answer_built_to_be_slow_is_ungradable_within_the_limit(monkeypatch):
    monkeypatch.setattr(grading, "TIMEOUT_S", 2.0)
    task = get_task("math")
    assert task.is_correct(PROBLEM, r"\boxed{1}") and not task.is_correct(PROBLEM, r"\boxed{2}")
    start = time.monotonic()
    with pytest.raises(Ungradable):
        task.is_correct(PROBLEM, SLOW)
    assert time.monotonic() - start < 10
    assert graded(task, PROBLEM, SLOW) == (0.0, "reward_errors"), "every caller scores it 0 and counts it"
    assert get_task("gsm8k").is_correct(Problem(id="g", question="q", answer="72"), "#### 72")


def test_training_scores_it_0_and_counts_a_reward_error_even_when_errors_raise(monkeypatch):
    monkeypatch.setattr(grading, "TIMEOUT_S", 2.0)
    cfg = config.Config()
    assert cfg.reward.on_error == "raise"
    run = SimpleNamespace(meters=meters.Meters(), task=get_task("math"), config=cfg)
    assert training.TrainingRun.reward_terms(run, PROBLEM, SLOW) == (0.0, 1.0), "correctness 0; the answer is boxed"
    assert run.meters.counts["reward_errors"] == 1 and run.meters.counts["reward_calls"] == 1
