"""MATH: competition problems with a LaTeX answer in the last \\boxed{}, graded by math-verify.

Sources: test = `<data_dir>/math500/test.jsonl`, then the hub's `HuggingFaceH4/MATH-500`;
train = `<data_dir>/math/train.jsonl` (Hendrycks layout), then the hub's
`EleutherAI/hendrycks_math` (all subjects' train splits). Offline, both splits fall back to a
fixed seeded split of the CHAMP competition problems that `champ-dataset` ships, read from its
JSON file (importing the package needs `natsort`, which a --no-deps install leaves out). CHAMP
answers are free text; only those that are one expression math-verify parses (a number, or a
single formula without words) are kept, so that grading means something.
"""

from __future__ import annotations

import functools
import json
import re
import threading
from pathlib import Path
from typing import Any

from core.packages import package_file, package_version
from core.task import (
    Attempt,
    Problem,
    Source,
    Task,
    hub_attempt,
    hub_rows,
    load_first,
    local_attempt,
    seeded_split,
)
from evals import grading
from evals.tasks import register_task

HENDRYCKS_SUBJECTS = (
    "algebra",
    "counting_and_probability",
    "geometry",
    "intermediate_algebra",
    "number_theory",
    "prealgebra",
    "precalculus",
)
CHAMP_SEED = 0
CHAMP_TEST_FRACTION = 0.5
BOXED_OPENERS = ("\\boxed{", "\\fbox{")


def last_boxed(text: str) -> str | None:
    """The content of the last brace-balanced \\boxed{...} (or \\fbox{...}), else None."""
    start = max(text.rfind(opener) for opener in BOXED_OPENERS)
    if start < 0:
        return None
    open_brace = text.index("{", start)
    depth = 0
    for position in range(open_brace, len(text)):
        if text[position] == "{":
            depth += 1
        elif text[position] == "}":
            depth -= 1
            if depth == 0:
                return text[open_brace + 1 : position]
    return None


def _timeout() -> int | None:
    """math-verify's timeouts use signal.alarm, which works only in the main thread; elsewhere
    none is set, so a thread pool that scores completions must bound its own wall-clock."""
    return 5 if threading.current_thread() is threading.main_thread() else None


def verified(answer: str, completion: str) -> bool:
    """Does math-verify find the completion's answer equal to the gold `answer`? Run in the grading
    worker (`MATH.is_correct`), whose wall-clock limit bounds it: math-verify's own timeouts are
    off, so that an answer built to be slow (`\\boxed{9^{9^{9^{9}}}}`) ends as Ungradable and is
    counted, not quietly scored as wrong."""
    # math-verify (with sympy, about 1 s) is imported where it grades: the Snakefile's parse and the
    # jobs of other tasks import this module too, and never use it.
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    # Boxed answers first, as in open-r1's accuracy reward; a bare expression is the last resort.
    config = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    predicted = parse(completion, extraction_config=config, parsing_timeout=None)
    return verify(parse(f"${answer}$", parsing_timeout=None), predicted, timeout_seconds=None)


def parse_gold(answer: str) -> list:
    """A gold answer (LaTeX without delimiters) parsed by math-verify."""
    from math_verify import parse

    return parse(f"${answer}$", parsing_timeout=_timeout())


def _level(row: dict[str, Any]) -> int | None:
    """MATH difficulty 1-5 from 'Level 3' (Hendrycks), 3 (MATH-500) or 3.0 (the local copy)."""
    match = re.search(r"\d+", str(row.get("level", row.get("difficulty", ""))))
    return int(match.group()) if match else None


def math500_problems(rows: list[dict[str, Any]]) -> list[Problem]:
    """MATH-500 rows (problem, answer, and solution/subject/level where present)."""
    return [
        Problem(
            id=f"math500/test/{index}",
            question=row["problem"],
            answer=row["answer"],
            solution=row.get("solution"),
            meta={"level": _level(row), "subject": row.get("subject")},
        )
        for index, row in enumerate(rows)
    ]


def hendrycks_problems(rows: list[dict[str, Any]]) -> list[Problem]:
    """Hendrycks MATH rows (problem, solution, level, type); the answer is the solution's last box."""
    problems = []
    for index, row in enumerate(rows):
        answer = last_boxed(row["solution"])
        if answer is not None:  # a solution without a box gives no gold answer to grade against
            problems.append(
                Problem(
                    id=f"math/train/{index}",
                    question=row["problem"],
                    answer=answer,
                    solution=row["solution"],
                    meta={"level": _level(row), "subject": row["type"]},
                )
            )
    return problems


