"""MLflow tracking, opened by the harness for every method alike.

The store and the experiment are created once by the `tracking` rule, before Snakemake fans
out, so parallel jobs never race to migrate the schema or create the experiment; each job then
opens its own run in that experiment.

Stores (`tracking_uri`): a SQLite file for one machine, put in WAL mode here so that the UI
reads while jobs write; for jobs on many machines (SLURM), a database server
(`postgresql://...`) or an MLflow server (`http://...`), e.g. the one `nograd mlflow-server`
starts on a local PostgreSQL. SQLite's locks do not hold on network filesystems.
"""

from __future__ import annotations

import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
import mlflow  # noqa: E402  (telemetry must be off before the import)
import torch  # noqa: E402

from core.config import REPO, Config, config_hash, to_dict  # noqa: E402
from core.errors import NogradError  # noqa: E402

ARTIFACT_ROOT = Path("results/mlartifacts")
REPORT = Path("results/report/report.html")
"""Where the Snakefile's report rule writes the report, relative to the working directory."""
MODEL_TRAINING = {"mlflow.experimentKind": "custom_model_development"}
"""The experiment kind MLflow 3's UI reads to open an experiment on its runs, not its GenAI pages."""


def init(cfg: Config) -> dict:
    """Create the tracking store and the experiment (marked as model training, with a description);
    return their coordinates. A new SQLite store is built beside its place and moved there whole:
    MLflow creates its tables, then migrates them statement by statement for seconds, and a store
    killed inside a migration was refused by the rerun and every later job (an index or a table
    "already exists": tests/test_tracking.py)."""
    if cfg.tracking_uri.startswith(("http://", "https://")):
        _answers(cfg.tracking_uri)
    if not cfg.tracking_uri.startswith("sqlite:"):
        return _experiment(cfg.tracking_uri, cfg.name)
    from sqlalchemy.engine import make_url

    database = Path(make_url(cfg.tracking_uri).database).resolve()
    if database.exists():
        coordinates = _experiment(cfg.tracking_uri, cfg.name)
    else:
        database.parent.mkdir(parents=True, exist_ok=True)
        for stale in database.parent.glob(f".{database.name}.*.partial"):  # a killed build's
            stale.unlink()
        # A name of its own: MLflow keeps the store of each URI it opened, its connection
        # included, for the process's life, and a name used twice would reach a moved file.
        handle, partial = tempfile.mkstemp(suffix=".partial", prefix=f".{database.name}.", dir=database.parent)
        os.close(handle)
        coordinates = _experiment(f"sqlite:///{partial}", cfg.name)
        os.replace(partial, database)
        mlflow.set_tracking_uri(cfg.tracking_uri)
    with sqlite3.connect(database, timeout=60) as db:
        # WAL, which the file keeps: readers (the UI, `search_runs`) no longer block the writer,
        # nor it them. Each MLflow session waits 20 s on a lock (its busy timeout).
        db.execute("PRAGMA journal_mode=WAL")
    return {**coordinates, "tracking_uri": cfg.tracking_uri}


def _experiment(uri: str, name: str) -> dict:
    """The coordinates of experiment `name` in the store at `uri`, created (with its tags) where it is not."""
    mlflow.set_tracking_uri(uri)
    client = mlflow.MlflowClient()
    experiment = client.get_experiment_by_name(name)
    experiment_id = (
        experiment.experiment_id
        if experiment
        else client.create_experiment(name, artifact_location=ARTIFACT_ROOT.resolve().as_uri())
    )
    note = (f"nograd experiment *{name}*: one training run per method, task and seed, each with its "
            f"evaluation as a child run, and a summary run holding the report. Report: {_report_link()}")
    for key, value in {**MODEL_TRAINING, "mlflow.note.content": note}.items():
        client.set_experiment_tag(experiment_id, key, value)
    return {"tracking_uri": uri, "experiment_id": experiment_id, "experiment": name}


def _answers(server: str) -> None:
    """Fail at once, in one line, where no MLflow server answers: MLflow's own client retries for
    minutes, which jobs want through a server's restart, but not a run that never had one."""
    import urllib.request

    try:
        urllib.request.urlopen(f"{server.rstrip('/')}/health", timeout=10)
    except OSError as error:
        raise NogradError(f"tracking_uri {server}: no MLflow server answers ({getattr(error, 'reason', error)}); "
                          "start one (`make mlflow-server`) or use a sqlite:/// or postgresql:// store") from None


def _report_link() -> str:
    return f"[{REPORT}]({REPORT.resolve().as_uri()}), also the artifacts of the summary run"


def description(name: str, tags: dict[str, str]) -> str:
    """A run's description (`mlflow.note.content`, Markdown): what it is, and where the report is."""
    kind = tags.get("nograd.kind")
    subject = f"`{tags.get('nograd.method')}` on `{tags.get('nograd.task')}`, seed {tags.get('nograd.seed')}"
    what = {"train": f"Training of {subject}; its evaluation is the child run.",
            "eval": f"Evaluation of {subject}: greedy accuracy and pass@k on the test split, every completion "
                    "in completions.jsonl.",
            "summary": "The comparison of every method: the report, its tables and figures, and summary.json."}
    return f"{what.get(kind, name)} Report: {_report_link()}."


