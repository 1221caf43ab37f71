"""From result files to the report: `collect` gathers every result into one summary, and `report`
renders it and logs it to MLflow as the artifacts of a summary run.

The report is computed from the files Snakemake tracks, never from MLflow, so its provenance
is the DAG's; MLflow gets a copy for browsing. A result file that is missing (a failed seed, a
method not run) leaves a gap that the report names, never an error.
"""

from __future__ import annotations

import datetime
from dataclasses import asdict
from pathlib import Path

import mlflow
import pandas as pd

from core import machine
from core.config import REPO, Config, config_hash, to_dict
from core.outputs import atomic_path, disk_mb, read_json, write_json
from jobs import data, tracking, validation
from methods import METHODS, display_records, in_order
from reports.citations import suite_version
from reports.names import shown
from reports.render import render_summary, samples_text
from reports.scores import read_completions

MAX_HISTORY_POINTS = 1000
"""Training histories longer than this are binned to it in the summary: a bin keeps its last
meter readings (counters, times) and running totals (RUNNING_TOTALS), and the mean of each
other step metric (loss, reward)."""
RUNNING_TOTALS = ("perturbations",)
"""Step metrics a method logs as a running total (RandOpt's and CoRP's perturbations drawn): a
bin's mean would undercount them, and the claim checks read the last one."""


def thin(history: list[dict], meter_keys: set[str], points: int = MAX_HISTORY_POINTS) -> list[dict]:
    """At most `points` entries of a training history, in order, as MAX_HISTORY_POINTS says."""
    if len(history) <= points:
        return history
    meter_keys = meter_keys | set(RUNNING_TOTALS)
    bounds = [round(i * len(history) / points) for i in range(points + 1)]
    thinned = []
    for start, end in zip(bounds, bounds[1:]):
        chunk = history[start:end]
        row = dict(chunk[-1])
        for key in {k for step in chunk for k in step} - meter_keys - {"step"}:
            values = [step[key] for step in chunk if key in step and step[key] == step[key]]
            if values:
                row[key] = sum(values) / len(values)
        thinned.append(row)
    return thinned


def _key(record: dict) -> tuple[str, str, int]:
    return record["method"], record["task"], int(record["seed"])


def scale_differences(cfg: Config, paper_file: Path = REPO / "config" / "paper.yaml") -> list[str]:
    """How this run's scale differs from the published one (config/paper.yaml), in words."""
    paper = validation.load(paper_file)
    ev, paper_ev = cfg.evaluation, paper.evaluation
    differences = []
    if cfg.model != paper.model:
        differences.append(f"model {cfg.model} (paper scale: {paper.model})")
    if cfg.dtype != paper.dtype:
        differences.append(f"weights in {cfg.dtype} (paper scale: {paper.dtype})")
    ours, published = (samples_text(e.samples, e.samples_by_method) for e in (ev, paper_ev))
    if ours != published:
        differences.append(f"{ours} samples per problem (paper scale: {published})")
    if len(cfg.seeds) != len(paper.seeds):
        differences.append(f"{len(cfg.seeds)} seed(s) (paper scale: {len(paper.seeds)})")
    for task, sizes in cfg.tasks.items():
        published = paper.tasks.get(task)
        if published is not None and sizes.test_size != published.test_size:
            differences.append(f"{task}: {sizes.test_size if sizes.test_size is not None else 'all'} test problems "
                               f"(paper scale: {'all' if published.test_size is None else published.test_size})")
    for method, settings in cfg.methods.items():
        published = paper.methods.get(method)
        if published is not None and to_dict(settings) != to_dict(published):
            changed = sorted(k for k, v in to_dict(settings).items() if to_dict(published).get(k) != v)
            differences.append(f"{method}: {', '.join(changed)} differ from the paper's defaults")
    return differences


def trust_differences(isolations: set[str]) -> list[str]:
    """What makes this run's numbers less trustworthy than a default run's, in words: code graded
    without isolation (sandbox.isolation: none), where a program could have written its own verdict's
    inputs, the results, or the caller's files."""
    return [f"code completions were graded without isolation ({isolation})"
            for isolation in sorted(isolations) if isolation.startswith("none")]


