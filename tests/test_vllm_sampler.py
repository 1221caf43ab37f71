"""`sampler: vllm`: a clear error where vLLM is absent, and, with vLLM's offline API answered by
a stand-in that decodes with the torch sampler, the requests nograd makes: the same greedy
answers and counts as the torch backend, for every artifact kind, and LoRA populations served
fresh at every generation.

vLLM needs a CUDA GPU and is not installed on the test machine: these tests check nograd's side
of the API (requests, seeds, adapter ids, materialised weights, meters), not vLLM itself."""

from __future__ import annotations

import dataclasses
import importlib.machinery
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import tiny_config
from core import config, meters, models, spaces
from core.errors import NogradError
from core.outputs import write_json
from core.sampler import SamplingParams, sample
from jobs import validation


class FakeLLM:
    """vLLM's `LLM` as nograd calls it. Each request is decoded by the torch sampler; LoRA
    adapters are loaded by id and kept, as vLLM keeps them, so a reused id serves stale weights."""

    engines: list[FakeLLM] = []

    def __init__(self, model: str, dtype: str, seed: int, gpu_memory_utilization: float, **lora) -> None:
        self.path, self.lora, self.adapters = model, lora, {}
        self.members_on_disk = sorted(path.name for path in Path("results/work").rglob("member*"))
        self.model, self.tokenizer = models.load(model)
        meters.Meters().attach(self.model)
        FakeLLM.engines.append(self)

    def _with_adapter(self, request):
        from peft import PeftModel

        if request.lora_int_id not in self.adapters:
            base, _ = models.load(self.path)
            merged = PeftModel.from_pretrained(base, request.lora_path).merge_and_unload()
            meters.Meters().attach(merged)
            self.adapters[request.lora_int_id] = merged
        return self.adapters[request.lora_int_id]

    def generate(self, prompts, sampling_params, lora_request=None, use_tqdm=True):
        outputs = []
        for k, (prompt, request) in enumerate(zip(prompts, sampling_params)):
            model = self.model if lora_request is None else self._with_adapter(lora_request[k])
            params = SamplingParams(n=request.n, temperature=request.temperature, top_p=request.top_p,
                                    max_new_tokens=request.max_tokens, seed=(request.seed or 0) % 2**31)
            [row] = sample(model, self.tokenizer, [prompt], params)
            outputs.append(types.SimpleNamespace(
                prompt_token_ids=self.tokenizer(prompt)["input_ids"],
                outputs=[types.SimpleNamespace(token_ids=Tokens([0] * c.tokens, text=c.text),
                                               finish_reason="stop" if c.finished else "length") for c in row]))
        return outputs

    def get_tokenizer(self):
        """Decodes the stand-in's token ids (placeholders) into the text the torch sampler wrote."""
        return types.SimpleNamespace(decode=lambda ids, skip_special_tokens: ids.text)


class Tokens(list):
    """A completion's token ids, carrying its text: the stand-in samples with the torch sampler,
    which returns texts, not ids (the real engine's decoding is tested in test_vllm_engine.py)."""

    def __init__(self, ids: list[int], text: str) -> None:
        super().__init__(ids)
        self.text = text


class FakeRequest(types.SimpleNamespace):
    def __init__(self, n=1, temperature=1.0, top_p=1.0, max_tokens=16, seed=None, detokenize=True):
        super().__init__(n=n, temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed)


@pytest.fixture
def fake_vllm(monkeypatch):
    vllm = types.ModuleType("vllm")
    vllm.__spec__ = importlib.machinery.ModuleSpec("vllm", None)
    vllm.LLM, vllm.SamplingParams = FakeLLM, FakeRequest
    lora, request = types.ModuleType("vllm.lora"), types.ModuleType("vllm.lora.request")
    request.LoRARequest = lambda name, number, path: types.SimpleNamespace(lora_name=name, lora_int_id=number,
                                                                            lora_path=path)
    for name, module in {"vllm": vllm, "vllm.lora": lora, "vllm.lora.request": request}.items():
        monkeypatch.setitem(sys.modules, name, module)
    FakeLLM.engines = []
    return FakeLLM


