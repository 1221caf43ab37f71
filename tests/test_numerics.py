"""Numerical faults: NaN or Inf in fitness shaping, perturbed weights, losses and updates is found
where it arises and handled as `training.on_nonfinite` says: left out and counted in the
`nonfinite` meter ('skip'), or the run stops with one line ('raise')."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from core import fitness, models
from core.errors import NogradError
from core.outputs import read_json
from core.perturb import all_finite, combine_, moved_finite, perturb_, perturbed, trainable
from jobs import train as training

NAN = math.nan
OVERFLOW = 3e38
"""A perturbation scale near fp32's largest value (3.4e38): a weight moved by more than 1.2 sigma becomes Inf."""


def test_shaping_leaves_out_members_that_are_not_finite_and_finds_no_signal_in_equal_rewards():
    # The statistics are the finite members' (mean 2, std 1), and a NaN member gets no weight.
    assert np.allclose(fitness.zscore([1.0, NAN, 3.0]), [-1, 0, 1], atol=1e-7)
    assert np.array_equal(fitness.centered([1.0, NAN, 3.0]), [-1, 0, 1])
    assert np.array_equal(fitness.centered_ranks([1.0, NAN, 3.0]), [-0.5, 0, 0.5])
    assert np.allclose(fitness.softmax([0.0, NAN, math.log(3)]), [0.25, 0, 0.75])
    assert np.array_equal(fitness.top_k([NAN, 1.0, 2.0, 0.0], 2), [0, 0.5, 0.5, 0])
    assert np.array_equal(fitness.top_k([NAN, 1.0], 2), [0, 1]), "fewer finite members than K share the weight"
    assert np.array_equal(fitness.top_k([NAN, NAN], 1), [0, 0])
    # Equal rewards: no update direction at all, ties sharing their mean rank.
    for rule in (fitness.zscore, fitness.centered, fitness.centered_ranks):
        assert np.array_equal(rule([2.0, 2.0, 2.0]), [0, 0, 0]), rule.__name__
    assert np.array_equal(fitness.centered_ranks([0.2, 0.5, 0.5, 0.9]), [-0.5, 0, 0, 0.5])
    assert np.array_equal(fitness.softmax([1.0, 1.0]), [0.5, 0.5])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_fast_finiteness_check_answers_as_isfinite_does(dtype):
    big = torch.finfo(dtype).max / 2
    cases = {
        "finite": [1.0, -2.0, 3.0],
        "an Inf": [1.0, math.inf, 3.0],
        "a NaN": [1.0, NAN, 3.0],
        "+Inf and -Inf, whose sum is NaN": [math.inf, -math.inf, 0.0],
        "finite elements whose sum overflows": [big, big, big],
    }
    for name, values in cases.items():
        tensor = torch.tensor(values).to(dtype)
        assert all_finite(tensor) == bool(torch.isfinite(tensor).all()), name


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_perturbation_that_would_overflow_is_not_applied_and_the_weights_come_back(tiny_model_dir, dtype):
    model, _ = models.load(str(tiny_model_dir), dtype, "cpu")
    weights = trainable(model)
    before = [w.detach().clone() for w in model.parameters()]
    # float16 overflows past 65504 only when the fp32 master is cast into the model.
    scale = OVERFLOW if dtype == "float32" else 1e6
    with perturbed(weights, [(7, scale)]):
        assert not moved_finite(model)
        assert all(torch.isfinite(w).all() for w in model.parameters()), "no weight is ever made non-finite"
    assert moved_finite(model)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters())), "bit for bit as before"
    with perturbed(weights, [(7, 1e-3)]):
        assert moved_finite(model)


def test_a_lasting_update_that_is_not_finite_stops_with_one_line(tiny_model_dir):
    model, _ = models.load(str(tiny_model_dir), "float32", "cpu")
    weights = trainable(model)
    before = [w.detach().clone() for w in weights]
    with pytest.raises(NogradError, match=r"^an update by a non-finite coefficient \(nan on seed 3\) was refused"):
        combine_(weights, [(2, 0.1), (3, NAN)])
    assert all(torch.equal(a, b) for a, b in zip(before, weights)), "refused before any tensor moved"
    with pytest.raises(NogradError, match=r"^an update made weight tensor 0 non-finite \(overflow\)"):
        perturb_(weights, 3, OVERFLOW)


def _run(workdir, on_nonfinite: str = "skip") -> training.TrainingRun:
    cfg = workdir.config
    cfg = dataclasses.replace(cfg, training=dataclasses.replace(cfg.training, on_nonfinite=on_nonfinite))
    return training.TrainingRun(cfg, "mezo", "gsm8k", 0, read_json(Path("results/model/manifest.json")),
                        Path("results/data/gsm8k"), Path("results/out"), Path("results/scratch"))


