"""Atomic outputs: a killed job leaves nothing that Snakemake (or a rerun) would take as done.

Files and directories are written under a temporary name beside their destination and renamed
into place only when complete; a rename within one filesystem is atomic.

A job keeps what lets it resume in its work directory (`work_dir`) until its declared output is in
place, then removes it (`finished`): `results/work` holds only unfinished jobs' state.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator


@contextmanager
def atomic_path(path: Path, directory: bool = False) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces `path`, on failure it is removed.

    A file is written as a temporary file beside `path` (its suffix kept), so that once it is
    renamed into place nothing of the write is left: a job killed just after the rename (when its
    output has appeared) leaves no empty temporary folder behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if directory:
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
        try:
            yield tmp
            if path.exists():
                shutil.rmtree(path)
            os.replace(tmp, path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
    os.close(handle)
    tmp = Path(name)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_dir(path: Path):
    return atomic_path(path, directory=True)


def write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: Path, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())


RESULTS = Path("results")
"""Where every job writes, relative to the directory Snakemake runs the jobs in."""
WORK = RESULTS / "work"


def work_dir(stage: str, method: str, task: str, seed: int, config_hash: str) -> Path:
    """Where a job keeps what lets it resume (checkpoints, generated blocks, its MLflow run id),
    outside the outputs Snakemake deletes before a rerun, until the job has `finished`. One folder
    per job config: a job whose config changed starts afresh instead of resuming another config's
    state or MLflow run."""
    path = WORK / stage / method / task / f"seed{seed}" / config_hash
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileNotFoundError:  # a job `finished` meanwhile removed a parent it had left empty: once more
        path.mkdir(parents=True, exist_ok=True)
    return path


def finished(work: Path) -> None:
    """Remove a finished job's work directory, and the folders above it, up to `results/work`, that
    this leaves empty. Call it only once the job's declared output is (atomically) in place: a job
    killed before that keeps its work directory and resumes from it; one killed between the two
    leaves its output and a stale work directory, and Snakemake, which saw the job fail or left it
    marked incomplete, reruns it from that directory. What cannot be removed stays: a job whose
    output is written never fails over its scratch."""
    shutil.rmtree(work, ignore_errors=True)
    for parent in work.parents[: len(work.relative_to(WORK).parts) - 1]:
        try:
            parent.rmdir()
        except OSError:  # not empty: another job's work
            break


def disk_mb(root: Path = RESULTS) -> float:
    """MB (2**20 bytes) in the regular files under `root`, by their sizes (`st_size`): symlinks are
    neither followed nor counted. One `lstat` per file. A file or folder another job removes while
    it is counted counts as gone."""
    total = 0
    for folder, _, files in os.walk(root):  # os.walk skips a folder it cannot list
        for name in files:
            try:
                info = os.lstat(os.path.join(folder, name))
            except FileNotFoundError:
                continue
            if stat.S_ISREG(info.st_mode):
                total += info.st_size
    return total / 2**20
