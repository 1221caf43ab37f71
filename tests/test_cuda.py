"""The harness's CUDA paths, on a machine with a CUDA GPU only (elsewhere, CI included, every test
here skips): the GPUs a job claims (jobs/devices.py) against the real `nvidia-smi -L` and torch,
the GPU peak-memory meter, every registered method trained and evaluated on `device: cuda`, the
fp32 masters of a bf16 model and seeded noise on the GPU, and the sampler's seeded draws and greedy
tokens on the GPU against the CPU's. Each test takes seconds on one GPU."""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import tiny_config
from core import meters, models
from core.outputs import read_json
from core.perturb import combine_, noise, perturbed, trainable
from core.sampler import SamplingParams, decode, sample, stop_ids
from jobs import devices
from methods import METHODS

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason=(
    "CUDA paths (GPU claims against nvidia-smi, GPU peak memory, every method on device cuda, bf16 masters "
    "and noise on the GPU, the sampler on the GPU against the CPU) need a CUDA device"))

REPO = Path(__file__).resolve().parent.parent
PROMPTS = ["a b", "Natalia sold clips to 48 of her friends", "def add(a, b):\n    return", "c", "What is 1 + 2?"]


def python(code: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter, on the repository and this environment's path, without
    CUDA_VISIBLE_DEVICES (every GPU of the machine visible) unless `env` sets it."""
    base = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", code, *args], env={**base, "PYTHONPATH": path, **env},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done


# ---------------------------------------------------------------- (a) one set of GPUs per job

JOB = """
import json, os, sys
from jobs import cli

def probe(args):  # what `nograd train` runs once cli.main has claimed the job's GPUs
    import torch
    print(json.dumps({"visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "count": torch.cuda.device_count(),
                      "computes": torch.ones(2, device="cuda").sum().item() if torch.cuda.device_count() else None}))

cli.cmd_train = probe
cli.main(sys.argv[1:])
"""


def test_the_pool_is_every_gpu_and_a_job_sees_exactly_the_ones_it_claimed(monkeypatch, tmp_path):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    present = int(python("import torch; print(torch.cuda.device_count())").stdout)
    assert present >= 1 and devices.visible() == [str(i) for i in range(present)], "nvidia-smi -L and torch disagree"
    config = json.dumps(tiny_config("model"))
    # cli.main validates the config (importing every method and task, so torch and transformers)
    # before it claims: a claim after anything started CUDA would leave every GPU visible.
    for gpus in sorted({0, 1, present}):
        job = python(JOB, "train", "--config-json", config, "--method", "mezo", "--task", "gsm8k", "--seed", "0",
                     "--gpus", str(gpus), "--model", "m", "--data", "d", "--tracking", "t", "--out", "o",
                     NOGRAD_DEVICE_LOCKS=str(tmp_path / "locks"))
        seen = json.loads(job.stdout.splitlines()[-1])
        assert seen["count"] == gpus, f"claimed {gpus}, torch sees {seen['count']}"
        assert seen["visible"] == ",".join(map(str, range(gpus))), seen
        if gpus:
            assert seen["computes"] == 2.0 and f"holding GPU {seen['visible'].replace(',', ', ')} of" in job.stderr


# ---------------------------------------------------------------- (b) peak GPU memory

SPAN = """
import json, torch
from core.meters import Meters
meter = Meters()
with meter.phase("forward"):
    block = torch.ones(256 * 2**20, dtype=torch.uint8, device="cuda")  # 256 MiB
    inside = meter.snapshot()["peak_memory_mb"]
    del block
print(json.dumps({"inside": inside, "after": meter.snapshot()["peak_memory_mb"]}))
"""


def test_the_peak_memory_meter_reads_the_gpus_high_water_mark():
    """In a fresh process whose only CUDA tensor is 256 MiB. torch.cuda.max_memory_allocated counts
    the bytes of live tensors' blocks (a large block is rounded up to 2 MiB; 256 MiB already is a
    multiple), not the CUDA context or the allocator's cache, so the meter must read 256 MiB, up to
    4 MiB for anything torch allocates on the side. The process's RSS (hundreds of MiB with torch
    and CUDA loaded) or the memory allocated now (0 after the tensor is freed) would fail it."""
    peaks = json.loads(python(SPAN).stdout)
    assert 256 <= peaks["inside"] <= 260, peaks
    assert peaks["after"] == peaks["inside"], "the peak must outlast the tensor"


# ---------------------------------------------------------------- (c) every method on device cuda


def allocated_mb() -> float:
    gc.collect()  # a model of an earlier job that is only garbage would be freed in the middle of the next
    return torch.cuda.memory_allocated() / 2**20


@pytest.mark.parametrize("workdir", [(name, METHODS[name].test_settings, {"device": "cuda"}) for name in METHODS],
                         ids=list(METHODS), indirect=True)
def test_every_method_trains_and_evaluates_on_cuda(workdir):
    [name] = workdir.config.methods
    weights_mb = sum(p.numel() for p in models.skeleton(workdir.config.model).parameters()) * 4 / 2**20
    torch.cuda.reset_peak_memory_stats()
    before = allocated_mb()
    artifact = workdir.train()
    assert read_json(artifact)["kind"] in METHODS[name].outputs
    peak = read_json(artifact.parent / "metrics.json")["meters"]["peak_memory_mb"]
    # The job's peak is a CUDA reading (not the process's RSS) that held the model's fp32 weights on the GPU.
    assert before + weights_mb <= peak <= torch.cuda.max_memory_allocated() / 2**20, (before, weights_mb, peak)

    torch.cuda.reset_peak_memory_stats()
    before = allocated_mb()
    result = workdir.evaluate(artifact)
    assert result["problems"] == 2 and 0 <= result["greedy"]["value"] <= 1 and result["pass_at_k"]
    assert result["cost"]["eval"]["sequences_generated"] > 0
    assert result["cost"]["eval"]["peak_memory_mb"] >= before + weights_mb, "evaluation did not run on the GPU"
    assert Path(f"results/eval/{name}/gsm8k/seed0/completions.jsonl").stat().st_size > 0


# ---------------------------------------------------------------- (d) bf16 masters and seeded noise


def test_bf16_weights_come_back_bit_for_bit_and_noise_is_seeded_on_cuda(tiny_model_dir):
    model, _ = models.load(tiny_model_dir, "bfloat16", "cuda")
    weights = trainable(model)
    assert all(t.dtype == torch.float32 and t.is_cuda for t in weights) and len(weights.masters) == len(weights)
    combine_(weights, [(11, 3e-5)])  # an update: the masters no longer hold bf16 values
    model_before = [p.detach().clone() for p in model.parameters()]
    master_before = [t.clone() for t in weights]
    for seed in range(50):
        with perturbed(weights, [(seed, 1e-3), (seed + 1000, -5e-4)]):
            assert not all(torch.equal(p, b) for p, b in zip(model.parameters(), model_before))
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), model_before)), "bf16 weights changed"
    assert all(torch.equal(t, b) for t, b in zip(weights, master_before)), "a master moved"

    z = noise(weights[0], 5, 0)
    assert z.is_cuda and z.dtype == torch.float32 and torch.equal(z, noise(weights[0], 5, 0))
    assert not torch.equal(z, noise(weights[0], 6, 0)) and not torch.equal(z, noise(weights[0], 5, 1))
    assert abs(z.mean().item()) < 0.05 and abs(z.std().item() - 1) < 0.05, "not standard normal"


# ---------------------------------------------------------------- (e) the sampler on the GPU


def rescaled(tiny_model_dir, device: str):
    """The tiny model with weights large enough that every position changes the next token (as in
    tests/test_sampler.py), drawn on the CPU so that both devices get the same, metered."""
    model, tokenizer = models.load(tiny_model_dir, "float32", "cpu")
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" not in name:
                param.normal_(0, 0.3, generator=generator)
    meters.Meters().attach(model.to(device))
    return model, tokenizer


def test_the_same_seed_samples_the_same_completions_on_cuda(tiny_model_dir):
    model, tokenizer = rescaled(tiny_model_dir, "cuda")
    params = SamplingParams(n=4, temperature=0.7, top_p=0.95, max_new_tokens=16, seed=3, batch_size=8)

    def texts(params):
        return [[c.text for c in row] for row in sample(model, tokenizer, PROMPTS, params)]

    first = texts(params)
    assert texts(params) == first
    assert texts(dataclasses.replace(params, seed=4)) != first
    assert len({t for row in first for t in row}) > len(PROMPTS), "the samples do not vary"


TOLERANCE = 1e-3
"""Largest fp32 logit difference allowed between the CPU and the GPU. The GPU sums in another order
than the CPU's kernels, so logits of about unit size differ by ~1e-6; 1e-3 leaves a wide margin,
while a real fault (a wrong position, mask or cache row; TF32 matmuls) moves them by far more. Why
not compare whole greedy completions: these random weights have near-ties, steps whose top-2
margin is within rounding, where either device may rightly pick the other token and the rest of
the completion then differs. So greedy tokens must agree up to the first step whose margin is under
4 x TOLERANCE (rounding cannot flip a wider one), and those steps must be most of the tokens."""


def test_greedy_tokens_on_cuda_are_the_cpus(tiny_model_dir):
    cpu, tokenizer = rescaled(tiny_model_dir, "cpu")
    gpu, _ = rescaled(tiny_model_dir, "cuda")
    batch = tokenizer(PROMPTS, return_tensors="pt", padding=True, padding_side="left")  # left-padded, as sample's
    params, rows, stop = SamplingParams(max_new_tokens=24), list(range(len(PROMPTS))), stop_ids(cpu, tokenizer)
    on_cpu = decode(cpu, batch["input_ids"], batch["attention_mask"], rows, params, stop, None)
    on_gpu = decode(gpu, batch["input_ids"].cuda(), batch["attention_mask"].cuda(), rows, params, stop, None)
    compared = 0
    for prompt, want, got in zip(PROMPTS, on_cpu, on_gpu):
        ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
        sequence = torch.cat([ids, torch.tensor([want])], 1)
        with torch.no_grad():
            logits = cpu(input_ids=sequence).logits[0, ids.shape[1] - 1 : -1]
            gpu_logits = gpu(input_ids=sequence.cuda()).logits[0, ids.shape[1] - 1 : -1].cpu()
        assert (gpu_logits - logits).abs().max() < TOLERANCE, prompt
        top2 = logits.topk(2).values
        margins = (top2[:, 0] - top2[:, 1]).tolist()
        decided = next((k for k, m in enumerate(margins) if m < 4 * TOLERANCE), len(want))
        assert got[:decided] == want[:decided], prompt
        compared += decided
    assert compared >= sum(map(len, on_cpu)) / 2, f"only {compared} tokens were far from a tie"
