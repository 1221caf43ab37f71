"""GRPO through TRL's GRPOTrainer on the tiny model: every pass TRL makes is metered, TRL logs
into the harness's MLflow run, LoRA and reference models work, a killed run resumes to the same
model, and a failing verifier stops the run or scores 0 as configured, never a NaN in the loss."""

import dataclasses
import math
import time
from pathlib import Path

import mlflow
import pytest
import torch
from safetensors.torch import load_file
from torch.optim.optimizer import register_optimizer_step_post_hook

from conftest import assert_as_planned, killed_at_step
from core import artifacts
from core.config import RewardConfig
from core.errors import NogradError
from core.outputs import read_json
from evals.tasks import get_task
from jobs import train as training
from jobs import validation
from methods.grpo import GRPOMethodConfig, queries

P, G = 2, 2  # prompts per step, completions per prompt
ONE_STEP = {"steps": 1, "prompts_per_step": P, "num_generations": G, "micro_batch_size": 2,
            "gradient_checkpointing": False}


def train_metrics(artifact: Path) -> dict:
    return read_json(artifact.parent / "metrics.json")


def make_run(workdir, cfg=None) -> training.TrainingRun:
    """A harness Run on the prepared tiny model and gsm8k data, outside any training job."""
    return training.TrainingRun(cfg or workdir.config, "grpo", "gsm8k", 0, read_json("results/model/manifest.json"),
                        Path("results/data/gsm8k"), Path("results/run"), Path("results/work/run"))


def train_with(workdir, cfg) -> Path:
    """One grpo training job of `workdir` under a changed config."""
    out = Path("results/train/grpo/gsm8k/seed0/artifact.json")
    training.train(cfg, "grpo", "gsm8k", 0, model_manifest=Path("results/model/manifest.json"),
                   data_dir=Path("results/data/gsm8k"), tracking_file=Path("results/tracking.json"), out=out)
    return out


@pytest.mark.parametrize("workdir", [("grpo", ONE_STEP)], indirect=True)
def test_a_step_meters_every_pass_and_trl_logs_into_the_harness_run(workdir, monkeypatch):
    from core import sampler

    sampled = []
    decode = sampler.decode
    monkeypatch.setattr(sampler, "decode", lambda *a, **k: sampled.append(a[3]) or decode(*a, **k))
    started = int(time.time() * 1000)
    order = []
    handle = register_optimizer_step_post_hook(lambda *_: order.append("optimizer step"))
    log = training.TrainingRun.log
    monkeypatch.setattr(training.TrainingRun, "log", lambda self, **m: (order.append("meters logged"), log(self, **m)))
    try:
        artifact = workdir.train()
    finally:
        handle.remove()
    assert order == ["optimizer step", "meters logged"], "peak memory must be read after the optimizer step"
    assert sampled == [[0] * G + [1] * G], \
        "rollouts come from the harness's sampler, each group's prompt prefilled once"

    meters = train_metrics(artifact)["meters"]
    rollouts = P * G
    assert meters["forward_passes"] == 2 * rollouts, "one generation and one loss forward per rollout (beta = 0)"
    assert meters["backward_passes"] == rollouts, "TRL's fused LM head: backward counted on the log-probs"
    assert meters["sequences_generated"] == meters["reward_calls"] == rollouts
    assert 0 < meters["tokens_generated"] <= rollouts * workdir.config.training.max_new_tokens
    assert meters["time_generate_s"] > 0 and meters["peak_memory_mb"] > 0 and meters["reward_errors"] == 0
    assert read_json(artifact)["kind"] == "model"

    run = mlflow.MlflowClient().get_run(read_json(artifact)["run_id"])
    logged = run.data.metrics
    for key in ("loss", "reward", "rewards/correctness/mean", "rewards/format/mean", "entropy",
                "completions/mean_length", "completions/clipped_ratio", "clip_ratio/region_mean",
                "forward_passes", "backward_passes", "peak_memory_mb", "final.forward_passes"):
        assert key in logged, key
    assert run.data.params["learning_rate"] == "1e-06" and run.data.params["num_generations"] == str(G)
    assert run.data.params["methods.grpo.steps"] == "1", "TRL's params sit beside the harness's"
    # Runs since this test began: MLflow caches one store per tracking URI, so the relative
    # sqlite URI of earlier tests' working directories may hold their runs too.
    since = mlflow.search_runs(experiment_names=["tiny"], filter_string=f"attributes.start_time >= {started}")
    assert len(since) == 1, "TRL must not open a run of its own"
    steps = {key: [m.step for m in mlflow.MlflowClient().get_metric_history(run.info.run_id, key)]
             for key in ("loss", "forward_passes")}
    assert steps == {"loss": [1], "forward_passes": [0]}, "TRL logs at its global step, the harness at its index"
    (step,) = train_metrics(artifact)["history"]
    assert step["loss"] == logged["loss"] and step["reward"] == logged["reward"], \
        "TRL's loss and reward join the history"


