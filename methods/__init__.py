"""The method registry: one module per method, registered by name with its config dataclass.

A method is a function `train(config, run) -> Artifact` that holds only its algorithm; the
harness (`harness.training.Run`) owns the model, data, meters, tracking, seeds and outputs.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Callable

from harness.errors import NogradError


@dataclass(frozen=True)
class Method:
    name: str
    config: type
    """The documented config dataclass; its defaults are the paper's."""
    train: Callable
    paper: str
    """Citation key line: authors, title, venue/arXiv id."""


METHODS: dict[str, Method] = {}


def register(name: str, config: type, paper: str) -> Callable:
    """Register a method's train function under `name` (the name used in config files)."""

    def decorate(train: Callable) -> Callable:
        if name in METHODS:
            raise ValueError(f"method {name!r} is registered twice")
        METHODS[name] = Method(name, config, train, paper)
        return train

    return decorate


def get_method(name: str) -> Method:
    if name not in METHODS:
        raise NogradError(f"unknown method {name!r} (valid: {', '.join(sorted(METHODS))})")
    return METHODS[name]


for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
