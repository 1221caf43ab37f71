# nograd: post-train a model with each method on each task and seed, evaluate every result
# the same way, and render the comparison report.
#
#   model -> data(task) -> probe -> train(method, task, seed) -> evaluate(method, task, seed) -> collect -> report
#                                                           \-> crosscheck(method, task, seed) -/   (gsm8k, math)
#
# The config (config/config.yaml unless --configfile is given) is validated against
# config/schema.yaml at parse time. Each job gets only the part of the config it depends on,
# so changing one method's settings reruns only that method's jobs.

import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, workflow.basedir)
from evals.tasks import get_task
from core import config as configuration
from core import machine
from jobs import validation
from core.errors import NogradError
from reports.files import FIGURE_TITLES
from reports.files import outputs as report_outputs

# `snakemake --report results/report/snakemake.html` after a run: this page, the report rule's
# tables and figures with their captions, and the workflow's provenance (rules, code, runtimes).
report: "reports/captions/workflow.rst"

if not workflow.config_settings.configfiles:
    configfile: Path(workflow.basedir) / "config" / "config.yaml"

try:
    CONFIG = validation.validate(config)
except NogradError as error:
    raise WorkflowError(str(error)) from None

METHODS, TASKS, SEEDS = list(CONFIG.methods), list(CONFIG.tasks), CONFIG.seeds
CROSSCHECK_TASKS = [t for t in TASKS if get_task(t).crosscheck] if CONFIG.evaluation.crosscheck else []
NOGRAD = f"{sys.executable} -m jobs.cli"


def data_dir(wildcards, input):
    """The prepared task's directory: where the data rule wrote its manifest."""
    return Path(input.data).parent


def gpus(wildcards):
    """The GPUs a job on `wildcards.method` holds: Snakemake's `gpu` resource, and the job's own devices."""
    return CONFIG.resources.for_method(wildcards.method)


def job_config(method=None, task=None, seed=None, report=False, shared=False):
    """The JSON config a job gets: its own method, task and seed, and the shared settings (the
    report's own settings only where `report`). A `shared` job (model, data, tracking, probe) reads
    no method's settings: it gets which methods run, each at its defaults, so that changing one
    method's settings reruns none of them (and so every method's jobs after them)."""
    cfg = configuration.for_run(CONFIG, method, task, seed, report)
    if shared:
        cfg = dataclasses.replace(cfg, methods={name: {} for name in cfg.methods},
                                  evaluation=dataclasses.replace(cfg.evaluation, samples_by_method={}))
    return json.dumps(configuration.to_dict(cfg), sort_keys=True)


# On a cluster (profiles/slurm) these run where Snakemake runs, not as cluster jobs: each takes
# seconds, and model and data reach the Hugging Face hub, which compute nodes often cannot.
localrules: model, data, tracking, collect, report, all


wildcard_constraints:
    method="|".join(METHODS),
    task="|".join(TASKS),
    seed=r"\d+",


rule model:
    output:
        "results/model/manifest.json",
    params:
        config=lambda wc: job_config(shared=True),
    log:
        "results/logs/model.log",
    benchmark:
        "results/benchmarks/model.tsv"
    shell:
        "{NOGRAD} prepare-model --config-json {params.config:q} --out {output} 2>&1 | tee {log}"


rule data:
    output:
        "results/data/{task}/manifest.json",
    params:
        config=lambda wc: job_config(task=wc.task, shared=True),
    log:
        "results/logs/data/{task}.log",
    benchmark:
        "results/benchmarks/data/{task}.tsv"
    shell:
        "{NOGRAD} prepare-data --config-json {params.config:q} --task {wildcards.task} --out {output} 2>&1 | tee {log}"


# Created once before the fan-out, so parallel jobs never race on the SQLite schema.
rule tracking:
    output:
        "results/tracking.json",
    params:
        config=lambda wc: job_config(shared=True),
    log:
        "results/logs/tracking.log",
    benchmark:
        "results/benchmarks/tracking.tsv"
    shell:
        "{NOGRAD} init-tracking --config-json {params.config:q} --out {output} 2>&1 | tee {log}"


# `dtype: auto` and `sampler: auto` chosen once, by measuring the machine (core/machine.py): every
# job reads the same choices, and reruns when they change; the report states them and why. On a
# cluster it runs where the jobs run, holding a GPU where they hold one (`resources.gpus`).
rule probe:
    output:
        str(machine.DECIDED),
    params:
        config=lambda wc: job_config(shared=True),
    threads: 1
    resources:
        gpu=min(CONFIG.resources.gpus, 1),
    log:
        "results/logs/probe.log",
    benchmark:
        "results/benchmarks/probe.tsv"
    shell:
        "{NOGRAD} probe --config-json {params.config:q} 2>&1 | tee {log}"


