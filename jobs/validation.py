"""The config schema built from the config dataclasses (core/config.py) and the method and task
registries, validation against it that ends in one line naming the bad key and the valid choices,
and the generated files.

`config/schema.yaml` is generated from the dataclasses and the registries (`nograd schema >
config/schema.yaml`), and so is `config/paper.yaml` (`nograd paper-config > config/paper.yaml`):
every method at its dataclass defaults, which are its paper's, at the scale `PAPER_SCALE` sets.
Tests keep both committed files current, so the documentation of a key lives only in its dataclass
field's docstring and a paper's default only in its method's dataclass. Validation uses the schema
built from the registries as they are loaded, so a method or task registered from a plugin file
(core/plugins.py) validates as one in the repository does.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import math
import textwrap
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

import jsonschema
import yaml

from core.backend import Backend
from core.config import (
    REPO,
    Config,
    EvaluationConfig,
    ReportConfig,
    ResourcesConfig,
    RewardConfig,
    SandboxConfig,
    TaskConfig,
    TrainingConfig,
    to_dict,
)
from core.errors import NogradError
from evals.tasks import TASKS
from methods import METHODS, in_order

SCHEMA_PATH = REPO / "config" / "schema.yaml"
PAPER_PATH = REPO / "config" / "paper.yaml"


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
    return validate({**PAPER_SCALE, "tasks": {name: {} for name in TASKS},
                     "methods": {name: {} for name in in_order()}},
                    source="PAPER_SCALE")


def paper_config_yaml() -> str:
    header = (
        "# Paper scale, for GPU machines: `snakemake --configfile config/paper.yaml`.\n"
        "# Generated by `nograd paper-config` (jobs/validation.py PAPER_SCALE, the config dataclasses and\n"
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
    backend = Backend.of(cfg)
    backend.check(source)
    if backend.ray:
        _check_workers(cfg, source)
    return cfg


def _check_workers(cfg: Config, source: str) -> None:
    """training.population: ray runs only methods that score their populations through
    `run.score_population` (their record's `workers`)."""
    if refused := [name for name in cfg.methods if not METHODS[name].workers]:
        takes_part = ", ".join(m for m in in_order() if METHODS[m].workers and m != "base")
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


