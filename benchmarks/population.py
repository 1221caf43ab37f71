"""Population evaluation: P candidates that differ only in their LoRA adapter (ESSA's singular
values), scored by greedy rollouts on a batch of GSM8K problems, one member after another
(rewrite the adapter, generate, repeat) vs all members in one batch (peft's mixed-adapter rows:
the base model's matmuls shared, each row adding its member's low-rank term). Same inputs, one
process, embedded model; the rewards must agree.

    python -m benchmarks.population [--population 16] [--problems 4] [--new-tokens 192] [--repeats 3]
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np
import torch

from benchmarks.common import embedded_model, gsm8k_prompts, median_seconds, write_table
from core import spaces
from core.sampler import SamplingParams, sample


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--population", type=int, default=16)
    parser.add_argument("--problems", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=192)
    parser.add_argument("--rank", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from peft import LoraConfig, get_peft_model

    model, tokenizer = embedded_model()
    torch.manual_seed(0)
    model = get_peft_model(model, LoraConfig(r=args.rank, lora_alpha=2 * args.rank, target_modules=["q_proj", "v_proj"],
                                             init_lora_weights=False))
    space = spaces.SingularValues(model)
    x0 = space.get()
    rng = np.random.default_rng(0)
    candidates = [x0 * (1 + 0.1 * rng.standard_normal(x0.size)) for _ in range(args.population)]
    prompts = gsm8k_prompts(tokenizer, args.problems)
    params = SamplingParams(max_new_tokens=args.new_tokens, batch_size=args.population * args.problems)

    def in_turn(params: SamplingParams = params) -> list[str]:
        texts = []
        for x in candidates:
            space.set(x)
            texts += [row[0].text for row in sample(model, tokenizer, prompts, params)]
        space.set(x0)
        return texts

    def batched(params: SamplingParams = params) -> list[str]:
        with space.population(model, candidates) as adapters:
            rows = sample(model, tokenizer, prompts * len(adapters), params,
                          adapters=[name for name in adapters for _ in prompts])
        return [row[0].text for row in rows]

    tokens = lambda texts: sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts)  # noqa: E731
    short = dataclasses.replace(params, max_new_tokens=8)  # warm-ups: every shape, few tokens
    loop_s, loop_texts = median_seconds(in_turn, args.repeats, lambda: in_turn(short))
    batch_s, batch_texts = median_seconds(batched, args.repeats, lambda: batched(short))
    same = sum(a == b for a, b in zip(loop_texts, batch_texts)) / len(loop_texts)
    rows = [["one member after another", f"{tokens(loop_texts)}", f"{loop_s:.1f}", f"{tokens(loop_texts) / loop_s:.1f}",
             "1.00x", ""],
            ["all members in one batch", f"{tokens(batch_texts)}", f"{batch_s:.1f}",
             f"{tokens(batch_texts) / batch_s:.1f}", f"{loop_s / batch_s:.2f}x", f"{same:.0%}"]]
    write_table("population", f"Population evaluation: {args.population} LoRA members (rank {args.rank}, q/v), "
                f"{args.problems} GSM8K problems, greedy, {args.new_tokens} new tokens, median of {args.repeats}",
                ["path", "tokens generated", "seconds", "tokens/s", "speed-up", "completions identical"], rows)


if __name__ == "__main__":
    main()
