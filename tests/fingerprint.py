"""What a DAG run produced that must not change when the code is reorganised: every evaluated
completion, score and interval, every counted query, and the report's text, with what differs
between two runs of the same code left out (times, memory, disk use, dates, commits, hashes of the
config, the model's temporary path).

A DAG test compares its run with the fingerprint in tests/golden/<test>.json, written by the
code before a refactoring (`NOGRAD_WRITE_GOLDEN=1 pytest tests/test_pipeline.py`). Greedy
decoding of a random model is bit-exact only with the same CPU kernels, so the fingerprint
records torch's CPU capability and a machine with another compares nothing, and says so.

Text, counts and every value computed from them (completions, scores, intervals, queries, the
report) must be equal. Floats that come from the model's arithmetic (losses, projected gradients,
step sizes) are compared to within a few roundings instead: MKL picks its matmul kernels by CPU
model, not by the capability torch reports, so two AVX512 machines of this workplace gave a
MeZO loss one ulp apart (5.912366867 against 5.912367344), hence projected gradients 1.2e-4
apart, and ESSA's sigma 7e-10 relative apart, with every completion and score the same.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest
import torch

GOLDEN = Path(__file__).resolve().parent / "golden"
VOLATILE = re.compile(r"(_s|_mb|time|wall|memory|date|commit|hash|run_id|version|hardware|sandbox)$")
"""Keys whose values differ between two runs of the same code (`sandbox`: how the machine isolated
code, which tests/test_pipeline.py checks apart)."""
TIMED_TABLE = re.compile(r"\((s|MB)\)")
DURATION = r"(\d+ h \d+ min|\d+ min \d+ s|[\d,.]+ s)"
"""A time as the report writes it (reports/render.py `_duration`): '42 s', '1 min 05 s', '2 h 03 min'."""
RELATIVE = 1e-6
"""How far two machines' float results may differ, relative: about ten fp32 roundings."""
ABSOLUTE = {"projected_grad": 2e-3}
"""Floats that amplify a rounding: a projected gradient is a difference of two losses over 2 eps
(eps = 1e-3 here), so one ulp of one loss near 6 (4.8e-7) moves it by 2.4e-4 over the batch."""


def _stable(value, model: str):
    if isinstance(value, dict):
        return {k: _stable(v, model) for k, v in value.items() if not VOLATILE.search(k)}
    if isinstance(value, list):
        return [_stable(v, model) for v in value]
    if isinstance(value, str):
        return value.replace(model, "<model>")
    return value


def _report(text: str, model: str) -> list[str]:
    """The report's lines, less tables of times and memory, with run-specific values masked and
    runs of spaces and dashes squeezed (a table's padding follows the longest cell, the model's path)."""
    text = text.replace(model, "<model>")
    text = re.sub(r"\b[0-9a-f]{40}(-dirty)?", "<commit>", text)
    text = re.sub(r"(?<![0-9a-f])[0-9a-f]{12}\b", "<hash>", text)
    text = re.sub(r"\d{4}-\d{2}-\d{2}", "<date>", text)
    text = re.sub(DURATION + " of training and evaluation jobs", "<seconds> of training and evaluation jobs", text)
    text = re.sub(r"(Job time .*:\*\*) " + DURATION, r"\1 <seconds>", text)
    text = re.sub(r"(Disk \(results/\):\*\* peak) [\d,.]+ MB, [\d,.]+ MB", r"\1 <MB>, <MB>", text)
    text = re.sub(r"(Code isolation:\*\*) .*", r"\1 <isolation>", text)
    text = re.sub(" {2,}", " ", re.sub("-{3,}", "---", text))
    kept, table = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            table.append(line)
            continue
        if table and not TIMED_TABLE.search(table[0]):
            kept += table
        table = []
        kept.append(line)
    return kept


def fingerprint(results: Path, model: Path) -> dict:
    model = str(model)
    completions = {str(p.relative_to(results)): [json.loads(line) for line in p.read_text().splitlines()]
                   for p in sorted(results.glob("eval/*/*/*/completions.jsonl"))}
    return {
        "summary": _stable(json.loads((results / "summary.json").read_text()), model),
        "completions": _stable(completions, model),
        "report": _report((results / "report" / "report.md").read_text(), model),
    }


def assert_unchanged(name: str, results: Path, model: Path) -> None:
    """The run in `results` matches tests/golden/<name>.json (or writes it, with NOGRAD_WRITE_GOLDEN=1)."""
    path = GOLDEN / f"{name}.json"
    found = {"cpu_capability": torch.backends.cpu.get_cpu_capability(), **fingerprint(results, model)}
    if os.environ.get("NOGRAD_WRITE_GOLDEN"):
        path.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
        return
    golden = json.loads(path.read_text())
    if golden["cpu_capability"] != found["cpu_capability"]:
        pytest.skip(f"{path.name} was written with {golden['cpu_capability']} CPU kernels, this machine has "
                    f"{found['cpu_capability']}: greedy decoding of a random model can differ in the last bit")
    for part in ("summary", "completions", "report"):
        difference = next(differences(found[part], golden[part], (part,)), None)
        assert difference is None, f"the run differs from {path.name} at {difference}"


def differences(found, golden, path: tuple = ()):
    """Where `found` differs from `golden`: a path and both values, for each difference. Floats
    agree within RELATIVE (ABSOLUTE for the keys it names); everything else must be equal."""
    if isinstance(found, dict) and isinstance(golden, dict):
        for key in sorted(found.keys() | golden.keys()):
            if key not in found or key not in golden:
                yield f"{'.'.join(map(str, path + (key,)))}: only in {'golden' if key in golden else 'this run'}"
            else:
                yield from differences(found[key], golden[key], path + (key,))
    elif isinstance(found, list) and isinstance(golden, list):
        if len(found) != len(golden):
            yield f"{'.'.join(map(str, path))}: {len(found)} items here, {len(golden)} in the golden"
        for index, (a, b) in enumerate(zip(found, golden)):
            yield from differences(a, b, path + (index,))
    elif isinstance(found, float) and isinstance(golden, float):
        if not math.isclose(found, golden, rel_tol=RELATIVE, abs_tol=ABSOLUTE.get(str(path[-1]), 0.0)):
            yield f"{'.'.join(map(str, path))}: {found!r} here, {golden!r} in the golden"
    elif found != golden or type(found) is not type(golden):
        yield f"{'.'.join(map(str, path))}: {found!r} here, {golden!r} in the golden"
