"""F-GRPO against TRL's own GRPO advantages, on the tiny model: gamma = 0 is GRPO bit for bit,
gamma > 0 scales each group by the hand-computed (1 - mu_hat)^gamma with mu_hat from correctness
alone, also when a group's rollouts sit on two processes; and a run through the harness."""

import mlflow
import pytest
import torch
import trl.trainer.grpo_trainer as trl_grpo
from accelerate import Accelerator
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from core import meters, models
from core.outputs import read_json
from methods.fgrpo import focal_trainer

FGRPOTrainer = focal_trainer()

G = 4
# Four groups of G rollouts: mu_hat = 1/4, 3/4, 0 and 1. The format term varies within groups,
# so the summed reward (weights 1 and 1) and GRPO's advantages are not a function of correctness,
# and a success rate read off the reward would be wrong (the all-correct group scores 1 and 2).
CORRECT = [1, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1]
FORMAT = [0, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1]
MU_HAT = [1 / 4, 3 / 4, 0, 1]


def correctness(completions, correct, **_):
    return correct


def format_term(completions, formatted, **_):
    return formatted


def trainer(trainer_class, model_dir, tmp_path, **kwargs):
    """A trainer in training mode on a fresh tiny model (TRL patches the model it is given)."""
    model, tokenizer = models.load(model_dir)
    meters.Meters().attach(model)
    args = GRPOConfig(output_dir=str(tmp_path / "trl"), num_generations=G, per_device_train_batch_size=G,
                      max_completion_length=3, reward_weights=[1.0, 1.0], report_to=[], use_cpu=True, bf16=False,
                      gradient_checkpointing=False, seed=0, disable_tqdm=True)
    dataset = Dataset.from_dict({"prompt": ["1 + 1 ="] * G, "correct": [0] * G, "formatted": [0] * G})
    if trainer_class is not GRPOTrainer:  # the harness's subclasses report a non-finite loss to the run
        kwargs["skip_nonfinite"] = pytest.fail
    built = trainer_class(model=model, reward_funcs=[correctness, format_term], args=args, train_dataset=dataset,
                          processing_class=tokenizer, **kwargs)
    built.model.train()
    return built


def advantages(built, correct, formatted) -> torch.Tensor:
    """The advantages TRL's `_generate_and_score_completions` returns for rollouts with these rewards."""
    inputs = [{"prompt": "1 + 1 =", "correct": float(c), "formatted": float(f)} for c, f in zip(correct, formatted)]
    torch.manual_seed(0)
    return built._generate_and_score_completions(inputs)["advantages"]


@pytest.fixture(scope="module")
def grpo_advantages(tiny_model_dir, tmp_path_factory):
    return advantages(trainer(GRPOTrainer, tiny_model_dir, tmp_path_factory.mktemp("grpo")), CORRECT, FORMAT)


def test_gamma_zero_reproduces_trl_grpo_advantages_bit_for_bit(grpo_advantages, tiny_model_dir, tmp_path):
    assert grpo_advantages.abs().sum() > 0
    assert torch.equal(advantages(trainer(FGRPOTrainer, tiny_model_dir, tmp_path, gamma=0.0), CORRECT, FORMAT),
                       grpo_advantages)


@pytest.mark.parametrize("gamma", [0.5, 1.0, 2.0])
def test_gamma_scales_each_group_by_one_minus_its_success_rate(grpo_advantages, tiny_model_dir, tmp_path, gamma):
    focal = torch.tensor([(1 - mu) ** gamma for mu in MU_HAT]).repeat_interleave(G)
    scaled = advantages(trainer(FGRPOTrainer, tiny_model_dir, tmp_path, gamma=gamma), CORRECT, FORMAT)
    assert torch.allclose(scaled, grpo_advantages * focal, rtol=1e-6, atol=0)
    assert torch.equal(scaled[12:], torch.zeros(G)) and grpo_advantages[12:].abs().sum() > 0, \
        "the all-correct group is silenced although its format terms differ"


# Two processes of 6 rollouts each: process 0 holds group 0 and half of group 1, this process
# (1) the other half of group 1 and group 2. Group 1 is 3 of 4 correct across both processes,
# group 2 is 1 of 4; this process's own half of group 1 alone would say 1 of 2.
OTHER_CORRECT, OTHER_FORMAT = [1, 0, 0, 0, 1, 1], [0, 1, 1, 0, 1, 0]
LOCAL_CORRECT, LOCAL_FORMAT = [1, 0, 0, 1, 0, 0], [1, 1, 0, 0, 1, 1]


def as_process_one_of_two(monkeypatch):
    """TRL's view of process 1 of 2: `gather` (of the reward columns) puts process 0's rollouts
    first, and the process index used to slice the gathered advantages is 1."""
    other = torch.tensor([OTHER_CORRECT, OTHER_FORMAT], dtype=torch.float32).T
    monkeypatch.setattr(trl_grpo, "gather", lambda local: torch.cat([other.to(local.device), local]))
    monkeypatch.setattr(Accelerator, "process_index", property(lambda self: 1))


@pytest.mark.parametrize("gamma", [0.0, 0.5])
def test_groups_spread_across_processes_use_the_gathered_success_rate(tiny_model_dir, tmp_path, monkeypatch, gamma):
    as_process_one_of_two(monkeypatch)
    grpo = advantages(trainer(GRPOTrainer, tiny_model_dir, tmp_path), LOCAL_CORRECT, LOCAL_FORMAT)
    scaled = advantages(trainer(FGRPOTrainer, tiny_model_dir, tmp_path, gamma=gamma), LOCAL_CORRECT, LOCAL_FORMAT)
    assert grpo.shape == (6,) and grpo.abs().sum() > 0
    focal = torch.tensor([(1 - 3 / 4) ** gamma] * 2 + [(1 - 1 / 4) ** gamma] * 4)
    if gamma == 0:
        assert torch.equal(scaled, grpo)
    else:
        assert torch.allclose(scaled, grpo * focal, rtol=1e-6, atol=0)


def test_fgrpo_needs_a_correctness_reward(tiny_model_dir, tmp_path):
    model, tokenizer = models.load(tiny_model_dir)
    args = GRPOConfig(output_dir=str(tmp_path), num_generations=G, per_device_train_batch_size=G, report_to=[],
                      use_cpu=True, bf16=False)
    with pytest.raises(ValueError, match="named 'correctness'"):
        FGRPOTrainer(model=model, reward_funcs=[format_term], args=args, processing_class=tokenizer, gamma=0.5,
                     train_dataset=Dataset.from_dict({"prompt": ["a"] * G}), skip_nonfinite=pytest.fail)


@pytest.mark.parametrize("workdir", [("fgrpo", {"steps": 1, "prompts_per_step": 2, "num_generations": 2,
                                                "micro_batch_size": 4, "gradient_checkpointing": False,
                                                "gamma": 0.5})], indirect=True)
def test_a_step_through_the_harness_logs_the_focal_weight_beside_the_meters(workdir):
    artifact = workdir.train()
    logged = mlflow.MlflowClient().get_run(read_json(artifact)["run_id"]).data.metrics
    assert 0 <= logged["focal_weight/mean"] <= 1 and logged["forward_passes"] == 2 * 2 * 2
    assert read_json(artifact.parent / "metrics.json")["meters"]["backward_passes"] == 2 * 2
