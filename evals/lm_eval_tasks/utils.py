"""lm-evaluation-harness hooks for the nograd task YAMLs beside this file.

The user turn of the prompt and the verifier are nograd's own (`evals.tasks`), so an lm-eval run
of these tasks differs from nograd's evaluation only in its generation loop: lm-eval's batching,
padding and `model.generate`, against nograd's sampler. The cross-check is there to catch a bug
in that loop, not to compare two graders. (lm-eval's stock gsm8k scores 5-shot with its own
regexes, and its MATH tasks grade minerva-style; either would move the number for reasons that
say nothing about the sampler.)
"""

from __future__ import annotations

from evals.tasks import get_task
from evals.tasks.base import Problem


def problem(doc: dict) -> Problem:
    """A row of a prepared split (results/data/<task>/test.jsonl), as lm-eval hands it over."""
    return Problem(id=doc["id"], question=doc["question"], answer=doc["answer"], solution=doc.get("solution"),
                   meta=doc.get("meta") or {})


def _scored(task: str, doc: dict, results: list[str]) -> dict[str, float]:
    return {"exact_match": float(get_task(task).is_correct(problem(doc), results[0]))}


def gsm8k_user_message(doc: dict) -> str:
    return get_task("gsm8k").user_message(problem(doc))


def gsm8k_process_results(doc: dict, results: list[str]) -> dict[str, float]:
    return _scored("gsm8k", doc, results)


def math_user_message(doc: dict) -> str:
    return get_task("math").user_message(problem(doc))


def math_process_results(doc: dict, results: list[str]) -> dict[str, float]:
    return _scored("math", doc, results)
