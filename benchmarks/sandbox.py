"""Sandbox throughput: programs per second through `run_program`, with the namespaces (the default where
they can be made) and without them (privilege drop, limits and guard only), side by side in one process.

Two programs: a trivial one (`pass`), and a HumanEval canonical solution with its tests, run as the Code
task runs it (entry point checked for plain data); each one at a time and with a thread pool of 2.

    python -m benchmarks.sandbox [--runs 40] [--repeats 3] [--problem HumanEval/0]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from benchmarks.common import write_table
from evals import sandbox
from evals.tasks import get_task
from evals.tasks.code import humaneval_split


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40, help="programs per measurement")
    parser.add_argument("--problem", default="HumanEval/0")
    parser.add_argument("--repeats", type=int, default=3, help="measurements per row, alternated; the median is shown")
    args = parser.parse_args()

    task = get_task("code")
    problem = next(p for p in humaneval_split("test")[0] + humaneval_split("train")[0] if p.id == args.problem)
    humaneval = task.program(problem, problem.solution[len(problem.meta["prompt"]) :])
    programs = {"trivial (`pass`)": ("pass\n", ""), f"{args.problem}, canonical, with its tests": (
        humaneval, problem.meta["entry_point"])}

    isolated = sandbox._sandbox_mode()
    modes = {"off": dataclasses.replace(isolated, namespaces=False)}
    if isolated.namespaces:
        modes = {"on": isolated, **modes}

    rows = []
    for name, (program, entry_point) in programs.items():
        for workers in (1, 2):
            def batch(mode: sandbox._Mode, runs: int, workers: int = workers) -> float:
                """Seconds for `runs` programs through `workers` threads; every one must pass."""
                start = time.perf_counter()
                with ThreadPoolExecutor(workers) as pool:
                    passed = list(pool.map(lambda _: sandbox._run(program, 10.0, 1024, mode, entry_point).passed,
                                           range(runs)))
                assert all(passed), f"{name}: {passed.count(False)} of {runs} failed"
                return time.perf_counter() - start

            times = {label: [] for label in modes}
            for label, mode in modes.items():
                batch(mode, 2)  # warm-up
            for _ in range(args.repeats):  # alternated, so that a busier moment of the machine hits both
                for label, mode in modes.items():
                    times[label].append(batch(mode, args.runs))
            for label in modes:
                seconds = statistics.median(times[label])
                ratio = f"{statistics.median(times['off']) / seconds:.2f}x" if "on" in modes else ""
                rows.append([name, label, str(workers), str(args.runs), f"{seconds:.2f}", f"{args.runs / seconds:.1f}",
                             f"{1000 * seconds / args.runs:.0f}", ratio])
    if not isolated.namespaces:
        print("namespaces cannot be made here: only the rows without them")
    header = ["program", "namespaces", "workers", "runs", "seconds", "programs/s", "ms per program", "vs off"]
    title = (f"Sandbox: programs through run_program as {isolated.interpreter}, {args.runs} per measurement, "
             f"median of {args.repeats}")
    write_table("sandbox", title, header, rows)


if __name__ == "__main__":
    main()
