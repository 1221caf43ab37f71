"""The choices a config leaves to the machine, made by measuring it: `dtype: auto` and `sampler: auto`.

Each choice is a `Choice` (the setting, what runs, and why). Where a measurement decides, it is
a short probe whose figures are kept per machine in `results/machine/<probe>-<machine key>.json`
(the key hashes the CPU's model and instruction-set flags, its cores, any CUDA device and the
torch version), so it runs the first time a config asks and again on demand (`nograd probe`).
The DAG's `probe` job chooses once, before any training, and keeps the choices in the results
folder (`DECIDED`), which every job reads wherever it runs, so every method runs under the same
conditions; the report states each choice and its reason.

- precision: on a CUDA device, bf16 where it supports it (no probe); on a CPU, whichever of bf16
  and fp32 runs the model's own matmuls faster, timed at a decoding shape (one row per sequence
  of an evaluation batch) and at a training forward's (`TRAINING_ROWS` rows), bf16 winning ties
  (the papers' precision);
- sampler: nograd's torch sampler unless vLLM is installed in this environment and the
  population runs in the training process (Ray workers sample with torch); then whichever of
  the two generated more tokens per second on the config's model in the chosen precision.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import platform
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import torch

from core.backend import Backend
from core.errors import NogradError
from core.outputs import RESULTS, read_json, write_json

if TYPE_CHECKING:
    from core.config import Config

PROBES = RESULTS / "machine"
"""Where each probe's figures are kept, one file per probe and machine."""
FLAGS = ("amx_tile", "amx_bf16", "amx_int8", "avx512_bf16", "avx512_fp16", "avx512f", "avx512_vnni", "avx_vnni",
         "avx2", "fma", "asimd", "sve", "bf16")
"""The CPU flags that decide which matmul kernels run (x86 and Arm); the machine key hashes those present."""
JOB_THREADS = 1
"""Threads the precision probe times with: each job's (the Snakefile gives every job one core)."""
TRAINING_ROWS = 256
"""Rows of the training-shaped matmuls the precision probe times: a loss forward over a few problems."""
PROBE_SAMPLES, PROBE_TOKENS = 32, 64
"""The sampler probe's shape: this many samples of one prompt, each at most this many new tokens."""


@dataclass(frozen=True)
class Choice:
    setting: str
    """As the config gives it: 'auto', or a value."""
    value: str
    """What every job runs with."""
    reason: str
    """Why: the config set it, or what the probe measured."""


def cpu() -> tuple[str, list[str]]:
    """The CPU's model name and the flags of `FLAGS` it has (Linux's /proc/cpuinfo; elsewhere the platform's name)."""
    name, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                name = value.strip()
            elif key.strip() in ("flags", "Features"):
                flags.update(value.split())
    except OSError:
        pass
    return name, [flag for flag in FLAGS if flag in flags]


