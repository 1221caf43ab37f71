"""MLflow tracking, opened by the harness for every method alike.

The SQLite database and the experiment are created once by the `tracking` rule, before
Snakemake fans out, so parallel jobs never race to migrate the schema or create the
experiment; each job then opens its own run in that experiment.
"""

from __future__ import annotations

import os
import platform
import subprocess
from contextlib import contextmanager
from pathlib import Path

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
import mlflow  # noqa: E402  (telemetry must be off before the import)
import torch  # noqa: E402

from harness.config import REPO, Config, config_hash, to_dict  # noqa: E402

ARTIFACT_ROOT = Path("results/mlartifacts")


def init(cfg: Config) -> dict:
    """Create the tracking database and the experiment; return their coordinates."""
    mlflow.set_tracking_uri(cfg.tracking_uri)
    experiment = mlflow.get_experiment_by_name(cfg.name)
    experiment_id = (
        experiment.experiment_id
        if experiment
        else mlflow.create_experiment(cfg.name, artifact_location=ARTIFACT_ROOT.resolve().as_uri())
    )
    return {"tracking_uri": cfg.tracking_uri, "experiment_id": experiment_id, "experiment": cfg.name}


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
def run(tracking: dict, cfg: Config, name: str, tags: dict[str, str], run_id: str | None = None):
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
                    **tags,
                }
            )
        yield active
