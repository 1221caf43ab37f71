"""The task registry: every task by name, so that configs and the CLI can name them.

A task is one module in this package (or a plugin file named by NOGRAD_PLUGINS, `core.plugins`)
whose `Task` subclass is decorated with `register_task`. Every module of the package is imported
below, in name order, then the plugins: adding a task is adding its file.
"""

from __future__ import annotations

import importlib
import pkgutil

from core import plugins
from core.task import DataUnavailable, Problem, Source, Task, content_hash

TASKS: dict[str, Task] = {}
"""Each registered task's one instance, by name, in registration order."""

__all__ = ["TASKS", "DataUnavailable", "Problem", "Source", "Task", "content_hash", "get_task", "register_task"]


def register_task(cls: type[Task]) -> type[Task]:
    """Class decorator: register one instance of the task `cls` under its `name`."""
    if cls.name in TASKS:
        raise ValueError(f"task {cls.name!r} is registered twice")
    TASKS[cls.name] = cls()
    return cls


def get_task(name: str) -> Task:
    """The registered task called `name`; an unknown name raises ValueError listing valid ones."""
    try:
        return TASKS[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}; valid tasks: {', '.join(sorted(TASKS))}") from None


# Last: the task modules import `register_task` from this (then partly initialised) module.
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
plugins.load()