def hendrycks_train() -> tuple[list[Problem], Source]:
    """The train split of every Hendrycks MATH subject on the hub, in subject order."""
    rows = [
        row
        for subject in HENDRYCKS_SUBJECTS
        for row in hub_rows("EleutherAI/hendrycks_math", subject, "train")
    ]
    note = "train splits of all subject configs, concatenated; answer = last \\boxed{} of the solution"
    return hendrycks_problems(rows), Source("hub", "EleutherAI/hendrycks_math", note=note)


def _gradable(raw_answer: str, answer: str) -> bool:
    """Is a CHAMP answer one expression that math-verify can parse (not prose, not a list)?"""
    # '@@' marks formulas in CHAMP's raw text: a gradable answer is a number or one whole formula.
    one_formula = re.fullmatch(r"-?\d+(\.\d+)?|@@[^@]+@@", raw_answer.strip())
    # Three letters in a row (floor, sum) are a word or function that math-verify misreads.
    has_word = re.search(r"[A-Za-z]{3,}", answer.replace("sqrt", ""))
    if not one_formula or has_word:
        return False
    parsed = parse_gold(answer)
    # math-verify returns the raw string when it could read no expression from it.
    return bool(parsed) and not isinstance(parsed[0], str)


def champ_problem(item: dict[str, Any]) -> Problem:
    """A CHAMP problem; its solution is the worked steps followed by the boxed answer."""
    answer = item["_answer"]
    steps = "\n".join(step["_text"] for step in item["solution"]["steps"])
    return Problem(
        id=f"champ/{item['identifier']}",
        question=item["_text"],
        answer=answer,
        solution=f"{steps}\nThe final answer is $\\boxed{{{answer}}}$.",
        meta={"subject": item["category"]},
    )


@functools.cache
def champ_gradable() -> tuple[tuple[Problem, ...], int]:
    """CHAMP's problems with a gradable answer, in the file's order, and how many problems it has:
    read once per process (math-verify parses every answer, about 2 s), for both splits."""
    path = package_file("champ_dataset", "dataset_files/v0.json")
    items = json.loads(path.read_text(encoding="utf-8"))["problems"].values()
    return tuple(champ_problem(item) for item in items if _gradable(item["_raw_answer"], item["_answer"])), len(items)


def champ_split(split: str) -> tuple[list[Problem], Source]:
    """One part of a fixed seeded split of the gradable CHAMP problems."""
    problems, total = champ_gradable()
    train, test = seeded_split(problems, CHAMP_SEED, CHAMP_TEST_FRACTION)
    chosen = test if split == "test" else train
    note = (
        f"CHAMP v0: {len(problems)} of {total} problems have a gradable answer; seeded split, "
        f"seed {CHAMP_SEED}, {split} {len(chosen)} of {len(problems)}"
    )
    return chosen, Source("package", "champ-dataset", package_version("champ-dataset"), note)


@register_task
class MATH(Task):
    """MATH-500 / Hendrycks MATH with the Qwen-math prompt, graded by math-verify."""

    name = "math"
    crosscheck = True
    system_prompt = "Please reason step by step, and put your final answer within \\boxed{}."

    def load(self, split: str, data_dir: Path | None) -> tuple[list[Problem], Source]:
        attempts: list[Attempt] = []
        if split == "test":
            if data_dir is not None:
                attempts.append(local_attempt(data_dir, "math500/test.jsonl", math500_problems, ("problem", "answer")))
            attempts.append(hub_attempt("HuggingFaceH4/MATH-500", None, "test", math500_problems))
        else:
            if data_dir is not None:
                attempts.append(local_attempt(data_dir, "math/train.jsonl", hendrycks_problems,
                                              ("problem", "solution", "type")))
            attempts.append(("hub EleutherAI/hendrycks_math", hendrycks_train))
        attempts.append(("package champ-dataset", lambda: champ_split(split)))
        return load_first(f"math {split}", attempts)

    def user_message(self, problem: Problem) -> str:
        return problem.question

    def extract(self, completion: str) -> str | None:
        return last_boxed(completion)

    def is_correct(self, problem: Problem, completion: str) -> bool:
        """math-verify's judgement, in the grading worker under its wall-clock limit (evals/grading.py)."""
        return grading.call(verified, problem.answer, completion)

    def has_format(self, completion: str) -> bool:
        return last_boxed(completion) is not None