def test_without_vllm_the_vllm_sampler_is_one_clear_line_and_torch_needs_nothing(tiny_model_dir):
    assert "vllm" not in sys.modules or sys.modules["vllm"].__spec__ is None
    with pytest.raises(NogradError, match=r"^config: sampler: 'vllm' needs vLLM installed .*'torch' runs anywhere$"):
        validation.validate({**tiny_config(tiny_model_dir), "sampler": "vllm"})
    assert validation.validate(tiny_config(tiny_model_dir)).sampler == "torch"


def write_artifacts(tiny_model_dir: Path) -> None:
    """seeds.json, adapter.json and ensemble.json (of an adapter and a seed list) on the tiny model,
    and the untrained metrics.json beside them that an evaluation reads."""
    from peft import LoraConfig, get_peft_model

    base, _ = models.load(tiny_model_dir)
    get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False)).save_pretrained("lora")
    write_json(Path("seeds.json"), {"kind": "seeds", "base": str(tiny_model_dir), "terms": [[3, 0.01]], "run_id": "r"})
    write_json(Path("adapter.json"), {"kind": "adapter", "base": str(tiny_model_dir), "path": "lora", "run_id": "r"})
    write_json(Path("ensemble.json"), {"kind": "ensemble", "base": str(tiny_model_dir), "run_id": "r",
                                       "members": [{"kind": "adapter", "path": "lora"},
                                                   {"kind": "seeds", "terms": [[4, 0.01]]}]})
    write_json(Path("metrics.json"), {"trained": False})


def evaluate_with_vllm(workdir, name: str, out: str) -> dict:
    """`name`.json evaluated as the workdir's job would be, under `sampler: vllm`."""
    from jobs import evaluate as evaluation

    vllm_config = validation.validate({**config.to_dict(workdir.config), "sampler": "vllm"})
    return evaluation.evaluate(vllm_config, name, "gsm8k", 0, artifact_file=Path(f"{name}.json"),
                               data_dir=Path("results/data/gsm8k"), tracking_file=Path("results/tracking.json"),
                               out=Path(out))


def test_evaluation_through_vllm_gives_the_torch_backends_greedy_answers_and_counts(workdir, fake_vllm,
                                                                                   tiny_model_dir):
    """A seed-list artifact (written out once for the engine), an adapter artifact (merged) and
    an ensemble of both: greedy completions and sequence counts as the torch sampler's; the
    weights written for a member are gone once its engine is closed."""
    write_artifacts(tiny_model_dir)
    for name in ("seeds", "adapter", "ensemble"):
        artifact = Path(f"{name}.json")
        want = workdir.evaluate(artifact, f"results/eval/torch-{name}/metrics.json", method=name)
        engines = len(fake_vllm.engines)
        got = evaluate_with_vllm(workdir, name, f"results/eval/vllm-{name}/metrics.json")
        assert got["greedy"] == want["greedy"], name
        assert len(fake_vllm.engines) - engines == got["inference_passes"], "one engine per member"
        assert [e.members_on_disk for e in fake_vllm.engines[engines:]] == [
            [Path(e.path).name] for e in fake_vllm.engines[engines:]], "a member's weights go with its engine"
        assert list(Path("results/work").iterdir()) == [], "nothing left once the evaluation is done"
        for key in ("sequences_generated", "forward_passes"):  # sampled rows differ: other seeds
            assert got["cost"]["eval"][key] == want["cost"]["eval"][key], (name, key)
        greedy = [line for line in Path(f"results/eval/vllm-{name}/completions.jsonl").read_text().splitlines()
                  if '"mode": "greedy"' in line]
        assert greedy == [line for line in Path(f"results/eval/torch-{name}/completions.jsonl").read_text().splitlines()
                          if '"mode": "greedy"' in line]
    assert any(Path(e.path).name == "member1" for e in fake_vllm.engines), "a seed-list member is written out to serve"


