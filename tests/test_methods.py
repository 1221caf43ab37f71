"""Every registered method, at its record's test settings, through train -> kill -> resume ->
evaluate: the resumed run leaves the artifact kind its record declares and answers exactly as an
uninterrupted run does, and training and evaluation spend what `nograd plan` foresaw for them. A
new method is covered by registering it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import assert_as_planned, killed_at_step
from core import models
from core.outputs import read_json
from jobs import data
from jobs.evaluate import queries as evaluation_queries
from methods import METHODS


def answers(workdir, artifact: Path, out: str, inference_passes: int = 1) -> str:
    """The evaluation's completions of `artifact`, as written; its cost is the plan's."""
    result = workdir.evaluate(artifact, f"{out}/metrics.json")
    assert_as_planned(evaluation_queries(workdir.config, result["problems"], inference_passes), result["cost"]["eval"])
    return Path(out, "completions.jsonl").read_text()


@pytest.mark.parametrize("workdir", [(name, METHODS[name].test_settings) for name in METHODS], ids=list(METHODS),
                         indirect=True)
def test_trains_resumes_and_evaluates_as_an_uninterrupted_run(workdir, monkeypatch):
    [name] = workdir.config.methods
    whole = workdir.train("results/whole/artifact.json")
    assert read_json(whole)["kind"] in METHODS[name].outputs, f"{name} returned a kind its record does not declare"
    assert METHODS[name].queries, f"{name} registers no queries: nograd plan cannot foresee its cost"
    train = data.read_split(Path("results/data/gsm8k/train.jsonl"))
    planned = METHODS[name].queries(workdir.config.methods[name], train, models.skeleton(workdir.config.model))
    assert_as_planned(planned, read_json(whole.parent / "metrics.json")["meters"])
    reference = answers(workdir, whole, "results/whole-eval", planned.inference_passes)

    steps = [row["step"] for row in read_json(whole.parent / "metrics.json")["history"]]
    if not steps:
        assert name == "base", f"{name} logged no step: its run cannot be interrupted and resumed"
        return
    shutil.rmtree("results/work")
    with killed_at_step(monkeypatch, steps[-1]):
        workdir.train("results/resumed/artifact.json")
    assert not Path("results/resumed/artifact.json").exists(), "a killed run must not leave its artifact"
    resumed = workdir.train("results/resumed/artifact.json")
    assert answers(workdir, resumed, "results/resumed-eval", planned.inference_passes) == reference, (
        f"{name}: the resumed run answers differently from the uninterrupted one")
