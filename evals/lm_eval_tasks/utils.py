"""lm-evaluation-harness hooks for the nograd task template beside this file (nograd.yaml).

The user turn of the prompt and the verifier are nograd's own (`evals.tasks`), so an lm-eval run
of these tasks differs from nograd's evaluation only in its generation loop: lm-eval's batching,
padding and `model.generate`, against nograd's sampler. The cross-check is there to catch a bug
in that loop, not to compare two graders. (lm-eval's stock gsm8k scores 5-shot with its own
regexes, and its MATH tasks grade minerva-style; either would move the number for reasons that
say nothing about the sampler.) Each hook takes the task's name first: `jobs.crosscheck.task_config`
binds it (functools.partial), giving lm-eval the `doc_to_text(doc)` and `process_results(doc, results)`
it calls.
"""

from __future__ import annotations

from core.task import Problem, graded
from evals.tasks import get_task


def problem(doc: dict) -> Problem:
    """A row of a prepared split (results/data/<task>/test.jsonl), as lm-eval hands it over."""
    return Problem(id=doc["id"], question=doc["question"], answer=doc["answer"], solution=doc.get("solution"),
                   meta=doc.get("meta") or {})


def user_message(task: str, doc: dict) -> str:
    """The user turn of the prompt: nograd's, for the task called `task`."""
    return get_task(task).user_message(problem(doc))


def process_results(task: str, doc: dict, results: list[str]) -> dict[str, float]:
    """The score of the one greedy completion in `results`: nograd's verifier, as exact_match (0 where
    it cannot grade the completion within its limits, as nograd's evaluation scores it)."""
    return {"exact_match": graded(get_task(task), problem(doc), results[0])[0]}
