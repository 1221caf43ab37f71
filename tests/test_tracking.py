"""MLflow tracking under many writers: SQLite in WAL mode for one machine, PostgreSQL (directly or
through an MLflow server) for a cluster; and the UI opens on the runs table."""

import json
import multiprocessing
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Iterator

import mlflow
import psutil
import pytest

from conftest import free_port
from core import config
from core.errors import NogradError
from jobs import tracking, validation
from test_report_html import BROWSER, browse

STEPS = 5
"""Metric steps each writer logs."""


def experiment(tracking_uri: str, name: str = "writers") -> config.Config:
    return validation.validate({"name": name, "model": "tiny", "tasks": {"gsm8k": {}}, "methods": {"base": {}},
                            "seeds": [0], "tracking_uri": tracking_uri})


def write_one_run(coordinates: dict, cfg: config.Config, index: int, start, artifacts) -> None:
    """One writer, as a training job writes: the config as params, provenance tags, a metric
    history and an artifact, all at once with the others."""
    start.wait()
    tags = {"nograd.kind": "train", "nograd.writer": str(index)}
    with tracking.mlflow_run(coordinates, cfg, f"writer {index}", tags):
        for step in range(STEPS):
            mlflow.log_metrics({"reward": index + step / 10, "loss": 1.0 / (step + 1)}, step=step)
        path = artifacts / f"writer{index}.txt"
        path.write_text(f"writer {index}\n")
        mlflow.log_artifact(str(path))


CONTEXT = multiprocessing.get_context("forkserver")
"""Writers are forked from a fresh server process, with MLflow and the harness imported once: fast to
start, and free of the threads this test process may hold (a fork keeps their locks, not them)."""
CONTEXT.set_forkserver_preload(["jobs.tracking"])


def concurrently(count: int, coordinates_of, cfg: config.Config, artifacts: Path) -> None:
    """`count` writers released together, writer i to `coordinates_of(i)`; each must exit 0."""
    start = CONTEXT.Barrier(count)
    processes = [CONTEXT.Process(target=write_one_run, args=(coordinates_of(i), cfg, i, start, artifacts))
                 for i in range(count)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=300)
    assert [p.exitcode for p in processes] == [0] * count, "a writer failed (its traceback is above)"


def _call(queue, function, args) -> None:
    queue.put(function(*args))


def in_child(function, *args):
    """`function(*args)` in a process of its own, so that this one never opens the store the writers use."""
    queue = CONTEXT.Queue()
    process = CONTEXT.Process(target=_call, args=(queue, function, args))
    process.start()
    process.join(timeout=120)
    assert process.exitcode == 0, f"{function.__name__} failed in its process (its traceback is above)"
    return queue.get(timeout=10)


def assert_nothing_lost(tracking_uri: str, cfg: config.Config, count: int) -> None:
    mlflow.set_tracking_uri(tracking_uri)
    client = mlflow.MlflowClient()
    runs = mlflow.search_runs(experiment_names=[cfg.name], output_format="list")
    assert sorted(int(r.data.tags["nograd.writer"]) for r in runs) == list(range(count))
    params = tracking.flatten(config.to_dict(cfg))
    for r in runs:
        index = int(r.data.tags["nograd.writer"])
        assert r.info.status == "FINISHED" and r.data.params == params
        for key in ("reward", "loss"):
            assert [m.step for m in client.get_metric_history(r.info.run_id, key)] == list(range(STEPS))
        assert [a.path for a in client.list_artifacts(r.info.run_id)] == [f"writer{index}.txt"]


def test_eight_writers_on_sqlite_lose_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = experiment(f"sqlite:///{tmp_path / 'mlflow.db'}")
    coordinates = in_child(tracking.init, cfg)
    with sqlite3.connect(tmp_path / "mlflow.db") as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",), "readers and a writer at once need WAL"
    concurrently(8, lambda i: coordinates, cfg, tmp_path)
    assert_nothing_lost(cfg.tracking_uri, cfg, 8)


def _killed_while_mlflow_migrates(cfg: config.Config, operations: int) -> None:
    """`tracking.init(cfg)`, SIGKILLed before its migrations' operation number `operations`."""
    from alembic.operations import Operations

    invoke, done = Operations.invoke, []

    def counted(self, operation):
        if len(done) == operations:
            os.kill(os.getpid(), signal.SIGKILL)
        done.append(operation)
        return invoke(self, operation)

    Operations.invoke = counted
    tracking.init(cfg)


