"""What every benchmark shares: the embedded model, a GSM8K prompt, medians of timed runs, and
the table each writes. Benchmarks measure ratios side by side in one process; they are not tests."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Callable

from jobs import data

data.skip_unreachable_hub()  # before transformers and datasets are imported: they read it once

import torch  # noqa: E402

from core import models  # noqa: E402
from core.config import REPO, Config  # noqa: E402
from core.machine import describe, fingerprint, resolve  # noqa: E402
from core.sampler import prompt_text  # noqa: E402
from evals.tasks import get_task  # noqa: E402
from jobs.validation import load  # noqa: E402

OUT = Path("results/speed")


def embedded_model(dtype: str | None = None):
    """The embedded default model (converted once into results/model, as the DAG does), metered, in
    `dtype` or in the one `dtype: auto` chooses here."""
    from core import meters

    cfg: Config = resolve(load(REPO / "config" / "config.yaml"))[0]
    manifest = models.prepare(cfg.model, Path("results/model"))
    model, tokenizer = models.load(manifest, dtype or cfg.dtype, cfg.device)
    meters.Meters().attach(model)
    return model, tokenizer


def gsm8k_prompts(tokenizer, count: int = 1) -> list[str]:
    """The first `count` GSM8K test problems in the model's chat format."""
    task = get_task("gsm8k")
    problems, _ = task.load("test", data.data_dir(load(REPO / "config" / "config.yaml")))
    return [prompt_text(tokenizer, task.messages(p)) for p in problems[:count]]


def median_seconds(run: Callable[[], object], repeats: int, warm_up: Callable[[], object] | None = None):
    """Median wall-clock of `repeats` calls after one untimed warm-up call (`warm_up`, else `run`
    itself); and the last call's result."""
    (warm_up or run)()
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def machine() -> str:
    """The machine a table was measured on: CPU, cores, the flags that pick its kernels, torch and its threads."""
    return f"{describe(fingerprint())} ({torch.get_num_threads()} threads)"


def write_table(name: str, title: str, header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table, printed and written to results/speed/<name>.md."""
    lines = [f"**{title}** ({machine()})", "", "| " + " | ".join(header) + " |",
             "|" + "---|" * len(header)] + ["| " + " | ".join(row) + " |" for row in rows]
    text = "\n".join(lines) + "\n"
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.md").write_text(text)
    print(text)
    return text
