"""The metered sampler: n completions per prompt, batched, seeded and recorded.

Every completion a method or the evaluator generates goes through here, so sequences and
tokens generated, and the time spent generating, are counted alike for every method.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from harness import meters


@dataclass(frozen=True)
class SamplingParams:
    n: int = 1
    """Completions per prompt."""
    temperature: float = 0.0
    """0 decodes greedily."""
    top_p: float = 1.0
    max_new_tokens: int = 256
    seed: int = 0
    batch_size: int = 64
    """Sequences generated together."""


@dataclass(frozen=True)
class Completion:
    text: str
    tokens: int
    """Generated tokens, the end-of-sequence token included."""
    finished: bool
    """Ended with end-of-sequence rather than at max_new_tokens."""


def prompt_text(tokenizer, messages: list[dict[str, str]]) -> str:
    """The model's own chat format when its tokenizer has one, else the turns as plain text."""
    if tokenizer.chat_template:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return "\n\n".join(m["content"] for m in messages) + "\n\n"


@torch.no_grad()
def sample(model, tokenizer, prompts: list[str], params: SamplingParams, desc: str | None = None) -> list[list[Completion]]:
    """`params.n` completions for each prompt, in prompt order.

    Rows are generated in fixed chunks of `batch_size`, each chunk seeded by (seed, chunk), so
    the same prompts and parameters give the same completions.
    """
    meter = meters.of(model)
    rows = [p for p in prompts for _ in range(params.n)]
    eos = {tokenizer.eos_token_id, tokenizer.pad_token_id} - {None}
    greedy = params.temperature == 0
    completions: list[Completion] = []
    bar = tqdm(total=len(rows), desc=desc or "sampling", unit="seq", disable=desc is None, mininterval=2.0)
    started, generated = time.perf_counter(), 0
    with meter.phase("generate"):
        for chunk, start in enumerate(range(0, len(rows), params.batch_size)):
            batch = tokenizer(rows[start : start + params.batch_size], return_tensors="pt", padding=True)
            batch = batch.to(model.device)
            torch.manual_seed(params.seed * 1_000_003 + chunk)
            output = model.generate(
                **batch,
                do_sample=not greedy,
                temperature=None if greedy else params.temperature,
                top_p=None if greedy else params.top_p,
                top_k=None if greedy else 0,
                max_new_tokens=params.max_new_tokens,
                pad_token_id=tokenizer.pad_token_id,
            )
            for ids in output[:, batch["input_ids"].shape[1] :].tolist():
                ends = [i for i, t in enumerate(ids) if t in eos]
                length = ends[0] + 1 if ends else len(ids)
                text = tokenizer.decode(ids[:length], skip_special_tokens=True)
                completions.append(Completion(text, length, bool(ends)))
                generated += length
            bar.update(len(output))
            bar.set_postfix(tok_s=f"{generated / (time.perf_counter() - started):.1f}")
    bar.close()
    meter.count("sequences_generated", len(rows))
    meter.count("tokens_generated", generated)
    return [completions[i : i + params.n] for i in range(0, len(completions), params.n)]