@pytest.mark.parametrize("lora_rank", [0, 2])
@pytest.mark.parametrize("workdir", [("grpo", ONE_STEP)], indirect=True)
def test_a_kl_penalty_meters_the_reference_passes_full_and_lora(workdir, lora_rank):
    settings = {**ONE_STEP, "beta": 0.04, "lora_rank": lora_rank, "lora_alpha": 4.0,
                "lora_target_modules": ["q_proj", "v_proj"], "gradient_checkpointing": True}
    cfg = dataclasses.replace(workdir.config, methods={"grpo": GRPOMethodConfig(**settings)})
    artifact = train_with(workdir, cfg)
    meters = train_metrics(artifact)["meters"]
    assert meters["forward_passes"] == 3 * P * G, "generation, reference log-probs and loss forward; no recompute"
    assert meters["backward_passes"] == P * G
    assert meters["recompute_passes"] == P * G, "gradient checkpointing: the backward re-ran the loss forward"
    assert meters["forward_equivalents"] == 3 * P * G + P * G + 2 * P * G
    assert_as_planned(queries(cfg.methods["grpo"], [], None), meters)
    assert "kl" in mlflow.MlflowClient().get_run(read_json(artifact)["run_id"]).data.metrics
    spec = read_json(artifact)
    assert spec["kind"] == ("adapter" if lora_rank else "model")
    model, _ = artifacts.load(spec)
    assert all(torch.isfinite(p).all() for p in model.parameters())


@pytest.mark.parametrize("workdir", [("grpo", {**ONE_STEP, "steps": 4, "learning_rate": 1e-2})], indirect=True)
def test_a_killed_run_resumes_from_trl_and_harness_checkpoints_to_the_same_model(workdir, monkeypatch):
    import shutil

    # A reward that differs within a group, so that the advantages, and so the updates, are not 0.
    monkeypatch.setattr(type(get_task("gsm8k")), "has_format", lambda self, completion: len(completion) % 2 == 0)

    reference = load_file(Path(read_json(workdir.train("results/a/artifact.json"))["path"]) / "model.safetensors")
    shutil.rmtree("results/work")
    with killed_at_step(monkeypatch, 3):
        workdir.train("results/b/artifact.json")
    assert not Path("results/b/artifact.json").exists(), "a killed job must not leave its output"
    [work] = Path("results/work/train/grpo/gsm8k/seed0").iterdir()  # one folder: one config
    assert (work / "checkpoint" / "state.pt").exists() and (work / "trl" / "checkpoint-2").is_dir()
    resumed = workdir.train("results/b/artifact.json")
    assert [h["step"] for h in train_metrics(resumed)["history"]] == [0, 1, 2, 3]
    assert train_metrics(resumed)["meters"]["backward_passes"] == 4 * P * G, "meters carried across the resume"
    again = load_file(Path(read_json(resumed)["path"]) / "model.safetensors")
    start = load_file(Path(workdir.config.model) / "model.safetensors")
    assert any(not torch.equal(reference[k], start[k]) for k in reference), "training changed nothing"
    assert all(torch.equal(reference[k], again[k]) for k in reference), "resume changed the result"


@pytest.mark.parametrize("failure", [ZeroDivisionError("division by zero\nin the verifier"), float("nan")])
@pytest.mark.parametrize("workdir", [("grpo", ONE_STEP)], indirect=True)
def test_a_failing_verifier_stops_with_one_line_or_scores_zero_and_counts(workdir, monkeypatch, failure):
    def verifier(problem, completion):
        if isinstance(failure, Exception):
            raise failure
        return failure

    run = make_run(workdir)
    problem = run.train[0]
    monkeypatch.setattr(run.task, "is_correct", verifier)
    with pytest.raises(NogradError) as error:
        run.reward(problem, "The answer is 42.\n#### 42")
    message = str(error.value)
    assert "\n" not in message and "task gsm8k" in message and problem.id in message and "#### 42" in message
    assert run.meters.counts["reward_errors"] == 0

    zeroing = make_run(workdir, dataclasses.replace(workdir.config, reward=RewardConfig(on_error="zero")))
    monkeypatch.setattr(zeroing.task, "is_correct", verifier)
    assert zeroing.reward(problem, "#### 42") == 0.0 and zeroing.reward_terms(problem, "#### 42") == (0.0, 0.0)
    assert zeroing.meters.counts["reward_errors"] == 2 and zeroing.meters.counts["reward_calls"] == 2


