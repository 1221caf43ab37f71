"""The sampler gives `generate`'s outputs: the same greedy tokens, and draws from the same
distribution (temperature, then top-p) at a fraction of the cost."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats
from transformers import TemperatureLogitsWarper, TopPLogitsWarper

from core import meters, models
from core.sampler import SamplingParams, decode, draw, sample, stop_ids

PROMPTS = ["a b", "Natalia sold clips to 48 of her friends", "def add(a, b):\n    return", "c", "What is 1 + 2?"]


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    """The tiny model with weights large enough that attention, and so every position and cached
    key/value, changes the next token (at its initial scale the output barely depends on them)."""
    model, tokenizer = models.load(tiny_model_dir)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" not in name:
                param.normal_(0, 0.3, generator=generator)
    meters.Meters().attach(model)
    return model, tokenizer


def generate_greedy(model, tokenizer, prompt: str, max_new_tokens: int) -> list[int]:
    batch = tokenizer(prompt, return_tensors="pt")
    out = model.generate(**batch, do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id)
    ids = out[0, batch["input_ids"].shape[1]:].tolist()
    stop = stop_ids(model, tokenizer)
    ends = [i for i, t in enumerate(ids) if t in stop]
    return ids[: ends[0] + 1] if ends else ids


@pytest.mark.parametrize("batch_size", [1, 4, 64])
def test_greedy_matches_generate_with_padding_shared_prefill_and_retired_rows(tiny, batch_size):
    """Also when the greedy row shares its batch, and its prompt's prefill, with sampled rows
    (`greedy_first`, how evaluation decodes), whatever chunk the row falls in."""
    model, tokenizer = tiny
    # End-of-sequence ids that some prompts reach within a few steps, so rows finish at
    # different steps and leave the batch while the others go on.
    firsts = {generate_greedy(model, tokenizer, p, 1)[0] for p in PROMPTS[:2]}
    saved = model.generation_config.eos_token_id
    model.generation_config.eos_token_id = sorted(firsts | {tokenizer.eos_token_id})
    try:
        stop = stop_ids(model, tokenizer)
        expected = [generate_greedy(model, tokenizer, p, 24) for p in PROMPTS]
        rows = sample(model, tokenizer, PROMPTS, SamplingParams(n=3, max_new_tokens=24, batch_size=batch_size))
        mixed = sample(model, tokenizer, PROMPTS, SamplingParams(n=3, temperature=1.0, max_new_tokens=24,
                                                                 batch_size=batch_size, greedy_first=True))
    finally:
        model.generation_config.eos_token_id = saved
    assert any(len(e) == 1 for e in expected) and any(len(e) == 24 for e in expected), \
        "rows must end at different steps"
    for prompt, want, got, (first, *sampled) in zip(PROMPTS, expected, rows, mixed):
        for completion in [*got, first]:
            assert completion.text == tokenizer.decode(want, skip_special_tokens=True), prompt
            assert completion.tokens == len(want)
            assert completion.finished == (want[-1] in stop)
    assert any(c.text != r[0].text for r, (_, *sampled) in zip(rows, mixed) for c in sampled), "the others sample"


def test_nucleus_is_generates_top_p_distribution():
    """draw's distribution is exactly softmax(logits / T) restricted to TopPLogitsWarper's nucleus:
    checked on every row's support and renormalised probabilities, including rows whose nucleus
    is wider than the candidates looked at first."""
    from core import sampler

    torch.manual_seed(0)
    logits = torch.cat([torch.randn(6, 1000) * 4, torch.randn(2, 1000) * 0.1])  # peaked and flat rows
    temperature, top_p = 0.7, 0.9
    reference = TopPLogitsWarper(top_p)(None, TemperatureLogitsWarper(temperature)(None, logits.clone()))
    want = torch.softmax(reference, -1)
    probs = torch.softmax(logits / temperature, -1)
    top, tokens = probs.sort(descending=True)
    got = torch.zeros_like(probs).scatter(1, tokens, sampler._nucleus(top, top_p))
    got = got / got.sum(-1, keepdim=True)
    assert torch.equal(got > 0, want > 0)
    assert torch.allclose(got, want, atol=1e-6)
    assert (want > 0).sum(-1).max() > sampler.NUCLEUS_CANDIDATES, "a row must take the full-sort path"


def test_draws_follow_the_distribution():
    """Token frequencies of many draws match the nucleus probabilities (chi-square goodness of fit)."""
    torch.manual_seed(1)
    logits = torch.randn(1, 12) * 2
    params = SamplingParams(temperature=0.8, top_p=0.9)
    want = torch.softmax(TopPLogitsWarper(0.9)(None, TemperatureLogitsWarper(0.8)(None, logits.clone())), -1)[0]
    generator = torch.Generator().manual_seed(0)
    picks = draw(logits.expand(40_000, 12), params, generator)
    counts = torch.bincount(picks, minlength=12).numpy()
    support = want.numpy() > 0
    assert counts[~support].sum() == 0
    expected = want.numpy()[support] * counts.sum()
    assert stats.chisquare(counts[support], expected).pvalue > 1e-3


def test_sampled_token_frequencies_match_generate(tiny):
    """At temperature 1, the tokens sampled by `generate` and by the sampler from one prompt come
    from the same distribution at every position (chi-square test of homogeneity)."""
    model, tokenizer = tiny
    prompt, n, new = "What is 1 + 2?", 3000, 3
    torch.manual_seed(0)
    batch = tokenizer(prompt, return_tensors="pt")
    with torch.no_grad():
        theirs = model.generate(**batch, do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=new,
                                min_new_tokens=new, num_return_sequences=n, pad_token_id=tokenizer.pad_token_id)
    theirs = theirs[:, batch["input_ids"].shape[1]:]
    # No end-of-sequence, as min_new_tokens does for generate.
    params = SamplingParams(n=n, temperature=1.0, max_new_tokens=new, batch_size=n)
    ours = torch.tensor(decode(model, batch["input_ids"], batch["attention_mask"], [0] * n, params, set(),
                               torch.Generator().manual_seed(0)))
    assert ours.shape == theirs.shape
    for position in range(new):
        a = np.bincount(theirs[:, position].numpy(), minlength=len(tokenizer))
        b = np.bincount(ours[:, position].numpy(), minlength=len(tokenizer))
        seen = (a + b) >= 10
        assert seen.sum() > 20
        assert stats.chi2_contingency(np.stack([a[seen], b[seen]])).pvalue > 1e-3, f"position {position}"


def test_the_sampler_benchmarks_ceiling_counts_the_model_s_own_linear_layers():
    from transformers import LlamaConfig

    from benchmarks.sampler import linear_shapes

    shapes = linear_shapes(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                                       num_attention_heads=4, num_key_value_heads=2, vocab_size=100))
    assert shapes == {(64, 64): 6, (64, 32): 6, (64, 128): 6, (128, 64): 3, (64, 100): 1}
