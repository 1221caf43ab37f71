"""Layers that point one way: what only reads the registries (the Snakefile's parse, the data,
collect and report jobs) never imports a training library; evaluation never imports the report."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRAINING_LIBRARIES = ("trl", "peft", "cma", "datasets", "lm_eval")


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
    assert "harness" in modules and "methods" in modules, "the import profile did not cover the Snakefile's imports"
    assert not training_libraries(modules), f"the parse imported {training_libraries(modules)}"


def test_data_collect_and_report_jobs_import_no_training_library():
    modules = imported("import jobs.cli, jobs.data, jobs.collect", "from harness import config",
                       "config.paper_config()")  # every method's and task's record and config
    assert not training_libraries(modules), training_libraries(modules)


def test_evaluation_does_not_import_the_report_renderer():
    modules = imported("import jobs.evaluate")
    assert "reports.figures" in modules and "reports.render" not in modules
