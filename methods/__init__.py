"""The method registry: one module per method, each registering one record with everything the
rest of the suite needs to know about it (`register`).

A method is a function `train(config, run) -> Artifact` that holds only its algorithm; the
harness owns the model, data, meters, tracking, seeds and outputs, and hands the method a `run`
(the contract: `core.contract.Run`). Adding a method is one file here plus its entry in
config/config.yaml; `nograd schema` and `nograd paper-config` regenerate config/schema.yaml and
config/paper.yaml from the records. Methods kept outside this repository register the same way
from a file named in NOGRAD_PLUGINS (core/plugins.py).

Importing this package imports every method module, so a method module imports at its top only
what is cheap (the standard library, numpy, torch and the suite's own modules): the Snakefile's
parse and the data, collect and report jobs read the records and never train. Libraries that
take seconds to import (TRL, peft, pycma, datasets) are imported where the algorithm uses them.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from core import plugins
from core.contract import Artifact, ArtifactKind, QueryCounts, Run
from core.errors import NogradError

if TYPE_CHECKING:
    import torch

    from core.task import Problem


@dataclass(frozen=True)
class Method:
    """One method, as the suite knows it."""

    name: str
    """The key in config files, directories and MLflow tags."""
    config: type
    """The documented config dataclass; its defaults are the paper's."""
    train: Callable[[Any, Run], Artifact]
    """The algorithm."""
    display: str
    """The name as its paper writes it, in every table and figure."""
    order: int
    """Where tables and figures list it: ascending, base model first."""
    outputs: tuple[ArtifactKind, ...]
    """The artifact kinds `train` may return."""
    paper: str = ""
    """One-line reference: authors, title, venue or arXiv id; empty for none."""
    bibtex: str = ""
    """The paper's BibTeX entry, for the report's 'How to cite'; empty for none."""
    test_settings: dict = field(default_factory=dict)
    """Settings at which it trains in seconds on the tests' tiny model (tests/conftest.py): every
    test that runs each method runs it at these."""
    queries: Callable[[Any, Sequence[Problem], torch.nn.Module], QueryCounts] | None = None
    """queries(config, train, model): what `train` will ask of the model with this config on these
    training problems, before it runs (`nograd plan`; `model` has the model's modules, perhaps on
    the meta device, for a cost that depends on its shape); tests/test_methods.py holds it to the
    meters. None: not foreseen."""
    workers: bool = False
    """Runs under `training.population: ray`: it scores its perturbed members only through
    `run.score_population`, which spreads them over Ray workers, or trains nothing (the base model).
    A config running any other method under ray is refused: its training would not use the workers."""
    builds_on: str | None = None
    """The method whose run with the same seed is this one's first stage (ESSA's warm start is SFT):
    the report compares the two seed by seed, since their seed k share work."""


METHODS: dict[str, Method] = {}


def register(name: str, *, config: type, display: str, order: int, outputs: ArtifactKind | tuple[ArtifactKind, ...],
             paper: str = "", bibtex: str = "", test_settings: dict | None = None,
             queries: Callable[[Any, Sequence[Problem], torch.nn.Module], QueryCounts] | None = None,
             workers: bool = False, builds_on: str | None = None) -> Callable:
    """Register a method's train function under `name` with its record (see `Method`)."""

    def decorate(train: Callable) -> Callable:
        if name in METHODS:
            raise ValueError(f"method {name!r} is registered twice")
        METHODS[name] = Method(name, config, train, display, order,
                               (outputs,) if isinstance(outputs, str) else tuple(outputs), paper, bibtex.strip(),
                               dict(test_settings or {}), queries, workers, builds_on)
        return train

    return decorate


def in_order() -> list[str]:
    """Every registered method's name in its record's `order`: the base model first."""
    return sorted(METHODS, key=lambda name: (METHODS[name].order, name))


def display_records(names: Iterable[str]) -> dict[str, dict]:
    """What a report shows of each named registered method, as plain data for the results (the
    collect job's summary.json, reports/names.py): its display name, order, colour and BibTeX. A
    method's colour is its place in the whole registry's order, so it is the same in every run."""
    everyone = in_order()
    return {name: {"display": METHODS[name].display, "order": METHODS[name].order,
                   "colour": f"C{everyone.index(name) % 10}", "bibtex": METHODS[name].bibtex}
            for name in names if name in METHODS}


def get_method(name: str) -> Method:
    if name not in METHODS:
        raise NogradError(f"unknown method {name!r} (valid: {', '.join(sorted(METHODS))})")
    return METHODS[name]


for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
plugins.load()
