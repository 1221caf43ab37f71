"""A run killed with SIGKILL (the whole Snakemake process group, as an out-of-memory killer or a
lost node would) at three points of the tiny DAG, and rerun each time, ends with the results an
uninterrupted run gives: finished jobs are not redone, the killed training job resumes from its
checkpoint and its MLflow run, and no partial file is taken as done."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from conftest import tiny_config
from core.outputs import read_json
from fingerprint import fingerprint
from test_pipeline import REPO, snakemake

MEZO = {"steps": 60, "batch_size": 2, "eval_every": 30, "heldout_size": 2}
"""Long enough (a few seconds) that a kill can land between a checkpoint and the job's end."""


def killed_when(workdir: Path, condition, timeout_s: float = 600) -> bool:
    """Start the DAG and SIGKILL its whole process group as soon as `condition()` holds; False
    when the DAG finished first. A killed Snakemake leaves its lock: `--unlock` lifts it, as the
    README tells a user to."""
    unlocked = snakemake(workdir, "--configfile", str(workdir / "config.yaml"), "--unlock")
    assert unlocked.returncode == 0, unlocked.stderr[-2000:]
    log = workdir / "snakemake.log"
    with open(log, "w") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
             "--workflow-profile", str(REPO / "profiles" / "default"), "--configfile", str(workdir / "config.yaml"),
             "--cores", "2"],
            stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
        )
    deadline = time.monotonic() + timeout_s
    try:
        while process.poll() is None and time.monotonic() < deadline:
            if condition():
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                return True
            time.sleep(0.02)
        ended = "timed out" if process.poll() is None else f"ended first, exit status {process.returncode}"
        print(f"the DAG {ended} before the condition held; its output:\n{log.read_text()[-6000:]}")
        return False
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_a_dag_killed_three_times_ends_as_an_uninterrupted_run(tmp_path, tiny_model_dir):
    cfg = {**tiny_config(tiny_model_dir, base={}, mezo=MEZO), "tasks": {"gsm8k": {"train_size": 8, "test_size": 2}}}
    cfg["training"]["checkpoint_every"] = 5
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    for directory in (whole, killed):
        directory.mkdir()
        (directory / "config.yaml").write_text(yaml.safe_dump(cfg))
    done = snakemake(whole, "--configfile", str(whole / "config.yaml"), "--cores", "2")
    assert done.returncode == 0, done.stderr[-3000:]

    results = killed / "results"
    checkpoints = lambda: list((results / "work" / "train" / "mezo").glob("gsm8k/seed0/*/checkpoint/state.pt"))  # noqa: E731
    trained = results / "train" / "mezo" / "gsm8k" / "seed0" / "artifact.json"
    # 1: as the first jobs finish; 2: the training job after a checkpoint; 3: during evaluation.
    assert killed_when(killed, lambda: (results / "model" / "manifest.json").exists())
    assert killed_when(killed, lambda: bool(checkpoints()) and not trained.exists())
    [work] = [path.parent.parent for path in checkpoints()]
    run_id = (work / "mlflow_run_id").read_text().strip()
    before = {path: path.stat().st_mtime_ns for path in results.glob("data/*/manifest.json")}
    before[results / "model" / "manifest.json"] = (results / "model" / "manifest.json").stat().st_mtime_ns
    assert killed_when(killed, lambda: any(results.glob("eval/*/gsm8k/seed0/metrics.json"))
                       and not (results / "summary.json").exists())
    assert snakemake(killed, "--configfile", str(killed / "config.yaml"), "--unlock").returncode == 0
    final = snakemake(killed, "--configfile", str(killed / "config.yaml"), "--cores", "2")
    assert final.returncode == 0, final.stderr[-3000:]

    assert {path: path.stat().st_mtime_ns for path in before} == before, "a finished job was redone"
    assert read_json(trained)["run_id"] == run_id, "the killed training job started over instead of resuming"
    assert not list(results.rglob(".*.json.*")), "a temporary file of an interrupted write was left behind"
    assert fingerprint(results, tiny_model_dir) == fingerprint(whole / "results", tiny_model_dir), (
        "the killed and rerun DAG ended with other results than the uninterrupted one")