def fingerprint() -> dict:
    """What a probe's figures depend on: the CPU, its flags, cores, CUDA device and torch version."""
    name, flags = cpu()
    return {"cpu": name, "flags": flags, "cores": os.cpu_count(), "torch": torch.__version__,
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def describe(machine: dict) -> str:
    """A machine in words, flags included: how the README's tables name the machine they ran on."""
    return (f"{machine['cpu']}, {machine['cores']} cores, flags {' '.join(machine['flags']) or 'none of note'}"
            + (f", {machine['cuda']}" if machine.get("cuda") else "") + f", torch {machine['torch']}")


def probe(name: str, inputs: dict, measure: Callable[[], dict], fresh: bool = False) -> tuple[dict, Path]:
    """The figures of probe `name` of `inputs` (the model, its precision) on this machine: kept from
    an earlier run, or measured now (and whenever `fresh`) and kept; and the file that holds them."""
    machine = fingerprint()
    key = hashlib.sha256(json.dumps([machine, inputs], sort_keys=True).encode()).hexdigest()[:12]
    path = PROBES / f"{name}-{key}.json"
    if path.exists() and not fresh:
        return read_json(path), path
    figures = {"machine": machine, "inputs": inputs, "threads": torch.get_num_threads(),
               "date": time.strftime("%Y-%m-%d"), **measure()}
    write_json(path, figures)
    return figures, path


def attention_heads(config) -> tuple[int, int, int]:
    """(query heads, key/value heads, head dimension) of a decoder's transformers config."""
    heads = config.num_attention_heads
    return (heads, getattr(config, "num_key_value_heads", None) or heads,
            getattr(config, "head_dim", None) or config.hidden_size // heads)


def linear_shapes(config) -> dict[tuple[int, int], int]:
    """The model's linear layers as {(in, out): how many}, from its transformers config: a
    decoder's attention and MLP projections per layer, and the LM head."""
    hidden, layers = config.hidden_size, config.num_hidden_layers
    heads, kv_heads, head_dim = attention_heads(config)
    query, kv = heads * head_dim, kv_heads * head_dim
    shapes: dict[tuple[int, int], int] = {}
    for shape in ((hidden, query), (hidden, kv), (hidden, kv), (query, hidden), (hidden, config.intermediate_size),
                  (hidden, config.intermediate_size), (config.intermediate_size, hidden)):
        shapes[shape] = shapes.get(shape, 0) + layers
    shapes[(hidden, config.vocab_size)] = shapes.get((hidden, config.vocab_size), 0) + 1
    return shapes


def matmul_seconds(shapes: dict[tuple[int, int], int], rows: int, dtypes: list[str], repeats: int = 5,
                   device: str = "cpu") -> dict[str, float]:
    """Seconds the model's linear layers (`linear_shapes`) take at `rows` rows in each of `dtypes`:
    each distinct shape timed `repeats` times after a warm-up, the dtypes in turn so that whatever
    else the machine does weighs on each alike, the fastest time kept, times how many there are."""
    total = dict.fromkeys(dtypes, 0.0)
    for (inputs, outputs), count in shapes.items():
        operands = {dtype: (torch.randn(rows, inputs, device=device).to(getattr(torch, dtype)),
                            torch.randn(outputs, inputs, device=device).to(getattr(torch, dtype)))
                    for dtype in dtypes}
        fastest = dict.fromkeys(dtypes, float("inf"))
        for repeat in range(repeats + 1):
            for dtype, (x, weight) in operands.items():
                start = time.perf_counter()
                torch.nn.functional.linear(x, weight)
                if repeat:  # the first round warms up
                    fastest[dtype] = min(fastest[dtype], time.perf_counter() - start)
        for dtype in dtypes:
            total[dtype] += count * fastest[dtype]
    return total


def _precision(model: str, decode_rows: int) -> dict:
    from core import models

    shapes, seconds = linear_shapes(models.skeleton(model).config), {}
    threads = torch.get_num_threads()
    torch.set_num_threads(JOB_THREADS)
    try:
        for rows in (decode_rows, TRAINING_ROWS):
            for dtype, spent in matmul_seconds(shapes, rows, ["float32", "bfloat16"]).items():
                seconds[f"{dtype}@{rows}"] = spent
    finally:
        torch.set_num_threads(threads)
    return {"rows": [decode_rows, TRAINING_ROWS], "seconds": seconds, "threads": JOB_THREADS}


def choose_dtype(cfg: Config, fresh: bool = False) -> Choice:
    """`dtype` as the config sets it, or for 'auto' the faster precision on this machine (module docstring)."""
    if cfg.dtype != "auto":
        return Choice(cfg.dtype, cfg.dtype, "set in the config")
    from core.models import resolve_device

    device = resolve_device(cfg.device)
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return Choice("auto", "bfloat16", f"{torch.cuda.get_device_name(device)} computes in bf16 natively")
        return Choice("auto", "float32", f"{torch.cuda.get_device_name(device)} has no bf16 support")
    if device.type != "cpu":
        return Choice("auto", "float32", f"no precision probe for device {device.type!r}")
    rows = cfg.evaluation.batch_size
    figures, path = probe("dtype", {"model": cfg.model, "rows": rows}, lambda: _precision(cfg.model, rows), fresh)
    speeds = [figures["seconds"][f"float32@{n}"] / figures["seconds"][f"bfloat16@{n}"] for n in figures["rows"]]
    value = "bfloat16" if statistics.geometric_mean(speeds) >= 1 else "float32"
    decoding, training = speeds
    return Choice("auto", value,
                  f"the model's matmuls ran {decoding:.2f}x as fast in bf16 as in fp32 at {figures['rows'][0]} rows "
                  f"(decoding) and {training:.2f}x at {figures['rows'][1]} (training) on this machine, "
                  f"{figures['threads']} thread{'s' if figures['threads'] != 1 else ''} ({path})")


def _samplers(cfg: Config) -> dict:
    """Tokens per second of nograd's sampler and of vLLM on the config's model in its precision:
    `PROBE_SAMPLES` samples of one prompt, `PROBE_TOKENS` new tokens at most, after a warm-up call."""
    from core import meters, models
    from core.sampler import SamplingParams, prompt_text, sample

    params = SamplingParams(n=PROBE_SAMPLES, temperature=0.7, top_p=0.95, max_new_tokens=PROBE_TOKENS,
                            batch_size=PROBE_SAMPLES)
    short = replace(params, max_new_tokens=4)
    rates = {}
    with tempfile.TemporaryDirectory() as tmp:
        manifest = models.prepare(cfg.model, Path(tmp))
        model, tokenizer = models.load(manifest, cfg.dtype, cfg.device)
        meters.Meters().attach(model)
        prompt = prompt_text(tokenizer, [{"role": "user", "content": "Natalia sold clips to 48 of her friends in "
                                          "April, and then she sold half as many clips in May. How many clips did "
                                          "Natalia sell altogether in April and May?"}])

        def rate(generate: Callable[[SamplingParams], list]) -> float:
            generate(short)
            start = time.perf_counter()
            tokens = sum(c.tokens for row in generate(params) for c in row)
            return tokens / (time.perf_counter() - start)

        rates["torch"] = rate(lambda p: sample(model, tokenizer, [prompt], p))
        engine = Backend(sampler="vllm", dtype=cfg.dtype, gpu_memory=cfg.vllm_gpu_memory).engine(manifest["path"])
        rates["vllm"] = rate(lambda p: engine.sample([prompt], p, meters.Meters()))
    return {"shape": [PROBE_SAMPLES, PROBE_TOKENS], "tokens_per_second": rates}


def choose_sampler(cfg: Config, fresh: bool = False) -> Choice:
    """`sampler` as the config sets it, or for 'auto' the faster engine installed here (module
    docstring). `cfg.dtype` must already be chosen: the probe runs in it."""
    if cfg.sampler != "auto":
        return Choice(cfg.sampler, cfg.sampler, "set in the config")
    if Backend.of(cfg).ray:
        return Choice("auto", "torch", "training.population: ray, whose workers sample with nograd's torch sampler")
    if importlib.util.find_spec("vllm") is None:
        return Choice("auto", "torch", "vLLM is not installed in this environment")
    figures, path = probe("sampler", {"model": cfg.model, "dtype": cfg.dtype}, lambda: _samplers(cfg), fresh)
    rates = figures["tokens_per_second"]
    value = "vllm" if rates["vllm"] > rates["torch"] else "torch"
    return Choice("auto", value,
                  f"vLLM generated {rates['vllm']:.1f} tokens/s and nograd's torch sampler {rates['torch']:.1f} on "
                  f"this machine ({figures['shape'][0]} samples x {figures['shape'][1]} new tokens, {cfg.dtype}, "
                  f"{figures['threads']} thread{'s' if figures['threads'] != 1 else ''}; {path})")


DECIDED = PROBES / "choices.json"
"""The choices of the config that asked last, with what it asked (`nograd probe` writes them, the
Snakefile's first job): every job of the DAG reads them, wherever it runs, instead of measuring."""


def _asked(cfg: Config) -> dict:
    """The settings the choices depend on."""
    return {"model": cfg.model, "dtype": cfg.dtype, "sampler": cfg.sampler, "device": cfg.device,
            "population": cfg.training.population, "rows": cfg.evaluation.batch_size}


def choose(cfg: Config, fresh: bool = False) -> dict[str, Choice]:
    """Each choice and its reason: precision first, since the sampler probe runs in it. Probes run
    only for settings left to 'auto', and reuse this machine's figures unless `fresh`."""
    try:
        dtype = choose_dtype(cfg, fresh)
        return {"dtype": dtype, "sampler": choose_sampler(replace(cfg, dtype=dtype.value), fresh)}
    except NogradError:
        raise
    except Exception as error:  # a probe that cannot run: say which, and how to avoid it
        raise NogradError(f"dtype/sampler 'auto': the machine probe failed ({type(error).__name__}: {error}); "
                          "set dtype and sampler in the config to skip it") from error


def decide(cfg: Config, fresh: bool = False) -> dict[str, Choice]:
    """Choose, and keep the choices in `DECIDED` for every job; a file that already holds the same
    values for the same settings is left as it is, so that jobs depending on it do not rerun."""
    choices = choose(cfg, fresh)
    kept = read_json(DECIDED) if DECIDED.exists() else {}
    values = {name: choice.value for name, choice in choices.items()}
    if kept.get("asked") != _asked(cfg) or {n: c["value"] for n, c in kept["choices"].items()} != values:
        write_json(DECIDED, {"asked": _asked(cfg), "choices": {name: asdict(c) for name, c in choices.items()}})
    return choices


def recorded(cfg: Config) -> dict[str, Choice]:
    """The choices kept for these settings in `DECIDED`, measuring nothing: a setting the config
    gives is its own, and an 'auto' that no probe chose here says so."""
    kept = read_json(DECIDED) if DECIDED.exists() else None
    if kept and kept["asked"] == _asked(cfg):
        return {name: Choice(**choice) for name, choice in kept["choices"].items()}
    return {name: Choice(value, value, "set in the config") if value != "auto" else
            Choice("auto", "auto", "not chosen: no probe ran for these settings in this results folder")
            for name, value in (("dtype", cfg.dtype), ("sampler", cfg.sampler))}


def resolve(cfg: Config) -> tuple[Config, dict[str, Choice]]:
    """The config with `dtype` and `sampler` chosen, and each choice with its reason: as kept in
    `DECIDED` for these settings, else chosen now and kept."""
    choices = recorded(cfg)
    if any(choice.value == "auto" for choice in choices.values()):
        choices = decide(cfg)
    return replace(cfg, dtype=choices["dtype"].value, sampler=choices["sampler"].value), choices
