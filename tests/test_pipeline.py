"""The DAG end to end on the tiny model: training resumes and reproduces, Snakemake validates
the config at parse time, and a whole run leaves a report, MLflow runs and non-zero meters, and
the same results and report as the code before the last refactoring (tests/fingerprint.py)."""

import copy
import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from safetensors.torch import load_file

import slurm_cluster
from conftest import killed_at_step, tiny_config
from core.outputs import disk_mb, read_json
from evals.tasks import TASKS
from fingerprint import assert_unchanged
from methods import METHODS, in_order
from methods.sft import SFTConfig
from reports.files import outputs as report_outputs

REPO = Path(__file__).resolve().parent.parent


def weights(artifact: Path) -> dict:
    return load_file(Path(read_json(artifact)["path"]) / "model.safetensors")


def test_same_seed_same_model_and_an_interrupted_run_resumes_to_it(workdir, monkeypatch):
    prepared = workdir.train
    reference = weights(prepared("results/a/artifact.json"))
    import shutil

    shutil.rmtree("results/work")
    again = weights(prepared("results/b/artifact.json"))
    assert all(torch.equal(reference[k], again[k]) for k in reference), "same seed, different model"

    shutil.rmtree("results/work")
    with killed_at_step(monkeypatch, 3):
        prepared("results/c/artifact.json")
    assert not Path("results/c/artifact.json").exists(), "a killed job must not leave its output"
    [work] = Path("results/work/train/mezo/gsm8k/seed0").iterdir()  # one folder: one config
    assert (work / "checkpoint" / "state.pt").exists()
    resumed = prepared("results/c/artifact.json")
    history = read_json(resumed.parent / "metrics.json")["history"]
    assert [h["step"] for h in history if "loss" in h] == [0, 1, 2, 3]
    assert [h["step"] for h in history if "heldout_loss" in h] == [0, 4], "held-out losses at the start and the end"
    assert all(torch.equal(reference[k], weights(resumed)[k]) for k in reference), "resume changed the result"


def snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
         "--workflow-profile", str(REPO / "profiles" / "default"), *args],
        capture_output=True, text=True, timeout=1200,
    )


def test_dry_run_of_the_default_config_plans_every_rule(tmp_path):
    result = snakemake(tmp_path, "-n", "--quiet", "rules")
    assert result.returncode == 0, result.stderr
    for rule in ("model", "data", "tracking", "train", "evaluate", "collect", "report", "all"):
        assert rule in result.stdout


def test_a_given_configfile_replaces_the_default_instead_of_merging(tmp_path, tiny_model_dir):
    only = {**tiny_config(tiny_model_dir, base={}), "tasks": {"gsm8k": {}}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(only))
    result = snakemake(tmp_path, "-n", "--configfile", str(tmp_path / "config.yaml"))
    assert result.returncode == 0, result.stderr
    assert "results/eval/base/gsm8k/seed0" in result.stdout
    assert "math" not in result.stdout and "mezo" not in result.stdout


def test_unknown_method_stops_snakemake_at_parse_time_with_one_line(tmp_path, tiny_model_dir):
    bad = tiny_config(tiny_model_dir, base={}, mezzo={})
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(bad))
    result = snakemake(tmp_path, "-n", "--configfile", str(tmp_path / "config.yaml"))
    assert result.returncode != 0
    valid = ", ".join(sorted(METHODS))
    assert f"unknown key 'mezzo' in methods (valid: {valid})" in result.stderr + result.stdout


@pytest.fixture(scope="module")
def whole_dag(tmp_path_factory, tiny_model_dir) -> SimpleNamespace:
    """The tiny experiment (base and MeZO on every task) run once for the tests below: through a
    SLURM cluster started here (tests/slurm_cluster.py), as a cluster's user runs it, where one can
    start; else with the local executor. Both must give the golden results. The run (`run`), its
    folder (`dir`) and config (`cfg`); with SLURM, the cluster's jobs (`jobs`), else why not (`local`)."""
    root = tmp_path_factory.mktemp("whole-dag")
    cfg = tiny_config(tiny_model_dir)
    cfg["evaluation"]["samples_by_method"] = {"base": 8}
    try:
        with slurm_cluster.started(tmp_path_factory.mktemp("slurm")) as cluster:
            # No job sees `resources`, so the results stay the local run's: base on the CPU, MeZO on 2 GPUs.
            cfg["resources"] = {"gpus_by_method": {"base": 0, "mezo": 2}}
            (root / "config.yaml").write_text(yaml.safe_dump(cfg))
            run = slurm_cluster.snakemake(cluster, root)
            if run.returncode:  # the daemons' logs, then Snakemake's, whose end a failure shows
                run.stderr = slurm_cluster.tails(cluster.logs) + "\n" + run.stderr
            return SimpleNamespace(dir=root, cfg=cfg, run=run, jobs=slurm_cluster.slurm_jobs(cluster.env), local=None)
    except slurm_cluster.Unavailable as why:
        (root / "config.yaml").write_text(yaml.safe_dump(cfg))
        run = snakemake(root, "--configfile", str(root / "config.yaml"), "--cores", "2")
        return SimpleNamespace(dir=root, cfg=cfg, run=run, jobs=None, local=f"SLURM cannot start here: {why}")