def collect(cfg: Config, metrics_files: list[Path], model_manifest: Path, data_manifests: list[Path], out: Path,
            completions: list[Path] = (), train_metrics: list[Path] = (), crosschecks: list[Path] = (),
            choices: dict[str, machine.Choice] | None = None) -> dict:
    """Write `summary.json` (every result, per-problem scores, training histories, cross-checks
    and the run's scale, with its disk use, and how `dtype` and `sampler` were chosen: `choices`,
    by default as kept for `cfg`, core.machine.recorded) and a flat `summary.csv`. Files that do
    not exist are gaps, named in `missing`."""
    choices = choices or machine.recorded(cfg)
    existing = [Path(path) for path in metrics_files if Path(path).exists()]
    results = [read_json(path) for path in existing]
    checks = [read_json(path) for path in crosschecks if Path(path).exists()]
    compared = {_key(c) for c in checks if c.get("applicable")}
    # An evaluation's completions.jsonl sits beside its metrics.json.
    by_dir = {Path(path).parent.resolve(): Path(path) for path in completions if Path(path).exists()}
    per_problem, greedy_texts = [], {}
    for path, result in zip(existing, results):
        found = by_dir.get(path.parent.resolve())
        if found is None:
            continue
        texts = greedy_texts.setdefault(_key(result), {}) if _key(result) in compared else None
        per_problem.append({"method": result["method"], "task": result["task"], "seed": result["seed"],
                            **read_completions(found, texts)})
    for check in checks:
        if _key(check) in greedy_texts:
            ours = greedy_texts[_key(check)]
            check["same_text"] = sum(ours.get(p["problem"]) == p["text"] for p in check["per_problem"])
        # The texts stay in the cross-check's own file; the summary keeps the scores.
        check["per_problem"] = {p["problem"]: int(p["correct"]) for p in check.get("per_problem") or []}
    # Every job's meters: evaluations', cross-checks' and, from their own files, every training job's.
    job_meters = [r["cost"]["eval"] for r in results] + [c.get("cost") or {} for c in checks]
    isolations = {r["sandbox"] for r in results if r.get("sandbox")}  # code jobs only
    histories = []
    for path in train_metrics:
        if not Path(path).exists():
            continue
        train = read_json(path)
        job_meters.append(train.get("meters") or {})
        isolations.update([train["sandbox"]] if train.get("sandbox") else [])
        histories.append({"method": train["method"], "task": train["task"], "seed": train["seed"],
                          "trained": train.get("trained", True), "stages": train.get("stages") or {},
                          "history": thin(train.get("history") or [], set(train.get("meters") or {}))})

    present = {_key(r) for r in results}
    missing = [{"method": m, "task": t, "seed": s} for m in cfg.methods for t in cfg.tasks for s in cfg.seeds
               if (m, t, s) not in present]
    model = read_json(model_manifest)
    manifests = [read_json(path) for path in data_manifests]
    job_time = sum(r["cost"].get(phase, {}).get("wall_clock_s", 0.0) for r in results for phase in ("train", "eval"))
    job_time += sum((c.get("cost") or {}).get("wall_clock_s", 0.0) for c in checks)
    # Disk: the largest size of results/ any job measured (core.meters, `peak_disk_mb`; a lower
    # bound of the true peak, as jobs run side by side), or collect measures now, before its summary.
    at_collection = disk_mb()
    peak_disk = max([at_collection] + [m.get("peak_disk_mb", 0.0) for m in job_meters])
    records = display_records(in_order())
    with shown(records):
        differences = scale_differences(cfg)
    header = {
        "name": cfg.name,
        "model": model["name"],
        "model_source": f"{model['source']}: {model.get('revision') or model['path']}",
        "dtype": cfg.dtype,
        # What `dtype: auto` and `sampler: auto` chose, and why (core/machine.py); or that the config set them.
        "choices": {name: asdict(choice) for name, choice in choices.items()},
        "tasks": {m["task"]: {"train": m["train"]["size"], "test": m["test"]["size"],
                              "source": data.describe(m["test"]), "train_source": data.describe(m["train"])}
                  for m in manifests},
        "samples_per_problem": cfg.evaluation.samples,
        "samples_by_method": cfg.evaluation.samples_by_method,
        "seeds": list(cfg.seeds),
        "methods": to_dict(cfg.methods),
        # What the report shows of every registered method, run or named by a claim (reports/names.py):
        # it renders from these, not from the registry.
        "method_records": records,
        # Methods whose seed k shares work, compared seed by seed (reports/scores.py).
        "paired_seeds": [[m, METHODS[m].builds_on] for m in cfg.methods if METHODS[m].builds_on in cfg.methods],
        # The claim checks' settings travel with the results they judge (reports/verdicts.py).
        "report": to_dict(cfg.report),
        "hardware": tracking.hardware(),
        # Every job loads its model on one device (core.models.resolve_device).
        "devices_per_job": 1,
        "config_hash": config_hash(cfg),
        "commit": tracking.git_commit(),
        "suite_version": suite_version(),
        "date": datetime.date.today().isoformat(),
        "job_time_s": job_time,
        "peak_disk_mb": peak_disk,
        "results_disk_mb": at_collection,
        "scale_differences": differences,
        # How code completions were isolated while graded, as each code job recorded it (evals/sandbox).
        "sandbox": {"isolation": cfg.sandbox.isolation, "jobs": sorted(isolations)},
        "trust_differences": trust_differences(isolations),
        "crosscheck": {"enabled": cfg.evaluation.crosscheck, "size": cfg.evaluation.crosscheck_size},
    }
    summary = {"header": header, "results": results, "per_problem": per_problem, "histories": histories,
               "crosschecks": checks, "missing": missing}
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
    """Render the Markdown and HTML report, tables (CSV) and figures; log them, with the summary, as
    the artifacts of an MLflow summary run (its artifact view shows the CSV tables as tables)."""
    paths = render_summary(summary_file, out_dir)
    tags = {"nograd.kind": "summary"}
    with tracking.mlflow_run(read_json(tracking_file), cfg, f"summary {cfg.name}", tags):
        mlflow.log_artifacts(str(out_dir), "report")
        mlflow.log_artifact(str(summary_file))
    return paths
