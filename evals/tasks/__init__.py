"""The task registry: every task by name, so that configs and the CLI can name them."""

from __future__ import annotations

from evals.tasks.base import DataUnavailable, Problem, Source, Task, content_hash
from evals.tasks.code import Code
from evals.tasks.gsm8k import GSM8K
from evals.tasks.math import MATH

TASKS: dict[str, Task] = {task.name: task for task in (GSM8K(), MATH(), Code())}

__all__ = ["TASKS", "DataUnavailable", "Problem", "Source", "Task", "content_hash", "get_task"]


def get_task(name: str) -> Task:
    """The registered task called `name`; an unknown name raises ValueError listing valid ones."""
    try:
        return TASKS[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}; valid tasks: {', '.join(sorted(TASKS))}") from None
