"""Sandbox throughput: programs graded per second through `run_program`, and against the design before
the verdict moved out of the program's process (`--baseline REF`: that commit's evals/sandbox.py, run
in the same process, measurements alternated).

Two programs: a trivial one (`pass`, no tests) and a HumanEval canonical solution with its tests, graded
as the Code task grades it; each one at a time and with a thread pool of 2.

    python -m benchmarks.sandbox [--runs 40] [--repeats 3] [--problem HumanEval/0] [--baseline 89f1b14]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import types
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from benchmarks.common import write_table
from core.config import REPO
from evals import sandbox
from evals.sandbox import SandboxResult
from evals.tasks import get_task
from evals.tasks.code import humaneval_split


def baseline_module(ref: str) -> types.ModuleType:
    """evals/sandbox.py as it was at `ref` (one file, standard library only), as a module of its own."""
    source = subprocess.run(["git", "show", f"{ref}:evals/sandbox.py"], cwd=REPO, check=True, capture_output=True,
                            text=True).stdout
    module = sys.modules["baseline_sandbox"] = types.ModuleType("baseline_sandbox")  # dataclasses look it up
    exec(compile(source, f"{ref}:evals/sandbox.py", "exec"), module.__dict__)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40, help="programs per measurement")
    parser.add_argument("--problem", default="HumanEval/0")
    parser.add_argument("--repeats", type=int, default=3, help="measurements per row, alternated; the median is shown")
    parser.add_argument("--baseline", help="a commit whose evals/sandbox.py (verdict inside the program) to compare")
    args = parser.parse_args()

    task = get_task("code")
    problem = next(p for p in humaneval_split("test")[0] + humaneval_split("train")[0] if p.id == args.problem)
    meta, body = problem.meta, problem.solution[len(problem.meta["prompt"]):]
    graders: dict[str, dict[str, Callable[[], SandboxResult]]] = {
        "trivial (`pass`)": {"verdict outside": lambda: sandbox.run_program("pass\n")},
        f"{args.problem}, canonical, with its tests": {"verdict outside": lambda: sandbox.run_program(
            task.program(problem, body), tests=meta["test"], helpers=meta["prompt"], entry_point=meta["entry_point"])},
    }
    if args.baseline:
        old = baseline_module(args.baseline)
        in_process = f"{meta['prompt']}{body}\n\n{meta['test']}\n\ncheck({meta['entry_point']})\n"
        label = f"verdict inside ({args.baseline})"
        graders["trivial (`pass`)"][label] = lambda: old.run_program("pass\n")
        graders[f"{args.problem}, canonical, with its tests"][label] = lambda: old.run_program(
            in_process, entry_point=meta["entry_point"])

    rows = []
    for name, designs in graders.items():
        for workers in (1, 2):
            def batch(grade: Callable[[], SandboxResult], runs: int, workers: int = workers) -> float:
                """Seconds for `runs` programs through `workers` threads; every one must pass."""
                start = time.perf_counter()
                with ThreadPoolExecutor(workers) as pool:
                    results = list(pool.map(lambda _: grade(), range(runs)))
                assert all(r.passed for r in results), f"{name}: {[r for r in results if not r.passed][:1]}"
                return time.perf_counter() - start

            times: dict[str, list[float]] = {label: [] for label in designs}
            for grade in designs.values():
                batch(grade, 2)  # warm-up, and the isolation probe
            for _ in range(args.repeats):  # alternated, so that a busier moment of the machine hits both
                for label, grade in designs.items():
                    times[label].append(batch(grade, args.runs))
            new = statistics.median(times["verdict outside"])
            for label in designs:
                seconds = statistics.median(times[label])
                rows.append([name, label, str(workers), str(args.runs), f"{seconds:.2f}", f"{args.runs / seconds:.1f}",
                             f"{1000 * seconds / args.runs:.0f}", f"{seconds / new:.2f}x"])
    header = ["program", "design", "workers", "runs", "seconds", "programs/s", "ms per program", "time vs outside"]
    title = (f"Sandbox: programs graded through run_program, isolation {sandbox.isolation_in_use().describe()}; "
             f"{args.runs} per measurement, median of {args.repeats}")
    write_table("sandbox", title, header, rows)


if __name__ == "__main__":
    main()
