"""Every method learns through the harness: on the tiny model, with a reward it can learn, each
registered method's artifact, evaluated exactly as every result is, scores above the base model.

This proves that the weights a method trains are the weights that get evaluated (an artifact
that dropped the update, a seed list rebuilt with other noise, an adapter never loaded would
all score the base model's reward). The reward is a synthetic task, `Target`: the share of a
completion's characters whose code point is odd. The tiny random model greedily writes
newlines (code point 10), so the base model scores 0, while any change of its argmax is a coin
flip per character and a reference solution of odd characters can be imitated: every family
of method (loss, rollout reward, population search, policy gradient) has a signal."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from core import config, models
from core.outputs import write_json
from evals.tasks import TASKS
from jobs import evaluate as evaluation
from jobs import tracking
from jobs import train as training
from methods import METHODS
from synthetic import Target, write_target_data

SFT = {"lora_rank": 4, "lora_alpha": 8.0, "target_modules": ["q_proj", "v_proj"], "sft_steps": 20,
       "sft_batch_size": 4, "sft_lr": 1e-2}
ZO = {"steps": 60, "batch_size": 4, "lr": 1e-2, "eps": 1e-3, "eval_every": 30, "heldout_size": 4}
ES = {"steps": 3, "batch_size": 4, "population_size": 4, "sigma": 0.05, "alpha": 0.2, "rho": 1e-3}
RL = {"steps": 4, "prompts_per_step": 2, "num_generations": 4, "micro_batch_size": 8, "learning_rate": 1e-2,
      "gradient_checkpointing": False}
BUDGETS = {
    "mezo": ZO,
    "sazo": {**ZO, "warmup_steps": 2},
    "essam": ES,
    "essam_f": {**ES, "sam_population_size": 2},
    "randopt": {"population": 8, "sigmas": [0.05], "top_k": 3, "support_size": 4},
    "corp": {"population": 8, "sigmas": [0.05], "support_size": 4, "probe_size": 4, "q_grid": [0.5],
             "beta_grid": [10.0], "scale_grid": [1.0, 2.0, 4.0], "rounds": 0},
    "sft": SFT,
    "essa": {**SFT, "generations": 2, "population_size": 4, "batch_size": 4},
    "grpo": RL,
    "fgrpo": {**RL, "gamma": 0.5},
}
"""Small budgets at which each method learns the task: learning rates and sigmas far above the
papers', because a tiny random model's near-flat logits need a large move to change its argmax.
A method registered without a budget here runs with its embedded-default settings
(config/config.yaml), so it is covered, and its failure says where to give it one."""


def embedded_settings(method: str) -> dict:
    with open(config.REPO / "config" / "config.yaml") as fh:
        return yaml.safe_load(fh)["methods"].get(method) or {}


@pytest.fixture
def learning(tmp_path, monkeypatch, tiny_model_dir):
    """run(method, settings) trains on `Target` and returns the evaluated greedy reward."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(TASKS, "target", Target())
    data_dir = write_target_data(Path("results/data/target"))
    models.prepare(str(tiny_model_dir), Path("results/model"))
    base_cfg = config.Config(
        name="learning", model=str(tiny_model_dir), dtype="float32", sampler="torch", seeds=[0],
        tasks={"target": config.TaskConfig()},
        evaluation=config.EvaluationConfig(samples=1, max_new_tokens=12, batch_size=8, bootstrap_samples=20,
                                           crosscheck=False),
        training=config.TrainingConfig(max_new_tokens=12, checkpoint_every=1000),
    )
    write_json(Path("results/tracking.json"), tracking.init(base_cfg))

    def run(method: str, settings: dict) -> float:
        cfg = dataclasses.replace(base_cfg, methods={method: METHODS[method].config(**settings)})
        out = Path(f"results/train/{method}/target/seed0/artifact.json")
        common = dict(data_dir=data_dir, tracking_file=Path("results/tracking.json"))
        training.train(cfg, method, "target", 0, model_manifest=Path("results/model/manifest.json"), out=out, **common)
        result = evaluation.evaluate(cfg, method, "target", 0, artifact_file=out,
                                     out=Path(f"results/eval/{method}/target/seed0/metrics.json"), **common)
        return result["greedy"]["value"]

    return run


@pytest.mark.parametrize("method", sorted(set(METHODS) - {"base"}))
def test_every_method_learns_through_the_harness(learning, method):
    base = learning("base", {})
    trained = learning(method, BUDGETS[method] if method in BUDGETS else embedded_settings(method))
    assert trained > base, (f"{method}: evaluated reward {trained:.3f} does not beat the base model's {base:.3f}"
                            + ("" if method in BUDGETS else "; give it a learning budget in BUDGETS"))