def git_commit() -> str:
    try:
        commit = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return commit + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def hardware() -> str:
    if torch.cuda.is_available():
        return f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
    return f"{os.cpu_count()}-core {platform.machine()} CPU, no GPU"


def flatten(data: dict, prefix: str = "") -> dict[str, str]:
    out = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = str(value)
    return out


@contextmanager
def mlflow_run(tracking: dict, cfg: Config, name: str, tags: dict[str, str], run_id: str | None = None):
    """Open (or, when resuming, reopen) an MLflow run with the config as params and provenance tags."""
    mlflow.set_tracking_uri(tracking["tracking_uri"])
    with mlflow.start_run(run_id=run_id, experiment_id=tracking["experiment_id"], run_name=name) as active:
        if run_id is None:
            mlflow.log_params(flatten(to_dict(cfg)))
            mlflow.set_tags(
                {
                    "nograd.commit": git_commit(),
                    "nograd.config_hash": config_hash(cfg),
                    "nograd.hardware": hardware(),
                    "nograd.torch": torch.__version__,
                    "mlflow.note.content": description(name, tags),
                    **tags,
                }
            )
        yield active


# ---------------------------------------------------------------------------- browsing and serving

HOST = "127.0.0.1"


def runs_url(base: str, experiment_id: str) -> str:
    """The experiment's runs table in the MLflow UI at `base`. MLflow 3 opens on its GenAI pages
    (overview, traces) unless told the workflow is machine learning; the experiment's kind
    (`MODEL_TRAINING`) does the same for links that do not say it."""
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"


def serve(backend_store_uri: str, port: int) -> None:
    """`mlflow server` on loopback for `backend_store_uri` (the UI and, for many writers, the tracking
    API) until it exits, or until this process is interrupted (Ctrl-C) or terminated (SIGTERM), which
    stop the server with every process it started: `mlflow server` runs its web server (uvicorn)
    as a child that a signal to it alone would leave running."""
    import signal

    command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend_store_uri,
               "--host", HOST, "--port", str(port), "--workers", "1"]
    # Without its job runner, which serves the GenAI jobs (judges, trace rollups) nograd never submits:
    # on a database store it starts about eight more processes, each importing MLflow, that polled on
    # (sqlite, 2 cores: 10 processes and 51 s of CPU in the first 46 s, against 2 and 12 s without).
    env = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **os.environ}  # a user's own setting wins
    server = subprocess.Popen(command, env=env, start_new_session=True)  # its own process group, stopped whole below
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    status = 0
    try:
        status = server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        try:
            os.killpg(server.pid, signal.SIGTERM)  # the group outlives its leader while uvicorn runs
            server.wait(timeout=30)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
    if status:
        raise NogradError(f"mlflow server exited with status {status} (its output is above)")


def _postgres_bin(name: str) -> str:
    """A PostgreSQL server program: where Debian installs it (off PATH), the newest version, else on PATH."""
    installed = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), key=lambda p: int(p.parts[-3]))
    found = installed[-1] if installed else shutil.which(name)
    if not found:
        raise NogradError(f"PostgreSQL's {name} was not found (on PATH or in /usr/lib/postgresql/*/bin): "
                          "install the server (Debian: apt-get install postgresql)")
    return str(found)


@contextmanager
def postgres(data_dir: Path, port: int) -> Iterator[str]:
    """A PostgreSQL cluster of our own in `data_dir` (created on first use), serving on loopback
    for the duration of the block, with a database `mlflow`; yields its URI. Local connections
    are trusted: the server listens on 127.0.0.1 only, and its socket lies in `data_dir`."""
    data_dir = Path(data_dir).resolve()
    # PostgreSQL refuses to run as root: there, its own system user runs it.
    as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    fresh = not (data_dir / "PG_VERSION").exists()
    if fresh:
        data_dir.mkdir(parents=True, exist_ok=True)
        if as_owner:
            shutil.chown(data_dir, "postgres", "postgres")
        _postgres(as_owner + [_postgres_bin("initdb"), "-D", str(data_dir), "-U", "mlflow", "--auth=trust",
                              "-E", "UTF8"], "initdb", data_dir)
    log = data_dir / "server.log"
    _postgres(as_owner + [_postgres_bin("pg_ctl"), "-D", str(data_dir), "-l", str(log), "-w", "-o",
                          f"-h {HOST} -p {port} -k {data_dir}", "start"], "pg_ctl start", data_dir)
    try:
        if fresh:
            _postgres(as_owner + [_postgres_bin("createdb"), "-h", HOST, "-p", str(port), "-U", "mlflow", "mlflow"],
                      "createdb", data_dir)
        yield f"postgresql://mlflow@{HOST}:{port}/mlflow"
    finally:
        subprocess.run(as_owner + [_postgres_bin("pg_ctl"), "-D", str(data_dir), "-m", "fast", "-w", "stop"],
                       capture_output=True)


def _postgres(command: list[str], what: str, data_dir: Path) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        log = data_dir / "server.log"
        detail = (done.stderr.strip() or (log.read_text() if log.exists() else "")).splitlines()
        raise NogradError(f"PostgreSQL in {data_dir}: {what} failed: {detail[-1] if detail else done.returncode}")
