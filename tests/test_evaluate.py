"""The evaluator accepts every artifact kind, votes ensembles by majority, counts an ensemble's
inference passes, and resumes a killed evaluation to the same completions."""

import itertools
import json
import threading
from pathlib import Path

import pytest
import torch

from core import artifacts, models
from core.outputs import read_json, write_json
from core.perturb import combine_, trainable
from core.task import RewardHack, Ungradable
from evals.tasks import get_task
from jobs.evaluate import _vote


def test_majority_vote_over_final_answers():
    gsm8k = get_task("gsm8k")
    assert _vote(gsm8k, ["#### 3", "so #### 5", "#### 5.0"]) == 1, "5 and 5.0 are the same answer"
    assert _vote(gsm8k, ["#### 3", "#### 5"]) == 0, "a tie goes to the first member"
    assert _vote(gsm8k, ["no answer", "#### 7"]) == 1
    assert _vote(gsm8k, ["", ""]) == 0


def test_seed_artifact_rebuilds_the_perturbed_model(tiny_model_dir):
    spec = {"kind": "seeds", "base": str(tiny_model_dir), "terms": [[3, 0.01], [4, -0.02]], "mode": "iid"}
    model, _ = artifacts.load(spec)
    expected, _ = models.load(tiny_model_dir)
    combine_(trainable(expected), [(3, 0.01), (4, -0.02)])
    assert all(torch.equal(a, b) for a, b in zip(trainable(model), trainable(expected)))


def test_adapter_artifact_is_merged_into_the_base(tiny_model_dir, tmp_path):
    from peft import LoraConfig, get_peft_model

    base, _ = models.load(tiny_model_dir)
    peft_model = get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    peft_model.save_pretrained(tmp_path / "adapter")
    ids = torch.tensor([[1, 5, 9, 2]])
    expected = peft_model(input_ids=ids).logits
    merged, _ = artifacts.load({"kind": "adapter", "base": str(tiny_model_dir), "path": str(tmp_path / "adapter")})
    assert torch.allclose(merged(input_ids=ids).logits, expected, atol=1e-5)


def test_ensemble_answers_by_vote_at_k_inference_passes(workdir, tiny_model_dir):
    members = [{"kind": "seeds", "terms": [[seed, 0.01]]} for seed in (1, 2, 3)]
    write_json(Path("ensemble.json"), {"kind": "ensemble", "members": members, "base": str(tiny_model_dir),
                                       "run_id": "r"})
    write_json(Path("metrics.json"), {"trained": False})
    single = workdir.evaluate(workdir.train(), "results/eval/single/metrics.json")
    voted = workdir.evaluate("ensemble.json", "results/eval/ensemble/metrics.json", method="randopt")
    assert single["inference_passes"] == 1 and voted["inference_passes"] == 3
    assert voted["cost"]["eval"]["sequences_generated"] == 3 * single["cost"]["eval"]["sequences_generated"]
    lines = Path("results/eval/ensemble/completions.jsonl").read_text().splitlines()
    assert len(lines) == single["problems"] * (1 + single["samples_per_problem"]), "one voted answer per sample"


def test_killed_evaluation_resumes_to_the_same_completions_and_cost(workdir, monkeypatch):
    """Killed after its first block, or after its last, an evaluation resumes from the blocks cached
    in its work directory to the uninterrupted run's completions and cost; once it has written its
    metrics, its work directory is gone."""
    from jobs import evaluate as evaluation

    artifact = workdir.train()
    first = workdir.evaluate(artifact, "results/eval/a/metrics.json")
    completions = Path("results/eval/a/completions.jsonl").read_text()
    assert list(Path("results/work").iterdir()) == [], "a finished job keeps no work directory"
    generated, allowed = [], [1]
    sample = evaluation.sample

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    def killed_after_allowed_blocks(*args, **kwargs):
        if len(generated) == allowed[0]:
            killed()
        generated.append(1)
        return sample(*args, **kwargs)

    monkeypatch.setattr(evaluation, "sample", killed_after_allowed_blocks)
    with pytest.raises(KeyboardInterrupt):
        workdir.evaluate(artifact, "results/eval/b/metrics.json")
    assert not Path("results/eval/b/metrics.json").exists()
    [work] = Path("results/work/eval/mezo/gsm8k/seed0").iterdir()  # one folder: one config
    assert len((work / "generations.jsonl").read_text().splitlines()) == 1, "the first block, cached"
    generated.clear()
    allowed[0] = 99
    resumed = workdir.evaluate(artifact, "results/eval/b/metrics.json")
    assert len(generated) == 1, "only the block the kill lost is generated again"
    assert not work.exists(), "the resumed evaluation, finished, removed its work directory"
    counted = ("sequences_generated", "tokens_generated", "forward_passes", "tokens_processed", "reward_calls")
    assert {k: resumed["cost"]["eval"][k] for k in counted} == {k: first["cost"]["eval"][k] for k in counted}, (
        "a resumed evaluation reports what the whole evaluation cost, cached blocks included")
    assert Path("results/eval/b/completions.jsonl").read_text() == completions
    assert resumed["pass_at_k"] == first["pass_at_k"] and resumed["greedy"] == first["greedy"]

    # Killed after generating every block, as it writes its completions.
    write = evaluation.atomic_path
    monkeypatch.setattr(evaluation, "atomic_path", killed)
    with pytest.raises(KeyboardInterrupt):
        workdir.evaluate(artifact, "results/eval/c/metrics.json")
    monkeypatch.setattr(evaluation, "atomic_path", write)
    blocks = [json.loads(line) for line in (work / "generations.jsonl").read_text().splitlines()]
    generated.clear()
    again = workdir.evaluate(artifact, "results/eval/c/metrics.json")
    assert generated == [], "cached blocks are not generated again"
    assert again["cost"]["eval"]["time_generate_s"] == pytest.approx(
        sum(block["spent"]["seconds"]["generate"] for block in blocks)), "their generation time is added back"
    assert {k: again["cost"]["eval"][k] for k in counted} == {k: first["cost"]["eval"][k] for k in counted}
    assert Path("results/eval/c/completions.jsonl").read_text() == completions
    assert [json.loads(line)["mode"] for line in completions.splitlines()][:1] == ["greedy"]
    assert read_json("results/eval/a/metrics.json")["problems"] == 2


@pytest.mark.parametrize("workdir", [("base", {})], indirect=True)
def test_evaluation_scores_refused_completions_0_and_counts_each_by_its_fault(workdir, monkeypatch):
    task = type(get_task("gsm8k"))
    calls, lock = itertools.count(), threading.Lock()  # the evaluator grades from a thread pool

    def refusing(self, problem, completion):
        with lock:
            call = next(calls)
        if call % 3 == 0:
            raise RewardHack("returned a subclass of int")
        if call % 3 == 1:
            raise Ungradable("took longer than its limit")
        return True

    monkeypatch.setattr(task, "is_correct", refusing)
    result = workdir.evaluate(workdir.train())
    graded = result["cost"]["eval"]["reward_calls"]
    assert graded == result["problems"] * (1 + result["samples_per_problem"]) == next(calls)
    assert result["cost"]["eval"]["reward_hacks"] == len(range(0, graded, 3))
    assert result["cost"]["eval"]["reward_errors"] == len(range(1, graded, 3))
    correct = sum(json.loads(line)["correct"] for line in Path("results/eval/base/gsm8k/seed0/completions.jsonl")
                  .read_text().splitlines())
    assert correct == len(range(2, graded, 3)), "refused completions score 0, the others as the verifier says"