def test_a_member_whose_weights_would_overflow_is_skipped_and_counted(workdir):
    run = _run(workdir)
    problems = run.train[:2]
    with perturbed(trainable(run.model), [(7, OVERFLOW)]):
        completions, rewards = run.rollout(problems)
        losses = run.loss(problems)
    assert completions == [[], []] and np.isnan(rewards).all() and rewards.shape == (2, 1)
    assert torch.isnan(losses).all() and losses.shape == (2,)
    assert run.meters.counts["nonfinite"] == 2, "one per member evaluated"
    assert run.meters.counts["forward_passes"] == 0, "a skipped member costs no forward pass"
    assert np.isfinite(run.rollout(problems)[1]).all() and run.meters.counts["nonfinite"] == 2

    stopping = _run(workdir, "raise")
    with perturbed(trainable(stopping.model), [(7, OVERFLOW)]):
        with pytest.raises(NogradError, match=r"^mezo: a perturbed member's weights at step 0 is not finite"):
            stopping.rollout(problems)


def test_the_loss_is_each_solutions_mean_log_likelihood_given_its_prompt(workdir):
    """Run.loss batches problems of different lengths and keeps logits only from the first answer
    token on; by hand, one problem at a time and unpadded, it is the mean of -log p(solution token)."""
    run = _run(workdir)
    problems = run.train[:4]
    eos = run.tokenizer.eos_token or ""
    by_hand = []
    for prompt, problem in zip(run.prompts(problems), problems):
        prompt_ids = run.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        answer_ids = run.tokenizer(problem.solution + eos, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logits = run.model(input_ids=torch.tensor([prompt_ids + answer_ids])).logits[0].float()
        log_p = torch.log_softmax(logits[len(prompt_ids) - 1 : -1], dim=-1)
        by_hand.append(-log_p[torch.arange(len(answer_ids)), torch.tensor(answer_ids)].mean().item())
    lengths = {len(run.tokenizer(p, add_special_tokens=False)["input_ids"]) for p in run.prompts(problems)}
    assert len(lengths) > 1  # the batch pads, and its prompts end at different positions
    assert np.allclose(run.loss(problems).tolist(), by_hand, rtol=1e-5)


def test_a_loss_that_is_not_finite_is_counted_per_problem_or_stops_naming_it(workdir):
    run, stopping = _run(workdir), _run(workdir, "raise")
    for r in (run, stopping):
        with torch.no_grad():
            r.model.model.norm.weight.fill_(math.inf)  # activations overflow: every logit is NaN
    problems = run.train[:2]
    assert torch.isnan(run.loss(problems)).all() and run.meters.counts["nonfinite"] == 2
    with pytest.raises(NogradError, match=rf"^mezo: the loss on problem {problems[0].id} at step 0 is not finite"):
        stopping.loss(problems)


OVERFLOWING = ("mezo", {"steps": 2, "batch_size": 2, "eps": OVERFLOW, "heldout_size": 2, "eval_every": 1})


@pytest.mark.parametrize("workdir", [OVERFLOWING, (*OVERFLOWING, {"training": {"on_nonfinite": "raise"}})],
                         indirect=True, ids=["skip", "raise"])
def test_mezo_skips_steps_whose_members_overflow_or_stops(workdir):
    """MeZO at eps = 3e38: both members of every step overflow. Skipped, the run ends with the
    base model's weights and 2 members counted per step; under 'raise' it stops at step 0."""
    if workdir.config.training.on_nonfinite == "raise":
        with pytest.raises(NogradError, match=r"^mezo: a perturbed member's weights at step 0 is not finite"):
            workdir.train()
        assert not Path("results/train/mezo/gsm8k/seed0/artifact.json").exists()
        return
    artifact = read_json(workdir.train())
    result = read_json(Path("results/train/mezo/gsm8k/seed0/metrics.json"))
    assert result["meters"]["nonfinite"] == 4
    assert [math.isnan(row["loss"]) for row in result["history"] if "loss" in row] == [True, True]
    assert all(math.isfinite(row["heldout_loss"]) for row in result["history"] if "heldout_loss" in row)
    trained, _ = models.load(artifact["path"], "float32", "cpu")
    base, _ = models.load(Path("results/model/manifest.json"), "float32", "cpu")
    assert all(torch.equal(a, b) for a, b in zip(trained.parameters(), base.parameters())), "no update was made"
