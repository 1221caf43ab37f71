"""ESSA: the singular-value space against hand-checkable identities, CMA-ES over it on a function
of s known in closed form, and the tiny model through the harness: the SFT warm start lowers
the training loss and is reported as its own stage, its self-sampling is metered, the `sft`
control is that stage exactly, the search adds no backward pass, the adapter evaluates, and the
same seed gives the same adapter, also after a resume."""

import dataclasses
import pickle
import shutil
from pathlib import Path
from types import SimpleNamespace

import mlflow
import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from conftest import assert_as_planned, killed_at_step
from core import meters, models, spaces
from core.errors import NogradError
from core.outputs import read_json
from jobs import evaluate as evaluation
from jobs import train as training
from methods import METHODS
from methods.essa import ESSAConfig, generation, new_search, queries
from methods.sft import SFTConfig


def adapted(model_dir):
    """The tiny model with a random (B != 0) rank-2 adapter on q_proj and v_proj of its 2 layers."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    model, _ = models.load(model_dir)
    return get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False))


IDS = torch.tensor([[1, 5, 9, 2, 7, 3]])


def logits(model):
    with torch.no_grad():
        return model(input_ids=IDS).logits


def test_spaces_list_their_tensors_and_the_singular_values_have_2r_per_adapted_matrix(tiny_model_dir):
    model = adapted(tiny_model_dir)
    lora = spaces.lora(model)
    assert [tuple(w.shape) for w in lora] == [(2, 32), (32, 2), (2, 32), (16, 2)] * 2, "A then B, q then v, per layer"
    assert len(spaces.full(model)) == len(list(model.parameters()))
    assert spaces.SingularValues(model).dimension == 4 * 2 * 2, "4 adapted matrices x 2r"
    assert spaces.SingularValues(model, "product").dimension == 4 * 2
    assert spaces.SingularValues(model, fraction=0.5).dimension == 4 * 2 * 1


@pytest.mark.parametrize("decompose", ["each", "product"])
def test_singular_values_drive_the_adapter_and_restore_it_exactly(tiny_model_dir, decompose):
    """Exactly: an element of 1e-12 in a matrix of norm ~1 is restored bit for bit, which the
    plain reconstruction U diag(s0) V^T (off by the SVD's rounding, ~1e-16) would not do."""
    model = adapted(tiny_model_dir)
    with torch.no_grad():
        spaces.lora(model)[1][0, 0] = 1e-12
    before, original = logits(model), [w.detach().clone() for w in spaces.lora(model)]
    space = spaces.SingularValues(model, decompose)
    x0 = space.get()
    x = x0 * np.random.default_rng(0).uniform(0.5, 1.5, x0.size)
    space.set(x)
    assert np.array_equal(space.get(), x), "get after set returns the vector"
    assert (logits(model) - before).abs().max() > 1e-4, "perturbing s changes the output"
    # The rewritten matrices' singular values are s (each), or the product's are (product).
    per_layer = list(zip(spaces.lora(model)[::2], spaces.lora(model)[1::2]))
    matrices = [w for pair in per_layer for w in pair] if decompose == "each" else [B @ A for A, B in per_layer]
    for matrix, s in zip(matrices, space.tensors):
        top = torch.linalg.svdvals(matrix.double())[: len(s)]  # BA is out x in, of rank r
        assert torch.allclose(top, s.sort(descending=True).values, atol=1e-6)
    space.set(x0)
    assert all(torch.equal(w, o) for w, o in zip(spaces.lora(model), original)), "s0 gives the adapter bit for bit"
    assert torch.equal(logits(model), before)


def test_cma_es_over_singular_values_finds_the_optimum_of_a_known_function(tiny_model_dir):
    """Reward = -sum ||W - W*||_F^2 over the rewritten matrices, with W* the adapter at s*. As
    U and V have orthonormal columns, this is -||s - s*||^2 exactly: a sphere in 16 dimensions,
    read from the model's weights. From ||x0 - s*|| = 0.5, 120 generations of the default
    population (12) bring the CMA-ES mean within 1e-3 of s*."""
    model = adapted(tiny_model_dir)
    space = spaces.SingularValues(model)
    x0 = space.get()
    direction = np.random.default_rng(1).standard_normal(x0.size)
    target = x0 + 0.5 * direction / np.linalg.norm(direction)
    space.set(target)
    optimum = [w.detach().double().clone() for w in space.weights]

    def reward():
        return -sum(float(((w.detach().double() - o) ** 2).sum()) for w, o in zip(space.weights, optimum))

    space.set(x0)
    assert reward() == pytest.approx(-0.25, rel=1e-4)
    es = new_search(x0, ESSAConfig(), seed=0)
    assert es.popsize == 4 + int(3 * np.log(16))
    def score(candidates):
        scores = []
        for x in candidates:
            space.set(x)
            scores.append(reward())
        return scores

    for _ in range(120):
        rewards = generation(es, space, score)
    assert np.array_equal(space.get(), es.mean), "the adapter is left at the CMA-ES mean"
    assert np.linalg.norm(es.mean - target) < 1e-3
    assert rewards.max() > -1e-5


@pytest.mark.parametrize("decompose", ["each", "product"])
def test_a_population_of_adapters_answers_in_one_batch_as_each_member_alone(tiny_model_dir, decompose):
    """Each row of a mixed-adapter batch gets its own candidate's completion: the batched
    population gives the per-member loop's greedy completions, and leaves the adapter as it was."""
    from core.sampler import SamplingParams, sample

    model = adapted(tiny_model_dir)
    _, tokenizer = models.load(tiny_model_dir)
    meters.Meters().attach(model)
    with torch.no_grad():  # weights large enough that a small change of s changes the completion
        for name, param in model.named_parameters():
            if "norm" not in name:
                param.mul_(10)
    space = spaces.SingularValues(model, decompose)
    original = [w.detach().clone() for w in spaces.lora(model)]
    x0 = space.get()
    candidates = [x0 * np.random.default_rng(j).uniform(0, 3, x0.size) for j in range(4)]
    prompts, params = ["a b", "What is 1 + 2?", "c"], SamplingParams(max_new_tokens=12, batch_size=5)
    # One token in eight ends a completion, so rows leave the batch at different steps.
    model.generation_config.eos_token_id = list(range(0, len(tokenizer), 8))
    alone = []
    for x in candidates:
        space.set(x)
        alone += [row[0] for row in sample(model, tokenizer, prompts, params)]
    space.set(x0)
    assert len({c.text for c in alone}) > len(prompts), "the candidates must answer differently"
    assert len({c.tokens for c in alone if c.finished}) > 1 and not all(c.finished for c in alone)
    with space.population(model, candidates) as adapters:
        together = sample(model, tokenizer, prompts * len(adapters), params,
                          adapters=[name for name in adapters for _ in prompts])
    assert [row[0] for row in together] == alone
    assert list(model.peft_config) == ["default"], "the population's adapters are deleted"
    assert all(torch.equal(w, o) for w, o in zip(spaces.lora(model), original))


def test_a_pickled_search_draws_the_same_candidates_whatever_numpy_global_state():
    es = new_search(np.ones(6), ESSAConfig(population_size=5), seed=3)
    for _ in range(2):
        candidates = es.ask()
        es.tell(candidates, [float(np.sum(x**2)) for x in candidates])
    restored = pickle.loads(pickle.dumps(es))
    np.random.seed(123)  # other code using numpy's global generator must not change the draws
    assert np.array_equal(np.array(es.ask()), np.array(restored.ask()))


# ---------------------------------------------------------------- the tiny model through the harness

SETTINGS = dict(lora_rank=2, lora_alpha=4.0, target_modules=["q_proj", "v_proj"], sft_steps=3, sft_batch_size=2,
                sft_lr=0.1, generations=3, population_size=3, batch_size=1)
"""Small enough for seconds; checkpoints (every 2 steps) fall after SFT step 1 and after generation 1."""


@pytest.fixture
def essa(workdir):
    """conftest's prepared directory running ESSA jobs; the run config is built from ESSAConfig
    directly, so the test does not depend on config/schema.yaml having been regenerated."""
    common = dict(data_dir=Path("results/data/gsm8k"), tracking_file=Path("results/tracking.json"))

    def run_config(settings, method="essa"):
        merged = {**SETTINGS, **settings}
        if method == "sft":  # the warm-start settings only, as config.yaml gives them to both
            merged = {f.name: merged[f.name] for f in dataclasses.fields(SFTConfig) if f.name in merged}
        return dataclasses.replace(workdir.config, methods={method: METHODS[method].config(**merged)})

    def train(out="results/train/essa/gsm8k/seed0/artifact.json", method="essa", **settings):
        training.train(run_config(settings, method), method, "gsm8k", 0,
                       model_manifest=Path("results/model/manifest.json"), out=Path(out), **common)
        return Path(out)

    def evaluate(artifact):
        return evaluation.evaluate(run_config({}), "essa", "gsm8k", 0, artifact_file=Path(artifact),
                                   out=Path(artifact).parent / "eval.json", **common)

    return SimpleNamespace(train=train, evaluate=evaluate)


def adapter(artifact: Path) -> dict:
    return load_file(Path(read_json(artifact)["path"]) / "adapter_model.safetensors")


def test_warm_start_lowers_the_loss_is_its_own_stage_and_the_adapter_evaluates(essa):
    artifact = essa.train(sft_batch_size=8)  # the whole split of 8: successive SFT losses are comparable
    metrics = read_json(artifact.parent / "metrics.json")
    history, stages = metrics["history"], metrics["stages"]
    assert [h["step"] for h in history] == list(range(3 + 3)), "search steps continue the SFT's"
    losses = [h["loss"] for h in history[:3]]
    # The tiny random model's logits are nearly flat (loss ~ ln 384 = 5.95) and move little per step.
    assert losses[0] > losses[1] > losses[2] and losses[2] < losses[0] - 0.03, f"SFT did not lower its loss: {losses}"
    assert stages["sft"]["backward_passes"] == 3 * 8 and stages["sft"]["sequences_generated"] == 0
    assert stages["search"]["backward_passes"] == 0, "the search is inference only"
    assert stages["search"]["sequences_generated"] == 3 * 3 * 1, "generations x lambda x batch greedy rollouts"
    logged = mlflow.get_run(metrics["run_id"]).data.metrics
    assert logged["stage.sft.backward_passes"] == 3 * 8 and logged["stage.search.backward_passes"] == 0
    for h in history[3:]:
        assert h["bytes_exchanged"] == 4 * 3 * (4 * 2 * 2 + 1), "4 lambda (d + 1), d = 4 matrices x 2r"
        assert h["reward_best"] >= h["reward"] and h["sigma"] > 0
    assert read_json(artifact)["kind"] == "adapter"
    result = essa.evaluate(artifact)
    assert result["inference_passes"] == 1 and result["problems"] == 2


def test_without_solutions_the_model_own_correct_samples_are_the_targets(essa, monkeypatch):
    split = Path("results/data/gsm8k/train.jsonl")
    problems = training.data.read_split(split)
    training.data.write_split(split, [dataclasses.replace(p, solution=None) for p in problems])
    with pytest.raises(NogradError, match="none of the model's 2 samples on each of 8 training problems"):
        essa.train(self_samples=2, generations=0)
    shutil.rmtree("results/work")
    task = training.get_task("gsm8k")
    verified = []

    def is_correct(self, problem, text):
        verified.append(problem.id)
        return problem.id == problems[0].id

    monkeypatch.setattr(type(task), "is_correct", is_correct)
    artifact = essa.train(self_samples=2, generations=0)
    stages = read_json(artifact.parent / "metrics.json")["stages"]
    assert stages["sft"]["sequences_generated"] == 8 * 2, "2 samples per training problem, in the SFT stage"
    assert stages["sft"]["backward_passes"] == 3 * 2, "SFT batches are the 2 accepted samples of problem 0"
    assert len(verified) == stages["sft"]["reward_calls"] == 8 * 2, \
        "each sample verified once, as a metered reward call"
    config = ESSAConfig(**{**SETTINGS, "self_samples": 2, "generations": 0})
    planned = queries(config, training.data.read_split(split), None)
    assert planned.bound, "how many samples are verified is not known before the run"
    assert_as_planned(planned, read_json(artifact.parent / "metrics.json")["meters"])


def test_the_plan_foresees_pycmas_default_population_from_the_models_shape(essa, tiny_model_dir):
    artifact = essa.train(population_size=None, generations=1, sft_steps=1)
    meters = read_json(artifact.parent / "metrics.json")["meters"]
    config = ESSAConfig(**{**SETTINGS, "population_size": None, "generations": 1, "sft_steps": 1})
    planned = queries(config, training.data.read_split(Path("results/data/gsm8k/train.jsonl")),
                      models.skeleton(str(tiny_model_dir)))
    d = 2 * 2 * 2 * 2  # 2 layers x (q, v) x (A, B) x r = 2 singular values
    assert planned.sequences_generated == 4 + int(3 * np.log(d)), "pycma's default population, 4 + 3 ln d"
    assert_as_planned(planned, meters)


def test_same_seed_same_adapter_also_when_interrupted_and_resumed(essa, monkeypatch):
    """A second run of the same seed, killed in the search and resumed from its checkpoint, ends
    with the first run's adapter bit for bit, the same rewards and the same stage meters."""
    reference = adapter(essa.train("results/a/artifact.json"))
    shutil.rmtree("results/work")
    with killed_at_step(monkeypatch, 3 + 2):  # after the search's checkpoint, taken after generation 1
        essa.train("results/b/artifact.json")
    [work] = Path("results/work/train/essa/gsm8k/seed0").iterdir()  # one folder: one config
    saved = torch.load(work / "checkpoint" / "state.pt", weights_only=False)
    assert (saved["stage"], saved["step"]) == ("search", 2) and "sft" in saved["stages"], "resumes inside the search"
    resumed = adapter(essa.train("results/b/artifact.json"))
    assert reference.keys() == resumed.keys() and all(torch.equal(reference[k], resumed[k]) for k in reference)
    first, second = (read_json(Path(f"results/{r}/metrics.json")) for r in "ab")
    logged = [[(h["step"], h.get("loss"), h.get("reward")) for h in m["history"]] for m in (first, second)]
    assert logged[0] == logged[1] and len(logged[0]) == 3 + 3
    for stage in ("sft", "search"):
        for meter in ("backward_passes", "sequences_generated", "forward_passes"):
            assert first["stages"][stage][meter] == second["stages"][stage][meter], (stage, meter)


def test_sft_is_essa_warm_start_alone(essa, monkeypatch):
    """The `sft` control, given ESSA's warm-start settings and seed, ends with the adapter ESSA has
    at the end of its SFT stage (read where the search begins), bit for bit, at the same cost."""
    from peft import get_peft_model_state_dict

    warm, singular_values = {}, spaces.SingularValues

    def at_search_start(model, *args):
        warm.update({k: v.detach().clone() for k, v in get_peft_model_state_dict(model).items()})
        return singular_values(model, *args)

    monkeypatch.setattr(spaces, "SingularValues", at_search_start)
    searched = adapter(essa.train("results/essa/artifact.json"))
    monkeypatch.setattr(spaces, "SingularValues", singular_values)
    control = essa.train("results/sft/artifact.json", method="sft")
    alone = adapter(control)
    assert read_json(control)["kind"] == "adapter"
    assert alone.keys() == warm.keys() and all(torch.equal(alone[k], warm[k]) for k in warm)
    assert all(warm[k].abs().max() > 0 for k in warm if "lora_B" in k), "the warm start trained B away from 0"
    assert any(not torch.equal(searched[k], warm[k]) for k in warm), "ESSA's search moved on from its warm start"
    essa_run, sft_run = (read_json(Path(f"results/{m}/metrics.json")) for m in ("essa", "sft"))
    assert list(sft_run["stages"]) == ["sft"]
    for meter in ("forward_passes", "backward_passes", "tokens_processed", "reward_calls"):
        assert sft_run["stages"]["sft"][meter] == essa_run["stages"]["sft"][meter], meter
    assert [h["loss"] for h in sft_run["history"]] == [h["loss"] for h in essa_run["history"][:3]]
