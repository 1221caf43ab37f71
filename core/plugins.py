"""Methods and tasks kept outside this repository: `NOGRAD_PLUGINS` names Python files (joined by
the path separator, ':' on Linux) that register methods (`methods.register`) or tasks
(`evals.tasks.register_task`). Both registries import them after their own modules, in every
process, so a Snakemake job sees what the shell that started Snakemake named.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path

from core.errors import NogradError, one_line

VARIABLE = "NOGRAD_PLUGINS"


def load() -> None:
    """Import each plugin file once per process (a file that imports a registry is not re-entered)."""
    for entry in filter(None, os.environ.get(VARIABLE, "").split(os.pathsep)):
        path = Path(entry).resolve()
        name = f"nograd_plugin_{path.stem}_{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"
        if name in sys.modules:
            continue
        if not path.is_file():
            raise NogradError(f"{VARIABLE}: plugin file {entry} does not exist")
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as error:
            del sys.modules[name]
            raise NogradError(f"{VARIABLE}: plugin file {entry} failed to load: {one_line(error)}") from error