@pytest.mark.parametrize("operations", [10, 40])
def test_a_new_store_killed_while_mlflow_migrates_it_is_built_whole_by_the_rerun(tmp_path, operations):
    """MLflow creates a new store's tables, then migrates them, statement by statement, for
    seconds: the first seconds of a DAG, where a kill lands easily. Killed inside a migration, a
    store in place was refused by the rerun ("index index_params_run_uuid already exists" at the
    10th operation, "table evaluation_datasets already exists" at the 40th), and so by every job.
    Built aside and moved into place whole, it is either there complete or not there."""
    store = tmp_path / "results" / "mlflow.db"
    store.parent.mkdir()
    cfg = experiment(f"sqlite:///{store}")
    killed = CONTEXT.Process(target=_killed_while_mlflow_migrates, args=(cfg, operations))
    killed.start()
    killed.join(timeout=120)
    assert killed.exitcode == -signal.SIGKILL
    assert not store.exists(), "a half-built store where the jobs look for it"
    coordinates = in_child(tracking.init, cfg)
    assert not any(store.parent.glob(".mlflow.db.*")), "the killed build was left behind"
    concurrently(1, lambda i: coordinates, cfg, tmp_path)
    assert_nothing_lost(cfg.tracking_uri, cfg, 1)


@contextmanager
def serving(command: list[str], port: int, cwd: Path) -> Iterator[str]:
    """`command` (a nograd command that serves MLflow on `port`) running until the block ends; its first line."""
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"})
    try:
        first = process.stdout.readline()
        for _ in range(120):
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read() == b"OK":
                    break
            except OSError:
                assert process.poll() is None, first + process.stdout.read()
                time.sleep(0.5)
        else:
            pytest.fail(f"{' '.join(command)} did not answer on port {port} within a minute")
        runners = []
        for child in psutil.Process(process.pid).children(recursive=True):
            with suppress(psutil.NoSuchProcess):  # one that ended since it was listed runs nothing
                if "mlflow.server.jobs" in (line := " ".join(child.cmdline())):
                    runners.append(line)
        assert not runners, f"the server started MLflow's job runner, which nograd never uses: {runners}"
        yield first
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    with socket.socket() as probe:  # `mlflow server` serves from a child process, which must stop too
        assert probe.connect_ex(("127.0.0.1", port)) != 0, f"{' '.join(command)} left its server running"


try:
    POSTGRES = tracking._postgres_bin("initdb")  # where `nograd mlflow-server` looks for it
except NogradError:
    POSTGRES = None


@pytest.mark.skipif(POSTGRES is None, reason="PostgreSQL's server is not installed (Debian: apt-get install "
                                              "postgresql; `make test` installs it where apt-get can)")
def test_sixteen_writers_on_postgresql_through_the_server_and_directly_lose_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the experiment's artifacts go to results/mlartifacts here, not in the checkout
    port, database_port = free_port(), free_port()
    data = Path(tempfile.mkdtemp(prefix="nograd-pg-"))  # PostgreSQL's own user cannot enter pytest's tmp_path
    command = [sys.executable, "-m", "jobs.cli", "mlflow-server", "--data", str(data), "--port", str(port),
               "--database-port", str(database_port)]
    try:
        with serving(command, port, tmp_path) as said:
            server = f"http://127.0.0.1:{port}"
            assert f"set tracking_uri: {server}" in said
            database = f"postgresql://mlflow@127.0.0.1:{database_port}/mlflow"
            cfg = experiment(server)
            coordinates = in_child(tracking.init, cfg)
            # Half the writers through the server, half straight to the database, all at once.
            direct = {**coordinates, "tracking_uri": database}
            concurrently(16, lambda i: coordinates if i % 2 else direct, cfg, tmp_path)
            assert_nothing_lost(database, cfg, 16)
        assert not (data / "postmaster.pid").exists(), "stopping the server must stop its PostgreSQL"
    finally:
        shutil.rmtree(data, ignore_errors=True)


@pytest.mark.skipif(BROWSER is None, reason="chromium is not installed (Debian: apt-get install -y chromium; "
                                             "`make test` installs it where apt-get can)")
def test_the_ui_url_the_readme_gives_opens_on_the_runs_table(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = experiment("sqlite:///results/mlflow.db", name="tiny")
    coordinates = in_child(tracking.init, cfg)
    (tmp_path / "results" / "tracking.json").write_text(json.dumps(coordinates))
    concurrently(2, lambda i: coordinates, cfg, tmp_path)
    port = free_port()
    # What `make mlflow-ui` runs, with another port.
    with serving([sys.executable, "-m", "jobs.cli", "mlflow-ui", "--port", str(port)], port, tmp_path) as said:
        url = said.removeprefix("runs: ").strip()
        assert url == f"http://127.0.0.1:{port}/#/experiments/{coordinates['experiment_id']}/runs?workflowType=" \
                      "machine_learning"
        dom = browse(url, tmp_path / "profile")
    text = re.sub(r"(\s*<[^>]+>\s*)+", "|", re.sub(r"<(script|style).*?</\1>", "", dom, flags=re.S))
    assert "<title>Runs - Experiment" in dom and "|Run Name|" in text and "|2|matching runs|" in text, text[:2000]
    assert "|writer 0|" in text and "|writer 1|" in text, "the runs table lists the runs by name"
    assert "|nograd experiment|tiny|:" in text, "the experiment's description heads the table"
