"""The metered sampler: n completions per prompt, batched, seeded and recorded.

Every completion a method or the evaluator generates goes through here, so sequences and
tokens generated, and the time spent generating, are counted alike for every method.

Decoding is a plain loop over the model's forward pass, faster than `model.generate` on the
shapes this suite uses (many samples of few prompts) for three reasons:
- shared prefill: each distinct prompt of a chunk is run once, and its key/value cache is copied
  to the rows that sample from it;
- a preallocated key/value cache (`PrefixCache`) that grows by writing in place, where the
  default cache concatenates (a copy of the whole cache per token);
- finished rows leave the batch, so later steps compute only the rows still generating.
Greedy decoding gives `generate`'s tokens, and sampling uses `generate`'s own logits warpers
(temperature, then top-p); tests/test_sampler.py checks both.
"""

from __future__ import annotations

import inspect
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import torch
from tqdm.auto import tqdm
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer, get_layer_types_and_kwargs

from core import meters
from core.errors import NogradError

NUCLEUS_CANDIDATES = 256
"""Top-p looks for the nucleus among this many most likely tokens first, and sorts the whole
vocabulary only for rows whose nucleus is larger."""
RETIRE_SHARE = 0.25
"""Finished rows are dropped from the batch once they are this share of it: dropping copies the
live rows' cache, so doing it for every finished row would cost more than it saves."""


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
    greedy_first: bool = False
    """The first of each prompt's n completions is decoded greedily and the others sampled, all
    in one batch: a greedy answer then costs one more row, not a decoding pass of its own."""


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


class PrefixLayer(DynamicLayer):
    """One layer's key/value cache, allocated once for the longest sequence and filled in place.

    Attention reads only the filled prefix (a view, no copy).
    """

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity, self.length = capacity, 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        batch, heads, _, _ = key_states.shape
        self.device = key_states.device
        self.keys = key_states.new_empty(batch, heads, self.capacity, key_states.shape[-1])
        self.values = value_states.new_empty(batch, heads, self.capacity, value_states.shape[-1])
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            raise RuntimeError(f"key/value cache full: {end} positions for a capacity of {self.capacity}")
        self.keys[:, :, self.length : end] = key_states
        self.values[:, :, self.length : end] = value_states
        self.length = end
        return self.keys[:, :, :end], self.values[:, :, :end]

    def get_seq_length(self) -> int:
        return self.length

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep (or repeat) the rows `indices`, copying only their filled prefix; a smaller batch
        reuses the buffers it already has."""
        if not self.is_initialized:
            return
        for name in ("keys", "values"):
            buffer = getattr(self, name)
            rows = buffer[indices, :, : self.length]
            if len(indices) > len(buffer):
                buffer = buffer.new_empty(len(indices), *buffer.shape[1:])
            buffer = buffer[: len(indices)]
            buffer[:, :, : self.length] = rows
            setattr(self, name, buffer)


def new_cache(model, capacity: int) -> Cache:
    """A preallocated cache for models whose every layer attends to the full sequence; the
    library's own dynamic cache for others (sliding windows, chunked or linear attention)."""
    config = model.config.get_text_config(decoder=True)
    layer_types, _ = get_layer_types_and_kwargs(config)
    if set(layer_types) == {"full_attention"}:
        return Cache(layers=[PrefixLayer(capacity) for _ in layer_types])
    return DynamicCache(config=config)


def cache_argument(model) -> str:
    """The name under which the model's forward takes its key/value cache: `cache` in the
    transformers the suite pins (5.24), `past_key_values` in earlier 5.x (5.19, which vLLM 0.32
    pins). Passed under the other name, the cache would land unread in the forward's **kwargs and
    every step would decode without its context: wrong completions, silently."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    taken = inspect.signature(base.forward).parameters
    for name in ("cache", "past_key_values"):
        if name in taken:
            return name
    raise NogradError(f"{type(base).__name__}.forward takes no key/value cache (neither `cache` nor "
                      "`past_key_values`): nograd's sampler cannot decode with this model")


def stop_ids(model, tokenizer) -> set[int]:
    """The tokens that end a completion: the generation config's end-of-sequence ids (what
    `generate` stops on) and the tokenizer's."""
    ids = model.generation_config.eos_token_id
    return (set(ids if isinstance(ids, list) else [ids]) | {tokenizer.eos_token_id}) - {None}