def test_a_killed_vllm_evaluation_resumes_to_the_same_completions(workdir, fake_vllm, tiny_model_dir, monkeypatch):
    """An ensemble evaluated through vLLM, killed while its second member generates, leaves that
    member's weights (its first member's went with its engine); resumed, it gives the completions
    an uninterrupted evaluation gives and leaves no weights behind."""
    write_artifacts(tiny_model_dir)
    evaluate_with_vllm(workdir, "ensemble", "results/eval/whole/metrics.json")
    generate = FakeLLM.generate

    def killed_in_member1(self, *args, **kwargs):
        if Path(self.path).name == "member1":
            raise KeyboardInterrupt
        return generate(self, *args, **kwargs)

    monkeypatch.setattr(FakeLLM, "generate", killed_in_member1)
    with pytest.raises(KeyboardInterrupt):
        evaluate_with_vllm(workdir, "ensemble", "results/eval/resumed/metrics.json")
    assert sorted(path.name for path in Path("results/work").rglob("member*")) == ["member1"]
    monkeypatch.setattr(FakeLLM, "generate", generate)
    evaluate_with_vllm(workdir, "ensemble", "results/eval/resumed/metrics.json")
    assert Path("results/eval/resumed/completions.jsonl").read_text() == \
        Path("results/eval/whole/completions.jsonl").read_text()
    assert list(Path("results/work").iterdir()) == []


def test_population_rollout_through_vllm_serves_every_generations_own_adapters(tiny_model_dir, tmp_path, monkeypatch,
                                                                                fake_vllm):
    """ESSA's batched population under `sampler: vllm`: one LoRA request per row, the adapters
    saved anew each generation under ids never used before (and removed after it), the completions
    those of peft's mixed-adapter batch."""
    from peft import LoraConfig, get_peft_model

    from jobs import data
    from jobs import train as training

    monkeypatch.chdir(tmp_path)
    with torch.no_grad():  # a copy of the tiny model whose completions depend on its weights
        base, tokenizer = models.load(tiny_model_dir)
        for name, param in base.named_parameters():
            if "norm" not in name:
                param.normal_(0, 0.3, generator=torch.Generator().manual_seed(0))
        base.save_pretrained("model")
        tokenizer.save_pretrained("model")
    raw = {**tiny_config(Path("model").resolve(), essa={}), "sampler": "vllm"}
    cfg = config.for_run(validation.validate(raw), "essa", "gsm8k", 0)
    data.prepare(cfg, "gsm8k", Path("data"))
    run = training.TrainingRun(cfg, "essa", "gsm8k", 0, models.prepare(cfg.model, Path("results/model")), Path("data"),
                       Path("out"), Path("work"))
    run.model = get_peft_model(run.model, LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    space, problems = spaces.SingularValues(run.model, "each"), run.train[:2]
    texts = []
    monkeypatch.setattr(run, "reward", lambda problem, text: texts.append(text) or 0.0)
    for generation in range(2):
        candidates = [space.get() * np.random.default_rng([generation, j]).uniform(0, 40, space.get().size)
                      for j in range(3)]
        for sampler in ("torch", "vllm"):
            run.backend = dataclasses.replace(run.backend, sampler=sampler)
            texts.clear()
            with space.population(run.model, candidates) as adapters:
                run.population_rollout(problems, adapters)
            if sampler == "torch":
                want = list(texts)
        assert texts == want, f"generation {generation}"
        assert len(set(texts)) > len(problems), "the candidates must answer differently"
    [engine] = fake_vllm.engines
    assert engine.lora == {"enable_lora": True, "max_loras": 3, "max_lora_rank": 8}
    assert sorted(engine.adapters) == list(range(1, 7)), "a fresh id for every adapter of every generation"
    assert not Path("work/population").exists(), "each generation's adapters go once vLLM has read them"
    assert list(run.model.peft_config) == ["default"]