@pytest.mark.parametrize("workdir", [("grpo", {**ONE_STEP, "learning_rate": 1e-2})], indirect=True)
def test_nan_from_the_verifier_never_reaches_the_loss(workdir, monkeypatch):
    from evals.tasks import get_task

    calls = []

    def half_nan(problem, completion):  # NaN, 1, NaN, 1: a mixed group, so the step has a gradient
        calls.append(completion)
        return float("nan") if len(calls) % 2 else 1.0

    monkeypatch.setattr(get_task("gsm8k"), "is_correct", half_nan)
    with pytest.raises(NogradError, match=r"task gsm8k: reward failed on problem .*verifier returned nan"):
        train_with(workdir, workdir.config)

    calls.clear()
    cfg = dataclasses.replace(workdir.config, reward=RewardConfig(format_weight=0.1, on_error="zero"))
    artifact = train_with(workdir, cfg)
    assert train_metrics(artifact)["meters"]["reward_errors"] == len(calls) // 2 == P * G // 2
    logged = mlflow.MlflowClient().get_run(read_json(artifact)["run_id"]).data.metrics
    assert math.isfinite(logged["loss"]) and logged["rewards/correctness/mean"] == 0.5
    assert logged["grad_norm"] > 0, "the zero-scored completions still gave a learning signal against the others"
    weights = load_file(Path(read_json(artifact)["path"]) / "model.safetensors")
    assert all(torch.isfinite(w).all() for w in weights.values())


@pytest.mark.parametrize("change, message", [
    ({"micro_batch_size": 3}, r"methods.grpo: micro_batch_size \(3\) must divide prompts_per_step x num_generations"),
    ({"num_generations": 1}, r"methods.grpo.num_generations: 1 is less than the minimum of 2"),
])
def test_settings_trl_would_reject_are_refused_by_the_config(change, message):
    with pytest.raises(NogradError, match=message):
        validation.validate({"name": "t", "model": "m", "seeds": [0], "tasks": {"gsm8k": {}},
                         "methods": {"grpo": {**ONE_STEP, **change}}})


@pytest.mark.parametrize("workdir", [("grpo", ONE_STEP)], indirect=True)
def test_more_prompts_per_step_than_training_problems_is_one_clear_line(workdir):
    cfg = dataclasses.replace(workdir.config, methods={"grpo": GRPOMethodConfig(**{**ONE_STEP, "prompts_per_step": 9})})
    with pytest.raises(NogradError, match=r"methods.grpo: prompts_per_step \(9\) must be at most the 8 training"):
        train_with(workdir, cfg)


@pytest.mark.parametrize("workdir", [("grpo", ONE_STEP)], indirect=True)
def test_half_precision_keeps_fp32_master_weights(workdir):
    artifact = train_with(workdir, dataclasses.replace(workdir.config, dtype="bfloat16"))
    weights = load_file(Path(read_json(artifact)["path"]) / "model.safetensors")
    assert {w.dtype for w in weights.values()} == {torch.float32}, "AdamW steps of 1e-6 vanish in bfloat16 weights"
    assert math.isfinite(mlflow.MlflowClient().get_run(read_json(artifact)["run_id"]).data.metrics["loss"])


@pytest.mark.parametrize("workdir", [("grpo", ONE_STEP)], indirect=True)
def test_a_micro_batch_whose_loss_is_not_finite_adds_no_gradient_and_is_counted(workdir, monkeypatch):
    from trl import GRPOTrainer

    compute = GRPOTrainer._compute_loss
    monkeypatch.setattr(GRPOTrainer, "_compute_loss", lambda self, *a, **k: compute(self, *a, **k) * math.nan)
    artifact = workdir.train()
    assert train_metrics(artifact)["meters"]["nonfinite"] == P * G // ONE_STEP["micro_batch_size"]
    trained = artifacts.load(read_json(artifact))[0]
    base = artifacts.load({"kind": "model", "path": read_json("results/model/manifest.json")["path"]})[0]
    assert all(torch.equal(a, b) for a, b in zip(trained.parameters(), base.parameters())), "no update was made"

    stopping = dataclasses.replace(workdir.config, training=dataclasses.replace(workdir.config.training,
                                                                                on_nonfinite="raise"))
    with pytest.raises(NogradError, match=r"^grpo: the loss of a micro-batch at step 0 is not finite"):
        train_with(workdir, stopping)
