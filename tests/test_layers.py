"""Floors that point one way, read from the code's own import statements: every module imports only
from its floor and the floors below it (FLOORS), there is no import circle, and what only reads
the registries (the Snakefile's parse, the data, collect and report jobs) imports no training library."""

from __future__ import annotations

import ast
import graphlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TRAINING_LIBRARIES = ("trl", "peft", "cma", "datasets", "lm_eval")
FLOORS = {
    "core": {"core"},
    "evals": {"core", "evals"},
    "methods": {"core", "methods"},
    "reports": {"core", "reports", "evals.passk"},
    "jobs": {"core", "evals", "methods", "reports", "jobs"},
    "benchmarks": {"core", "evals", "methods", "reports", "jobs", "benchmarks"},
}
"""What each top-level package may import, by package or module: core at the bottom; evals (tasks,
grading, sandbox) and methods on it, apart; reports on core and evals' pure scoring; jobs and the
benchmarks on everything. The README's layout section shows the same floors."""


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def graph() -> dict[str, set[str]]:
    """Every module of the suite and the suite's modules it imports, anywhere in its source
    (inside functions and type-checking blocks too): `from a import b` names module a.b where
    that is a module, else a."""
    paths = {module_name(p): p for top in FLOORS for p in (REPO / top).rglob("*.py")}
    edges = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base]).strip(".")
                found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base for a in node.names)
        edges[name] = {m for m in found if m.split(".")[0] in FLOORS}
    return edges


def allowed(module: str, target: str) -> bool:
    return any(target == floor or target.startswith(floor + ".") for floor in FLOORS[module.split(".")[0]])


def test_every_import_points_down_a_floor():
    edges = graph()
    assert {"core.contract", "jobs.train", "methods.mezo", "evals.sandbox.child", "reports.render"} <= set(edges)
    upward = sorted(f"{m} -> {t}" for m, targets in edges.items() for t in targets if not allowed(m, t))
    assert not upward, "imports that point up or sideways: " + "; ".join(upward)


def test_no_import_circle():
    try:
        graphlib.TopologicalSorter(graph()).prepare()
    except graphlib.CycleError as error:
        pytest.fail(f"an import circle: {' -> '.join(error.args[1])}")


def engine_comparisons(source: str) -> list[str]:
    """Comparisons of a config's `sampler` or `training.population` with one of their values."""
    values = {"torch", "vllm", "process", "ray"}
    return [ast.unparse(node) for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Compare)
            and any(isinstance(side, ast.Attribute) and side.attr in ("sampler", "population")
                    for side in [node.left, *node.comparators])
            and any(isinstance(side, ast.Constant) and side.value in values for side in [node.left, *node.comparators])]


def test_only_the_backend_asks_where_sequences_are_generated_and_populations_scored():
    assert engine_comparisons("use = run.config.sampler == 'vllm' or cfg.training.population != 'ray'") == [
        "run.config.sampler == 'vllm'", "cfg.training.population != 'ray'"]
    found = {str(path.relative_to(REPO)): engine_comparisons(path.read_text())
             for top in FLOORS for path in (REPO / top).rglob("*.py")}
    assert found.pop("core/backend.py"), "the backend compares them"
    assert not {path: hits for path, hits in found.items() if hits}, "ask core.backend.Backend instead"


def test_the_floor_rule_catches_an_upward_import_and_a_circle():
    assert not allowed("reports.figures", "methods") and not allowed("evals.tasks.code", "reports.scores")
    assert not allowed("core.config", "methods") and not allowed("methods.mezo", "evals.tasks")
    assert allowed("reports.scores", "evals.passk") and not allowed("reports.scores", "evals.tasks")
    assert allowed("jobs.cli", "reports.power") and allowed("methods.sazo", "methods.mezo")
    with pytest.raises(graphlib.CycleError):
        graphlib.TopologicalSorter({"jobs.train": {"jobs.population"}, "jobs.population": {"jobs.train"}}).prepare()


def imported(*statements: str) -> set[str]:
    """The modules a fresh interpreter has imported after running `statements`."""
    code = "; ".join([*statements, "import sys", "print(' '.join(sys.modules))"])
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    return set(result.stdout.split())


def training_libraries(modules: set[str]) -> list[str]:
    return sorted({m.split(".")[0] for m in modules} & set(TRAINING_LIBRARIES))


def test_parsing_the_snakefile_imports_no_training_library(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path),
         "-n", "--quiet", "rules"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    modules = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in result.stderr.splitlines()
               if line.startswith("import time:")}
    assert "jobs" in modules and "methods" in modules, "the import profile did not cover the Snakefile's imports"
    assert not training_libraries(modules), f"the parse imported {training_libraries(modules)}"
    assert "math_verify" not in modules, "the parse imported math-verify (about 1 s), which only MATH's grading uses"


def test_data_collect_and_report_jobs_import_no_training_library():
    modules = imported("import jobs.cli, jobs.data, jobs.collect", "from jobs import validation",
                       "validation.paper_config()")  # every method's and task's record and config
    assert not training_libraries(modules), training_libraries(modules)


def test_every_benchmark_module_imports():
    """Benchmarks are not tests, so nothing else runs them: a name they import that moved would
    go unseen until someone measured."""
    names = sorted(module_name(path) for path in (REPO / "benchmarks").glob("*.py"))
    assert "benchmarks.sampler" in names and "benchmarks.population" in names
    assert set(names) <= imported(*(f"import {name}" for name in names))