# Resumable: checkpoints live in results/work/, outside the declared outputs, which
# Snakemake deletes before rerunning a job; a job removes them once its outputs are written.
# One core per job (Snakemake sets OMP_NUM_THREADS to it), so jobs run side by side: on the 2-core
# CPU two one-thread evaluations took 73 s together, one two-thread evaluation 46 s alone, and
# start-up, scoring and logging overlap too. On GPUs each job holds `resources.gpus` devices of its
# own (jobs/devices.py): `--resources gpu=N` runs as many side by side as N devices allow, and
# `--set-threads train=N evaluate=N` (or a profile) gives each job more cores.
rule train:
    input:
        model=rules.model.output[0],
        choices=rules.probe.output[0],
        data=rules.data.output[0],
        tracking=rules.tracking.output[0],
    output:
        artifact="results/train/{method}/{task}/seed{seed}/artifact.json",
        metrics="results/train/{method}/{task}/seed{seed}/metrics.json",
    params:
        config=lambda wc: job_config(wc.method, wc.task, int(wc.seed)),
        data=data_dir,
    threads: 1
    resources:
        gpu=gpus,
    log:
        "results/logs/train/{method}/{task}/seed{seed}.log",
    benchmark:
        "results/benchmarks/train/{method}/{task}/seed{seed}.tsv"
    shell:
        "{NOGRAD} train --config-json {params.config:q} --method {wildcards.method} --task {wildcards.task} "
        "--seed {wildcards.seed} --gpus {resources.gpu} --model {input.model} --data {params.data} "
        "--tracking {input.tracking} --out {output.artifact} 2>&1 | tee {log}"


rule evaluate:
    input:
        artifact=rules.train.output.artifact,
        train_metrics=rules.train.output.metrics,  # its training cost, logged beside the evaluation's own
        data=rules.data.output[0],
        tracking=rules.tracking.output[0],
    output:
        metrics="results/eval/{method}/{task}/seed{seed}/metrics.json",
        completions="results/eval/{method}/{task}/seed{seed}/completions.jsonl",
    params:
        config=lambda wc: job_config(wc.method, wc.task, int(wc.seed)),
        data=data_dir,
    threads: 1
    resources:
        gpu=gpus,
    log:
        "results/logs/eval/{method}/{task}/seed{seed}.log",
    benchmark:
        "results/benchmarks/eval/{method}/{task}/seed{seed}.tsv"
    shell:
        "{NOGRAD} evaluate --config-json {params.config:q} --method {wildcards.method} --task {wildcards.task} "
        "--seed {wildcards.seed} --gpus {resources.gpu} --artifact {input.artifact} --data {params.data} "
        "--tracking {input.tracking} --out {output.metrics} 2>&1 | tee {log}"


# lm-evaluation-harness's greedy GSM8K/MATH accuracy of the same artifact on the same problems, for
# the report to show beside nograd's own (evaluation.crosscheck, evaluation.crosscheck_size).
rule crosscheck:
    input:
        artifact=rules.train.output.artifact,
        data=rules.data.output[0],
    output:
        "results/crosscheck/{method}/{task}/seed{seed}.json",
    wildcard_constraints:
        task="|".join(CROSSCHECK_TASKS),
    params:
        config=lambda wc: job_config(wc.method, wc.task, int(wc.seed)),
        data=data_dir,
    threads: 1
    resources:
        gpu=gpus,
    log:
        "results/logs/crosscheck/{method}/{task}/seed{seed}.log",
    benchmark:
        "results/benchmarks/crosscheck/{method}/{task}/seed{seed}.tsv"
    shell:
        "{NOGRAD} crosscheck --config-json {params.config:q} --method {wildcards.method} --task {wildcards.task} "
        "--seed {wildcards.seed} --gpus {resources.gpu} --artifact {input.artifact} --data {params.data} "
        "--out {output} 2>&1 | tee {log}"


rule collect:
    input:
        metrics=expand(rules.evaluate.output.metrics, method=METHODS, task=TASKS, seed=SEEDS),
        completions=expand(rules.evaluate.output.completions, method=METHODS, task=TASKS, seed=SEEDS),
        train=expand(rules.train.output.metrics, method=METHODS, task=TASKS, seed=SEEDS),
        crosschecks=expand(rules.crosscheck.output[0], method=METHODS, task=CROSSCHECK_TASKS, seed=SEEDS),
        model=rules.model.output[0],
        data=expand(rules.data.output[0], task=TASKS),
        choices=rules.probe.output[0],
    output:
        json="results/summary.json",
        csv="results/summary.csv",
    params:
        config=lambda wc: job_config(report=True),
    log:
        "results/logs/collect.log",
    benchmark:
        "results/benchmarks/collect.tsv"
    shell:
        "{NOGRAD} collect --config-json {params.config:q} --metrics {input.metrics} --completions {input.completions} "
        "--train-metrics {input.train} --crosschecks {input.crosschecks} --model {input.model} --data {input.data} "
        "--out {output.json} 2>&1 | tee {log}"


def reported(name):
    """A report file as the report rule declares it: the HTML, tables and PNG figures flagged for
    `snakemake --report`, each with its caption (reports/captions/); the rest plain outputs."""
    path = f"results/report/{name}"
    stem, ext = name.rsplit(".", 1)
    if name == "report.html":
        return report(path, caption="reports/captions/report.rst", category="1. Report")
    if ext == "csv":
        return report(path, caption=f"reports/captions/{stem}.rst", category="2. Tables")
    if ext == "png":
        kind, _, task = stem.partition("_")
        title = FIGURE_TITLES[kind]
        return report(path, caption=f"reports/captions/{kind}.rst", category="3. Figures", subcategory=title,
                      labels={"figure": title, "task": task or "all tasks"})
    return path


rule report:
    input:
        summary=rules.collect.output.json,
        tracking=rules.tracking.output[0],
    output:
        md="results/report/report.md",
        files=[reported(name) for name in report_outputs(TASKS) if name != "report.md"],
    params:
        config=lambda wc: job_config(),
    log:
        "results/logs/report.log",
    benchmark:
        "results/benchmarks/report.tsv"
    shell:
        "{NOGRAD} report --config-json {params.config:q} --summary {input.summary} --tracking {input.tracking} "
        "--out {output.md} 2>&1 | tee {log}"


rule all:
    input:
        rules.report.output,
    default_target: True
