"""The choices a config leaves to the machine, made by measuring it: `dtype: auto` and `sampler: auto`.

Each choice is a `Choice` (the setting, what runs, and why). Where a measurement decides, it is
a short probe whose figures are kept per machine in `results/machine/<probe>-<machine key>.json`
(the key hashes the CPU's model and instruction-set flags, its cores, any CUDA device and the
torch version), so it runs the first time a config asks and again on demand (`nograd probe`).
The DAG's `probe` job chooses once, before any training, and keeps the choices in the results
folder (`DECIDED`), which every job reads wherever it runs, so every method runs under the same
conditions; the report states each choice and its reason.

- precision: on a CUDA device, bf16 where it supports it (no probe); on a CPU, whichever of bf16
  and fp32 runs the model's own steps faster where the DAG spends its time: decoding an
  evaluation batch, decoding a training rollout (`ROLLOUT_ROWS` rows) and a loss forward
  (`TRAINING_TOKENS` tokens), by the geometric mean of the three speed-ups, bf16 winning ties
  (the papers' precision). Few rows stream every weight from memory, where bf16 reads half the
  bytes; many rows are compute-bound, where fp32 kernels can be the faster;
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
ROLLOUT_ROWS = 8
"""Rows of the training rollout the precision probe decodes: a few prompts, a few samples of each
(the quickstart's rollouts decode 2 to 4 rows: a GRPO group of 4, a gradient-free member's batch of 2)."""
TRAINING_TOKENS = 256
"""Tokens of the loss forward the precision probe times: 4 sequences of 64."""
PROMPT_TOKENS, DECODE_STEPS, REPEATS = 64, 4, 2
"""The probe's decoding: this many steps past a prompt this long, each shape timed this many times
after a warm-up, the fastest kept."""
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


def _decode_seconds(model, rows: int, prompt: torch.Tensor) -> float:
    """Seconds of `DECODE_STEPS` steps of nograd's decoding (core/sampler.py: its cache, one new
    token per row, full-vocabulary logits) of `rows` rows past `prompt`, whose prefill is not timed."""
    from core.sampler import cache_argument, new_cache

    cache = new_cache(model, prompt.shape[1] + DECODE_STEPS)
    cached = {cache_argument(model): cache}
    model(input_ids=prompt, use_cache=True, logits_to_keep=1, **cached)
    cache.batch_select_indices(torch.zeros(rows, dtype=torch.long))
    tokens = prompt[:, -1:].expand(rows, 1)
    start = time.perf_counter()
    for step in range(DECODE_STEPS):
        position = torch.full((rows, 1), prompt.shape[1] + step)
        model(input_ids=tokens, position_ids=position, use_cache=True, **cached)
    return time.perf_counter() - start


def _forward_seconds(model, tokens: torch.Tensor) -> float:
    start = time.perf_counter()
    model(input_ids=tokens)
    return time.perf_counter() - start


def _precision(model: str, decode_rows: int) -> dict:
    """Seconds of the model's own steps in fp32 and in bf16, one thread (`JOB_THREADS`): decoding
    `decode_rows` rows (an evaluation batch) and `ROLLOUT_ROWS` rows (a rollout), and a forward over
    `TRAINING_TOKENS` tokens (a loss). The weights are drawn from the model's config, not read: the
    time of a step does not depend on their values. Each shape is timed in the two precisions in
    turn, so that whatever else the machine does weighs on both alike."""
    from transformers import AutoModelForCausalLM

    from core import models

    config = models.skeleton(model).config
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(config.vocab_size, (1, PROMPT_TOKENS), generator=generator)
    batch = torch.randint(config.vocab_size, (TRAINING_TOKENS // 64, 64), generator=generator)
    shapes = {  # name: (what it is, how it is timed)
        f"decode{decode_rows}": (f"decoding {decode_rows} rows", lambda m: _decode_seconds(m, decode_rows, prompt)),
        f"decode{ROLLOUT_ROWS}": (f"decoding {ROLLOUT_ROWS} rows", lambda m: _decode_seconds(m, ROLLOUT_ROWS, prompt)),
        f"forward{TRAINING_TOKENS}": (f"a {TRAINING_TOKENS}-token forward", lambda m: _forward_seconds(m, batch)),
    }
    threads = torch.get_num_threads()
    torch.set_num_threads(JOB_THREADS)
    try:
        nets = {dtype: AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype)).eval()
                for dtype in ("float32", "bfloat16")}
        seconds = {f"{dtype}@{shape}": float("inf") for shape in shapes for dtype in nets}
        with torch.inference_mode():
            for repeat in range(REPEATS + 1):
                for shape, (_, timed) in shapes.items():
                    for dtype, net in nets.items():
                        spent = timed(net)
                        if repeat:  # the first round warms up
                            seconds[f"{dtype}@{shape}"] = min(seconds[f"{dtype}@{shape}"], spent)
    finally:
        torch.set_num_threads(threads)
    return {"shapes": {shape: what for shape, (what, _) in shapes.items()}, "seconds": seconds,
            "threads": JOB_THREADS}


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
    figures, path = probe("dtype", {"model": cfg.model, "rows": rows, "rollout_rows": ROLLOUT_ROWS,
                                   "training_tokens": TRAINING_TOKENS},
                          lambda: _precision(cfg.model, rows), fresh)
    speeds = {shape: figures["seconds"][f"float32@{shape}"] / figures["seconds"][f"bfloat16@{shape}"]
              for shape in figures["shapes"]}
    mean = statistics.geometric_mean(speeds.values())
    value = "bfloat16" if mean >= 1 else "float32"
    each = ", ".join(f"{speed:.2f}x {figures['shapes'][shape]}" for shape, speed in speeds.items())
    return Choice("auto", value,
                  f"the model's steps ran {mean:.2f}x as fast in bf16 as in fp32 (geometric mean of {each}) on this "
                  f"machine, {figures['threads']} thread{'s' if figures['threads'] != 1 else ''} ({path})")


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
