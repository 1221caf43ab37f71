"""Shared fixtures: a tiny randomly initialised Llama with its own small tokenizer, built in the
test session from a config (no download, no model package), and the offline environment."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

import pytest

if workers := os.environ.get("PYTEST_XDIST_WORKER_COUNT"):  # `make test` runs the tests on every core at once
    import torch

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(workers)))  # a share of the cores each, not all

# The files that take longest, longest first (`make test` prints the slowest tests): side by side,
# a file to a worker, a long file that started last would hold the run open alone. The others follow in their own order.
LONGEST_FIRST = ("test_pipeline", "test_vllm_engine", "test_killed", "test_tracking", "test_plugins", "test_plan",
                 "test_report", "test_population_ray")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: place for place, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: each file keeps its order


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# vLLM's CPU engine runs its model eagerly, as vLLM's own CPU CI has it, instead of compiling it with
# inductor at every engine start: the sampler-probe test took 107 s with the compile, 57 s without.
# Still the real engine (its scheduler, cache, sampling, LoRA and weight loading); runs keep the compile.
os.environ.setdefault("VLLM_CPU_CI_ENV", "1")

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"

CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. #### 72",
    "What is the value of $\\frac{1}{2} + \\frac{1}{3}$? The answer is \\boxed{\\frac{5}{6}}.",
    "def add(a, b):\n    return a + b\n\n```python\nprint(add(1, 2))\n```",
    "Let's think step by step and output the final answer after \"####\". 0123456789 + - * / = ( ) { } [ ]",
]


def build_tiny_model(path: Path, seed: int = 0, heads: int = 4) -> Path:
    """Save a 2-layer Llama (hidden 32, `heads` attention heads, half as many key/value heads, at
    least 1) and a byte-level BPE tokenizer with a ChatML template. vLLM's CPU attention takes
    head dimensions of 32 and up: heads=1."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<|im_start|>", "<|im_end|>"]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=384, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(CORPUS * 4, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|im_end|>",
                                        chat_template=CHATML)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=heads, num_key_value_heads=max(1, heads // 2), max_position_embeddings=1024,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"reference data not found at {SHARED_DATA}")
    return SHARED_DATA


TINY_SPLITS = {"gsm8k": {"train_size": 8, "test_size": 2}, "math": {"train_size": 8, "test_size": 2},
               "code": {"train_size": 4, "test_size": 2}}
"""Split sizes of the tiny experiment; a task registered later gets 8 training and 2 test problems."""


def tiny_config(model_dir: Path, **methods) -> dict:
    """An experiment on the tiny model small enough for the whole DAG to run in a test: every
    registered task, and the given methods (by default the base model and MeZO, at MeZO's tiny settings)."""
    from evals.tasks import TASKS
    from methods import METHODS

    return {
        "name": "tiny",
        "model": str(model_dir),
        # Set, not left to `auto`: the tests' numbers must not depend on which machine runs them.
        "dtype": "float32",
        "sampler": "torch",
        "seeds": [0],
        "tasks": {name: TINY_SPLITS.get(name, {"train_size": 8, "test_size": 2}) for name in {**TINY_SPLITS, **TASKS}
                  if name in TASKS},
        "methods": methods or {"base": {}, "mezo": METHODS["mezo"].test_settings},
        "evaluation": {"samples": 4, "max_new_tokens": 8, "batch_size": 8, "bootstrap_samples": 50,
                       "crosscheck": False},
        "training": {"max_new_tokens": 8, "checkpoint_every": 2},
    }


@pytest.fixture
def workdir(request, tmp_path, monkeypatch, tiny_model_dir):
    """A working directory with the tiny model, gsm8k data and tracking prepared, as the DAG
    would; `train(out)` and `evaluate(artifact, out)` run one MeZO job on gsm8k, seed 0, or a job
    of the method given by indirect parametrisation: `parametrize("workdir", [(name, settings)],
    indirect=True)`, or `[(name, settings, top-level config overrides)]`."""
    from types import SimpleNamespace

    from core import config, models
    from core.outputs import write_json
    from jobs import data, tracking, validation
    from jobs import evaluate as evaluation
    from jobs import train as training

    method, settings, *overrides = getattr(request, "param", ("mezo", {"steps": 4, "batch_size": 2}))
    monkeypatch.chdir(tmp_path)
    cfg = validation.validate({**tiny_config(tiny_model_dir, **{method: settings}),
                               **(overrides[0] if overrides else {})})
    run_cfg = config.for_run(cfg, method, "gsm8k", 0)
    models.prepare(cfg.model, Path("results/model"))
    data.prepare(cfg, "gsm8k", Path("results/data/gsm8k"))
    write_json(Path("results/tracking.json"), tracking.init(cfg))
    common = dict(data_dir=Path("results/data/gsm8k"), tracking_file=Path("results/tracking.json"))

    def train(out=f"results/train/{method}/gsm8k/seed0/artifact.json"):
        training.train(run_cfg, method, "gsm8k", 0, model_manifest=Path("results/model/manifest.json"),
                       out=Path(out), **common)
        return Path(out)

    def evaluate(artifact, out=f"results/eval/{method}/gsm8k/seed0/metrics.json", method=method):
        return evaluation.evaluate(run_cfg, method, "gsm8k", 0, artifact_file=Path(artifact), out=Path(out), **common)

    return SimpleNamespace(config=run_cfg, train=train, evaluate=evaluate)


@contextmanager
def killed_at_step(monkeypatch, step: int):
    """Training, run inside, is killed (KeyboardInterrupt) when it logs step `step`, as a kill
    between checkpoints would; the context expects the interruption and then undoes the patch."""
    from jobs import train as training

    log = training.TrainingRun.log

    def killed(self, **metrics):
        if self._step == step:
            raise KeyboardInterrupt
        log(self, **metrics)

    monkeypatch.setattr(training.TrainingRun, "log", killed)
    try:
        with pytest.raises(KeyboardInterrupt):
            yield
    finally:
        monkeypatch.setattr(training.TrainingRun, "log", log)


PLANNED = ("sequences_generated", "forward_passes", "backward_passes", "recompute_passes", "heldout_forward_passes")


def assert_as_planned(planned, meters: dict) -> None:
    """A run spent what `nograd plan` foresaw for it (`QueryCounts`): exactly, or at most where the plan is a bound."""
    for name in PLANNED:
        foreseen, spent = getattr(planned, name), meters[name]
        assert spent <= foreseen if planned.bound else spent == foreseen, f"{name}: {spent} spent, {foreseen} planned"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now: for the servers and daemons a test starts."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