def draw(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None,
         greedy: torch.Tensor | None = None) -> torch.Tensor:
    """One token per row: the argmax at temperature 0 and in the rows `greedy` marks, else a draw
    from the distribution that `generate`'s warpers define (softmax of logits / T, then the top-p
    nucleus: the most likely tokens until their mass reaches p, renormalised).

    The same distribution as `generate`'s sort-the-vocabulary-then-multinomial, at a fraction of
    its cost: the nucleus is found with `topk`, sorting the whole vocabulary only for the rows
    whose nucleus has more than NUCLEUS_CANDIDATES tokens, and each draw is one uniform number
    through the cumulative distribution instead of one random number per vocabulary entry.
    Low-precision logits are upcast first, exactly: argmax is 2.5x faster over fp32 than bf16."""
    logits = logits.float()
    if params.temperature == 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits / params.temperature, dim=-1)
    if params.top_p == 1:
        picks = _inverse_cdf(probs, generator)
    else:
        top, tokens = probs.topk(min(NUCLEUS_CANDIDATES, probs.shape[-1]))
        picks = tokens.gather(1, _inverse_cdf(_nucleus(top, params.top_p), generator)[:, None]).squeeze(1)
        wide = (top.sum(-1) < params.top_p).nonzero().squeeze(1)
        if len(wide):
            top, tokens = probs[wide].sort(dim=-1, descending=True)
            picks[wide] = tokens.gather(1, _inverse_cdf(_nucleus(top, params.top_p), generator)[:, None]).squeeze(1)
    return picks if greedy is None else torch.where(greedy, logits.argmax(-1), picks)


def _nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Zero the tokens outside the nucleus of rows sorted by descending probability. Like
    `generate`'s TopPLogitsWarper, a token goes when the mass of the tokens no more likely than
    it, itself included, is at most 1 - p: when the mass before it is at least p."""
    return probs.masked_fill(probs.cumsum(-1) - probs >= top_p, 0)


def _inverse_cdf(weights: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One column per row, drawn with probability proportional to `weights`."""
    cumulative = weights.cumsum(-1)
    threshold = torch.rand(len(weights), 1, generator=generator, device=weights.device) * cumulative[:, -1:]
    return torch.searchsorted(cumulative, threshold, right=True).clamp(max=weights.shape[-1] - 1).squeeze(1)


@torch.no_grad()
def decode(model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, owners: list[int], params: SamplingParams,
           stop: set[int], generator: torch.Generator | None, adapters: list[str] | None = None,
           greedy: list[bool] | None = None) -> list[list[int]]:
    """Token ids generated for each row; row r continues prompt `owners[r]` of the left-padded
    batch (`prompt_ids`, `prompt_mask`), whose prefill is computed once for all its rows.
    `adapters` names each prompt's LoRA adapter (peft's mixed-adapter batches); `greedy` marks
    rows decoded greedily whatever the temperature. Every caller's generation is timed (phase
    'generate') and counted (sequences, tokens) here."""
    meter = meters.of(model)
    with meter.phase("generate"):
        outputs = _decode(model, prompt_ids, prompt_mask, owners, params, stop, generator, adapters, greedy)
    meter.generated(outputs)
    return outputs


