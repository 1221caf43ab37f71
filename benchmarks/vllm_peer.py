"""vLLM's CPU build as the sampler benchmark's peer: the same prompt, samples, length, temperature,
top-p and threads, timed in vLLM's own environment (.venv-vllm, `make vllm`), which
`benchmarks.sampler` starts as a subprocess and reads the last line of.

    .venv-vllm/bin/python -m benchmarks.vllm_peer --model DIR --prompt TEXT --dtype bfloat16 [--samples 64] ...

Prints one line, `RESULT` and JSON: tokens generated and the median seconds of `--repeats` timed
calls, after an untimed warm-up of 8 tokens (vLLM compiles its graphs on first use). vLLM logs to
the same output as it shuts down, so the line is found by its prefix.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from benchmarks import sampling_arguments


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--dtype", required=True, help="the weights' dtype, as nograd's sampler has them")
    sampling_arguments(parser)
    args = parser.parse_args()

    from vllm import LLM, SamplingParams

    # On the CPU, gpu_memory_utilization is the share of free host memory it reserves.
    llm = LLM(model=args.model, dtype=args.dtype, seed=0, max_model_len=1024, gpu_memory_utilization=0.25)

    def run(new_tokens: int) -> int:
        params = SamplingParams(n=args.samples, temperature=args.temperature, top_p=args.top_p, max_tokens=new_tokens)
        [output] = llm.generate([args.prompt], params, use_tqdm=False)
        return sum(len(out.token_ids) for out in output.outputs)

    run(8)
    times, tokens = [], 0
    for _ in range(args.repeats):
        start = time.perf_counter()
        tokens = run(args.new_tokens)
        times.append(time.perf_counter() - start)
    print("RESULT " + json.dumps({"tokens": tokens, "seconds": statistics.median(times)}), flush=True)


if __name__ == "__main__":  # vLLM starts its engine in a process of its own
    main()