def test_whole_dag_on_the_tiny_model(whole_dag, tiny_model_dir):
    workdir, cfg, result = whole_dag.dir, copy.deepcopy(whole_dag.cfg), whole_dag.run
    assert result.returncode == 0, result.stderr[-4000:]

    results = workdir / "results"
    report = (results / "report" / "report.md").read_text()
    assert "MeZO" in report and "Base model" in report and "4 (Base model: 8) samples per problem" in report
    assert (results / "report" / "report.html").exists() and (results / "report" / "passk_math.png").exists()
    summary = read_json(results / "summary.json")
    assert len(summary["results"]) == 6
    for r in summary["results"]:
        n = 8 if r["method"] == "base" else 4
        assert r["problems"] == 2 and r["samples_per_problem"] == n
        assert [p["k"] for p in r["pass_at_k"]] == [1, 2, 4, 8][: n.bit_length()]
        ev = r["cost"]["eval"]
        assert ev["forward_passes"] == ev["sequences_generated"] == 2 * (1 + n)
        assert ev["tokens_generated"] > 0 and ev["reward_calls"] == 2 * (1 + n)
        assert ev["wall_clock_s"] > 0 and ev["peak_memory_mb"] > 0
        train = r["cost"]["train"]
        if r["method"] == "base":
            assert train == {}
        else:
            assert train["forward_passes"] == 3 * 2 * 2, "MeZO: 2 forward passes over a batch of 2, 3 steps"
            assert train["backward_passes"] == 0 and train["tokens_processed"] > 0
            assert train["time_forward_s"] > 0 and train["peak_memory_mb"] > 0
        lines = (results / "eval" / r["method"] / r["task"] / "seed0" / "completions.jsonl").read_text().splitlines()
        assert len(lines) == 2 * (1 + n) and {"text", "correct", "answer"} <= set(json.loads(lines[0]))
        # Each job records the isolation it graded code with (evals/sandbox); the others graded none.
        train_metrics = read_json(results / "train" / r["method"] / r["task"] / "seed0" / "metrics.json")
        for job in (r, train_metrics):
            assert job["sandbox"].startswith("full:") if r["task"] == "code" else job["sandbox"] is None
    assert "- **Code isolation:** full: network, mount, PID and IPC namespaces" in report

    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{results / 'mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=["tiny"])
    kinds = runs["tags.nograd.kind"].value_counts().to_dict()
    assert kinds == {"train": 6, "eval": 6, "summary": 1}
    evals = runs[runs["tags.nograd.kind"] == "eval"]
    assert evals["tags.mlflow.parentRunId"].notna().all() and evals["tags.nograd.model"].notna().all()
    logged = {a.path for a in mlflow.MlflowClient().list_artifacts(evals.iloc[0]["run_id"])}
    task = evals.iloc[0]["tags.nograd.task"]
    assert {"completions.jsonl", "metrics.json", "pass_at_k.json", f"passk_{task}.png"} <= logged
    trained = runs[(runs["tags.nograd.kind"] == "train") & (runs["tags.nograd.method"] == "mezo")]
    assert (trained["metrics.final.forward_passes"] == 12).all()
    assert trained["params.methods.mezo.steps"].eq("3").all()
    assert trained["tags.nograd.commit"].notna().all()
    for rule in ("model", "train/mezo/gsm8k/seed0", "eval/base/code/seed0"):
        assert (results / "benchmarks" / f"{rule}.tsv").exists()

    assert list((results / "work").iterdir()) == [], "finished jobs keep no work directory"
    header = summary["header"]
    kept = sum(disk_mb(results / name) for name in ("model", "data", "train", "eval"))  # unchanged since collect
    assert header["peak_disk_mb"] >= header["results_disk_mb"] >= kept > 0
    for r in summary["results"]:
        assert r["cost"]["eval"]["peak_disk_mb"] > 0
        if r["method"] != "base":  # a training job measures results/ with the model it saved in it
            saved = results / "train" / r["method"] / r["task"] / "seed0" / "model"
            assert r["cost"]["train"]["peak_disk_mb"] >= disk_mb(saved) > 0
    assert f"- **Disk (results/):** peak {header['peak_disk_mb']:,.1f} MB, {header['results_disk_mb']:,.1f} MB " \
           "at collection." in report

    rerun = snakemake(workdir, "--configfile", str(workdir / "config.yaml"), "--cores", "2")
    assert rerun.returncode == 0 and "Nothing to be done" in rerun.stdout + rerun.stderr
    # One method's settings changed: its jobs rerun, and the base model's, the model, data, probe
    # and tracking jobs do not (they read no method's settings).
    cfg["methods"]["mezo"] = {**cfg["methods"]["mezo"], "steps": cfg["methods"]["mezo"]["steps"] + 1}
    (workdir / "changed.yaml").write_text(yaml.safe_dump(cfg))
    planned = snakemake(workdir, "--configfile", str(workdir / "changed.yaml"), "-n", "--quiet", "rules")
    assert planned.returncode == 0, planned.stderr[-3000:]
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", planned.stdout, re.MULTILINE))
    assert counts == {"train": "3", "evaluate": "3", "collect": "1", "report": "1", "all": "1", "total": "9"}, \
        planned.stdout
    assert_unchanged("dag_base_mezo", results, tiny_model_dir)


def test_the_whole_dag_ran_on_slurm_as_one_job_per_train_and_evaluate_with_its_gpus(whole_dag):
    if whole_dag.jobs is None:
        pytest.skip(whole_dag.local)
    assert whole_dag.run.returncode == 0, whole_dag.run.stderr[-4000:]
    gpus = {"base": "N/A", "mezo": "gres:gpu:2"}
    assert {name: job["tres-per-job"] for name, job in whole_dag.jobs.items()} == {
        "rule_probe": "gres:gpu:1",  # it measures a node like the jobs': one of the default `resources.gpus`
        **{f"rule_{rule}_wildcards_{method}_{task}_0": gpus[method]
           for rule in ("train", "evaluate") for method in gpus for task in TASKS},
    }, "the probe and every train and evaluate job, and only those, ran as a SLURM job with its GPUs"
    for name, job in whole_dag.jobs.items():
        assert (job["State"], job["Account"], job["Partition"]) == \
            ("COMPLETED", slurm_cluster.ACCOUNT, slurm_cluster.PARTITION), name
        rule, _, wildcards = name.removeprefix("rule_").partition("_wildcards_")  # the probe has none
        assert (whole_dag.dir / ".snakemake" / "slurm_logs" / f"rule_{rule}" / wildcards /
                f"{job['JobID']}.log").exists()

    logs = sorted((whole_dag.dir / "results" / "logs").glob("[te]*/*/*/seed0.log"))
    assert len(logs) == len(whole_dag.jobs) - 1, "a log for every train and evaluate job"
    for log in logs:
        held = "holding GPU 0, 1 of 0, 1\n" in log.read_text()
        assert held == (log.parent.parent.name == "mezo"), f"{log}: SLURM's GPUs are the ones the job holds"


RL = ("grpo", "fgrpo")
"""Run on every task by their own DAG test; base and MeZO by the whole DAG's."""
OTHERS = {name: METHODS[name].test_settings for name in in_order() if name not in (*RL, "base", "mezo")}
"""Every other registered method, at its record's test settings: a new method is in here by registering."""


def test_every_other_method_through_the_dag(tmp_path, tiny_model_dir):
    """Every other method, cross-checked by lm-eval, then `snakemake --report` on the run."""
    cfg = {**tiny_config(tiny_model_dir, **OTHERS), "tasks": {"gsm8k": {"train_size": 8, "test_size": 2}}}
    cfg["evaluation"]["crosscheck"] = True  # lm-eval on every artifact kind: model, adapter, seed list, ensemble
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    result = snakemake(tmp_path, "--configfile", str(tmp_path / "config.yaml"), "--cores", "2")
    assert result.returncode == 0, result.stderr[-4000:]
    summary = read_json(tmp_path / "results" / "summary.json")
    passes = {r["method"]: r["inference_passes"] for r in summary["results"]}
    assert set(passes) == set(OTHERS) and passes["randopt"] == 2
    ensembles = {m for m in OTHERS if "ensemble" in METHODS[m].outputs}
    for r in summary["results"]:
        assert (passes[r["method"]] > 1) == (r["method"] in ensembles), "only an ensemble answers with several models"
        assert r["cost"]["train"]["forward_passes"] > 0, r["method"]
        warm_started = issubclass(METHODS[r["method"]].config, SFTConfig)
        assert (r["cost"]["train"]["backward_passes"] > 0) == warm_started, "only the SFT warm start backprops"
    report = (tmp_path / "results" / "report" / "report.md").read_text()
    for name in OTHERS:
        assert f"| {METHODS[name].display} " in report
    checks = {c["method"]: c for c in summary["crosschecks"]}
    assert set(checks) == set(OTHERS)
    for method, check in checks.items():
        if method in ensembles:
            assert not check["applicable"], "a majority vote has no single model to hand to lm-eval"
        else:
            assert check["applicable"] and check["problems"] == 2, method
            assert check["same_text"] == 2, f"{method}: lm-eval's greedy completions are not nograd's"
            assert (tmp_path / "results" / "benchmarks" / "crosscheck" / method / "gsm8k" / "seed0.tsv").exists()
    assert_unchanged("dag_others", tmp_path / "results", tiny_model_dir)
    assert all((tmp_path / "results" / "report" / name).is_file() for name in report_outputs(["gsm8k"]))

    # After the run, `snakemake --report` builds the self-contained HTML: the report rule's tables and
    # figures with their captions, the workflow's description and the rules' provenance.
    html = tmp_path / "results" / "report" / "snakemake.html"
    built = snakemake(tmp_path, "--configfile", str(tmp_path / "config.yaml"), "--report", str(html))
    assert built.returncode == 0, built.stderr[-4000:]
    text = html.read_text()
    assert "nograd: gradient-free LLM post-training against RL" in text, "the workflow description"
    for name in ("report.html", "passk_gsm8k.png", "cost_gsm8k.png", "curves_gsm8k.png", "memory.png",
                 "table_claims.csv", "table_crosscheck.csv"):
        assert name in text, name
    # docutils writes "@" as "&#64;".
    for caption in ("(%) against k (log axis)", "Greedy accuracy (%) of each trained method", "One row per claim"):
        assert caption in text, caption
    assert "crosscheck" in text and "collect" in text, "the rules' provenance"


def test_grpo_and_fgrpo_through_the_dag_on_every_task(tmp_path, tiny_model_dir, monkeypatch):
    cfg = tiny_config(tiny_model_dir, **{m: METHODS[m].test_settings for m in RL})
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({**cfg, "resources": {"gpus_by_method": {"grpo": 2}}}))
    # Three fake GPUs (tests/test_devices.py): each job holds its method's count, by the same locks as on GPUs.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")
    monkeypatch.setenv("NOGRAD_DEVICE_LOCKS", str(tmp_path / "locks"))
    result = snakemake(tmp_path, "--configfile", str(tmp_path / "config.yaml"), "--cores", "2", "--resources", "gpu=3")
    assert result.returncode == 0, result.stderr[-4000:]
    logs = sorted((tmp_path / "results" / "logs").glob("[te]*/*/*/seed0.log"))
    assert len(logs) == 2 * len(RL) * len(TASKS)
    for log in logs:
        held = re.search(r"holding GPU ([\d, ]+) of 0, 1, 2\n", log.read_text())
        method = log.parent.parent.name
        assert held and len(held[1].split(", ")) == (2 if method == "grpo" else 1), log
    summary = read_json(tmp_path / "results" / "summary.json")
    assert {(r["method"], r["task"]) for r in summary["results"]} == {
        (m, t) for m in RL for t in TASKS}
    for r in summary["results"]:
        train = r["cost"]["train"]
        assert train["forward_passes"] == 2 * 2 * 2, "2 x 2 rollouts: a generation and a loss forward each"
        assert train["backward_passes"] == train["sequences_generated"] == train["reward_calls"] == 2 * 2
        assert r["cost"]["eval"]["forward_passes"] > 0 and len(r["pass_at_k"]) == 3
    report = (tmp_path / "results" / "report" / "report.md").read_text()
    assert all(f"| {METHODS[m].display} " in report for m in RL)

    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'results' / 'mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=["tiny"])
    assert runs["tags.nograd.kind"].value_counts().to_dict() == {"train": 6, "eval": 6, "summary": 1}
    trained = runs[runs["tags.nograd.kind"] == "train"]
    assert trained["metrics.reward"].notna().all() and trained["metrics.final.backward_passes"].eq(4).all()
    assert trained[trained["tags.nograd.method"] == "fgrpo"]["metrics.focal_weight/mean"].notna().all()
    assert_unchanged("dag_rl", tmp_path / "results", tiny_model_dir)