def _decode(model, prompt_ids, prompt_mask, owners, params, stop, generator, adapters, greedy) -> list[list[int]]:
    width = prompt_ids.shape[1]
    cache = new_cache(model, width + params.max_new_tokens)
    positions = (prompt_mask.cumsum(-1) - 1).clamp(min=0)
    padded = not bool(prompt_mask.all())
    extra = {} if adapters is None else {"adapter_names": adapters}
    cached = {cache_argument(model): cache}
    logits = model(input_ids=prompt_ids, attention_mask=prompt_mask if padded else None, position_ids=positions,
                   use_cache=True, logits_to_keep=1, **cached, **extra).logits[:, -1]
    meters.of(model).count("forward_passes", len(owners) - len(prompt_ids))  # the shared prefills' other rows
    rows = torch.tensor(owners, device=prompt_ids.device)
    cache.batch_select_indices(rows)
    logits, position = logits[rows], positions[rows, -1]
    if adapters is not None:
        extra = {"adapter_names": [adapters[owner] for owner in owners]}
    mask = torch.ones(len(owners), width + params.max_new_tokens, dtype=prompt_mask.dtype, device=prompt_mask.device)
    mask[:, :width] = prompt_mask[rows]
    if greedy is not None:
        greedy = torch.tensor(greedy, device=prompt_ids.device)
    outputs: list[list[int]] = [[] for _ in owners]
    live = list(range(len(owners)))  # the output row of each batch row
    running = [True] * len(owners)  # batch rows that have not finished
    for step in range(params.max_new_tokens):
        tokens = draw(logits, params, generator, greedy)
        for i, token in enumerate(tokens.tolist()):
            if running[i]:
                outputs[live[i]].append(token)
                running[i] = token not in stop
        if step + 1 == params.max_new_tokens or not any(running):
            break
        if running.count(False) >= max(1, RETIRE_SHARE * len(running)):
            keep = [i for i, alive in enumerate(running) if alive]
            index = torch.tensor(keep, device=tokens.device)
            cache.batch_select_indices(index)
            tokens, position, mask = tokens[index], position[index], mask[index]
            if greedy is not None:
                greedy = greedy[index]
            live, running = [live[i] for i in keep], [True] * len(keep)
            if adapters is not None:
                extra = {"adapter_names": [extra["adapter_names"][i] for i in keep]}
        position = position + 1
        length = width + step + 1
        logits = model(input_ids=tokens[:, None], attention_mask=mask[:, :length] if padded else None,
                       position_ids=position[:, None], use_cache=True, **cached, **extra).logits[:, -1]
    return outputs


@contextmanager
def eval_mode(model) -> Iterator[None]:
    """No dropout while sampling (peft also accepts mixed-adapter batches only in eval mode); the
    model's mode is restored after."""
    training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(training)


@torch.no_grad()
def sample(model, tokenizer, prompts: list[str], params: SamplingParams, desc: str | None = None,
           adapters: list[str] | None = None) -> list[list[Completion]]:
    """`params.n` completions for each prompt, in prompt order.

    Rows are generated in fixed chunks of `batch_size`, each chunk seeded by (seed, chunk), so
    the same prompts and parameters give the same completions. `adapters`, for a peft model,
    names the LoRA adapter each prompt is answered with: members of a population that differ
    only in their adapters are sampled in one batch, sharing the base model's matmuls.
    """
    meter = meters.of(model)
    owners = [i for i in range(len(prompts)) for _ in range(params.n)]
    stop = stop_ids(model, tokenizer)
    completions: list[Completion] = []
    bar = tqdm(total=len(owners), desc=desc or "sampling", unit="seq", disable=desc is None, mininterval=2.0)
    started, generated = time.perf_counter(), 0
    with meter.phase("generate"), eval_mode(model):
        for chunk, start in enumerate(range(0, len(owners), params.batch_size)):
            rows = owners[start : start + params.batch_size]
            first = rows[0]
            batch = tokenizer(prompts[first : rows[-1] + 1], return_tensors="pt", padding=True, padding_side="left")
            batch = batch.to(model.device)
            generator = None
            if params.temperature > 0:
                generator = torch.Generator(model.device).manual_seed(params.seed * 1_000_003 + chunk)
            ids = decode(model, batch["input_ids"], batch["attention_mask"], [r - first for r in rows], params, stop,
                         generator, None if adapters is None else adapters[first : rows[-1] + 1],
                         [row % params.n == 0 for row in range(start, start + len(rows))]
                         if params.greedy_first else None)
            for tokens in ids:
                finished = tokens[-1] in stop
                completions.append(Completion(tokenizer.decode(tokens, skip_special_tokens=True),
                                              len(tokens), finished))
                generated += len(tokens)
            bar.update(len(rows))
            bar.set_postfix(tok_s=f"{generated / (time.perf_counter() - started):.1f}")
    bar.close()
    return [completions[i : i + params.n] for i in range(0, len(completions), params.n)]
