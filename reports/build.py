"""From result files to the report: `collect` gathers every evaluation into one summary, and
`report` renders it and logs it to MLflow as the artifacts of a summary run.

The report is computed from the files Snakemake tracks, never from MLflow, so its provenance
is the DAG's; MLflow gets a copy for browsing.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import mlflow
import pandas as pd

from harness import data, tracking
from harness.config import Config, config_hash
from harness.outputs import atomic_path, read_json, write_json
from reports.render import render


def collect(cfg: Config, metrics_files: list[Path], model_manifest: Path, data_manifests: list[Path],
            out: Path) -> dict:
    """Write `summary.json` (every run's result and the run's scale) and a flat `summary.csv`."""
    results = [read_json(path) for path in metrics_files if Path(path).exists()]
    model = read_json(model_manifest)
    manifests = [read_json(path) for path in data_manifests]
    wall_clock = sum(r["cost"].get(phase, {}).get("wall_clock_s", 0.0) for r in results for phase in ("train", "eval"))
    header = {
        "name": cfg.name,
        "model": model["name"],
        "model_source": f"{model['source']}: {model.get('revision') or model['path']}",
        "tasks": {m["task"]: {"train": m["train"]["size"], "test": m["test"]["size"],
                              "source": data.describe(m["test"]), "train_source": data.describe(m["train"])}
                  for m in manifests},
        "samples_per_problem": cfg.evaluation.samples,
        "hardware": tracking.hardware(),
        "config_hash": config_hash(cfg),
        "commit": tracking.git_commit(),
        "date": datetime.date.today().isoformat(),
        "total_wall_clock_s": wall_clock,
    }
    summary = {"header": header, "results": results}
    write_json(out, summary)
    rows = []
    for r in results:
        row = {"method": r["method"], "task": r["task"], "seed": r["seed"], "greedy": r["greedy"]["value"],
               **{f"pass@{p['k']}": p["value"] for p in r["pass_at_k"]}, "inference_passes": r["inference_passes"]}
        row.update({f"train.{k}": v for k, v in r["cost"]["train"].items()})
        row.update({f"eval.{k}": v for k, v in r["cost"]["eval"].items()})
        rows.append(row)
    with atomic_path(out.with_suffix(".csv")) as tmp:
        pd.DataFrame(rows).to_csv(tmp, index=False)
    return summary


def report(cfg: Config, summary_file: Path, tracking_file: Path, out_dir: Path) -> dict[str, Path]:
    """Render the Markdown and HTML report and figures; log them to an MLflow summary run."""
    summary = read_json(summary_file)
    paths = render(summary["results"], summary["header"], out_dir)
    tags = {"nograd.kind": "summary"}
    with tracking.run(read_json(tracking_file), cfg, f"summary {cfg.name}", tags):
        mlflow.log_artifacts(str(out_dir), "report")
        mlflow.log_artifact(str(summary_file))
    return paths
