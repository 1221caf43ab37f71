"""Grade untrusted code: the program runs isolated, the tests run apart, and only plain data passes.

HumanEval and MBPP completions are untrusted programs, and a policy optimised against their reward
finds whatever the grader accepts. `run_program` grades one with two processes:

- **The program** (prompt and completion: the definitions, never the tests) runs in the sandbox
  (`init.py`, then `child.py`): an interpreter started with `-I -S` (its standard library only) in
  network, mount, PID and IPC namespaces of its own, in a file system of its own (a tmpfs in which
  only the system's directories and the interpreter's prefix are visible, read-only; its own
  directory, /tmp and /dev/shm are small private tmpfs mounts; no repository, virtual environment,
  results/, home or /sys), with no privilege (as `nobody` for a root caller, in a user namespace
  without capabilities for any other), under resource limits and, where one can be made, a cgroup
  of its own (`isolation.py`). When it ends, the kernel kills every process it started.
- **The tests** run in a trusted process of their own (`tester.py`: forked per program from a
  zygote this process starts once), with the dataset's helpers (HumanEval's prompt: `poly`,
  `encode_cyclic`). The function they test is a
  stand-in that sends each call's arguments to the program over a pipe and returns the answer.
  Both ways, only plain data passes (`evals/sandbox/plain.py`: None, bool, int, float, complex,
  str, bytes, list, tuple, dict, set, frozenset, exactly those types): the program never sees the
  tests, the expected values or the verdict, and nothing it does in its own process, to its own
  interpreter or memory, decides anything. The tests' process writes the verdict.

The verdict (`SandboxResult.status`): 'passed'; 'failed' (a test failed, the candidate raised,
the program crashed or exited before its tests); 'timeout' (wall clock or CPU time);
'reward_hack' (an attempt the grader recognises: an answer that is not plain data, or an exit in
the middle of its tests); 'error' (the grader could not run it). The Code task turns
'reward_hack' into RewardHack, counted per method in the `reward_hacks` meter.

Isolation is all or nothing: `select_isolation("full")` (the default) raises SandboxUnavailable
with one line where full isolation cannot be had here, and only `select_isolation("none")`
(`sandbox.isolation: none` in the configuration) runs programs without it, which the jobs record
and the report's header shows in red.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass

from evals.sandbox.isolation import LEVELS, TOOLS_PATH, Cgroup, Isolation, SandboxUnavailable, candidate, inlined

log = logging.getLogger(__name__)
__all__ = ["SandboxResult", "SandboxUnavailable", "run_program", "select_isolation", "isolation_in_use"]

_STDERR_TAIL_BYTES = 64 * 1024
_MAX_FILE_BYTES = 16 * 1024 * 1024
# Processes (threads included) per real user, counted by the kernel across every sandbox of that
# user; where there is a cgroup, also each program's own.
_MAX_PROCESSES = 128
_MAX_OPEN_FILES = 64
_POLL_S = 0.01
_GRACE_S = 5.0
_DETAIL_CHARS = 200
_TESTER = inlined("tester")
_MAX_TASK_BYTES = 64 * 2**10  # HumanEval's largest tests and prompt take 2.6 KB; 2x fits any default socket buffer


class _Testers:
    """The zygote that forks a tester per program (tester.py), started at the first program and kept."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.zygote: subprocess.Popen | None = None
        self.socket: socket.socket | None = None
        self.owner = 0

    def start(self, interpreter: str, task: dict, fds: tuple[int, int, int]) -> None:
        """Start a tester on `task`, with the channel's two descriptors and the verdict's."""
        message = json.dumps(task).encode()
        if len(message) > _MAX_TASK_BYTES:
            raise OSError(f"the tests take {len(message)} bytes, more than {_MAX_TASK_BYTES}")
        with self.lock:
            for attempt in (1, 2):
                if self.zygote is None or self.zygote.poll() is not None or self.owner != os.getpid():
                    self._spawn(interpreter)
                try:
                    socket.send_fds(self.socket, [message], list(fds))
                    return
                except OSError:
                    if attempt == 2:
                        raise
                    self.zygote = None

    def _spawn(self, interpreter: str) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 2 * _MAX_TASK_BYTES)
        with theirs:
            self.zygote = subprocess.Popen([interpreter, "-I", "-S", "-c", _TESTER], stdin=theirs,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/",
                                           env={"PATH": TOOLS_PATH, "LANG": "C.UTF-8"}, start_new_session=True)
        self.socket, self.owner = ours, os.getpid()


_testers = _Testers()


@dataclass(frozen=True)
class SandboxResult:
    """The outcome of grading one program."""

    passed: bool
    status: str
    """'passed', 'failed', 'timeout', 'reward_hack' or 'error' (see the module's docstring)."""
    detail: str
    """One short line: 'passed', 'AssertionError', 'timed out after 10.0 s', 'exit code -11 (...)'."""


def run_program(
    program: str, timeout_s: float = 10.0, memory_mb: int = 1024, *, tests: str = "", helpers: str = "",
    entry_point: str = "",
) -> SandboxResult:
    """Grade `program` (Python source: the definitions) against `tests` in the sandbox.

    `tests` define `check(candidate)`, which is called with a stand-in for the program's
    `entry_point`; `helpers` (the dataset's, never the completion's) run before them in the tests'
    process. Without tests, the program passes when its top level runs to its end. Never raises for
    anything the program does; a result comes back within about `timeout_s` plus a few seconds of
    clean-up at worst. SandboxUnavailable when the configured isolation cannot be had here.
    """
    return _run(isolation_in_use(), program, tests, helpers, entry_point, timeout_s, memory_mb)


_selected = "full"
_lock = threading.Lock()
_probed: dict[str, Isolation | SandboxUnavailable] = {}
_PROBE = "import decimal, json\n"


def select_isolation(level: str) -> Isolation:
    """Use isolation `level` ('full' or 'none') for every program this process grades from now on;
    SandboxUnavailable, at once, when it cannot be had here."""
    global _selected
    if level not in LEVELS:
        raise SandboxUnavailable(f"sandbox.isolation: {level!r} is not one of {', '.join(LEVELS)}")
    _selected = level
    return isolation_in_use()


def isolation_in_use() -> Isolation:
    """The isolation programs run under: probed once per level, by running a program through it."""
    with _lock:  # concurrent first calls wait for one probe
        if _selected not in _probed:
            _probed[_selected] = _probe(_selected)
        found = _probed[_selected]
    if isinstance(found, SandboxUnavailable):
        raise found
    return found


def _probe(level: str) -> Isolation | SandboxUnavailable:
    try:
        mode = candidate(level)
    except SandboxUnavailable as missing:
        return missing
    result = _run(mode, _PROBE, "", "", "", 30.0, 1024)
    if result.passed:
        if level == "full" and not mode.cgroups:
            log.warning("sandbox: no cgroup can be made here (root, or a delegated cgroup v2, can); each program's "
                        "memory is bounded per process: address space, file size x open files, tmpfs sizes and its "
                        "IPC namespace's shared-memory limits")
        return mode
    how = ("run the job as root, or allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
           "user.max_user_namespaces > 0; AppArmor: kernel.apparmor_restrict_unprivileged_userns=0)"
           if os.geteuid() != 0 else "run it where namespaces can be made (a container needs --privileged or "
           "CAP_SYS_ADMIN)")
    return SandboxUnavailable(f"sandbox: cannot isolate programs here ({result.detail}); {how}, or set "
                              "sandbox.isolation: none to grade code without isolation (the report will say so)")


def _run(mode: Isolation, program: str, tests: str, helpers: str, entry_point: str, timeout_s: float,
         memory_mb: int) -> SandboxResult:
    try:
        workdir = tempfile.mkdtemp(prefix="nograd-sandbox-")
    except OSError as exc:
        return _error(f"cannot create a temporary directory: {exc}")
    cgroup = None
    try:
        if mode.cgroups:
            try:
                cgroup = Cgroup(mode.cgroups, memory_mb * 2**20, _MAX_PROCESSES)
            except OSError as exc:
                return _error(f"cannot make the program's cgroup: {exc}")
        return _run_in(workdir, mode, cgroup, program, tests, helpers, entry_point, timeout_s, memory_mb)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        if cgroup is not None:
            cgroup.remove()


def _run_in(workdir: str, mode: Isolation, cgroup: Cgroup | None, program: str, tests: str, helpers: str,
            entry_point: str, timeout_s: float, memory_mb: int) -> SandboxResult:
    """Start the program and its tests, supervise both, and judge."""
    path = os.path.join(workdir, "program.py")
    cpu_s = math.ceil(timeout_s) + 1
    request_read, request_write = os.pipe()
    reply_read, reply_write = os.pipe()
    verdict_read, verdict_write = os.pipe()
    theirs, testers = (request_read, reply_write), (request_write, reply_read, verdict_write)
    child = None
    try:
        # Lone surrogates are written as they are, so that they fail as a SyntaxError.
        with open(path, "w", encoding="utf-8", errors="surrogatepass") as source:
            source.write(program)
        spec = {"workdir": workdir, "request_fd": request_read, "reply_fd": reply_write, "entry_point": entry_point,
                "limits": [memory_mb * 2**20, cpu_s, _MAX_FILE_BYTES, _MAX_PROCESSES, _MAX_OPEN_FILES]}
        task = {"tests": tests, "helpers": helpers, "entry_point": entry_point, "timeout_s": timeout_s,
                "memory_bytes": 2 * memory_mb * 2**20}
        try:
            child = subprocess.Popen(
                mode.command(spec, cgroup.files if cgroup else []), cwd=workdir, env=_environment(workdir),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, pass_fds=theirs,
                start_new_session=True)
            _testers.start(mode.interpreter, task, testers)
        except (OSError, subprocess.SubprocessError) as exc:
            return _error(f"could not start the program or its tests: {exc}")
        finally:
            for fd in theirs + testers:
                os.close(fd)
        stderr, written, timed_out = _supervise(child, verdict_read, timeout_s, mode.level == "full")
        returncode = _reap(child)
    finally:
        os.close(verdict_read)
        if child is not None and child.returncode is None:
            _kill(child.pid, False)
            _reap(child)
    if returncode is None:
        return _error(f"could not stop the program (pid {child.pid})")
    if mode.level == "full" and 128 < returncode < 128 + signal.NSIG:
        returncode = 128 - returncode  # the namespace's init reports a signal N as 128 + N
    return _verdict(written, timed_out, returncode, stderr, timeout_s, cpu_s)


def _environment(workdir: str) -> dict[str, str]:
    return {
        "PATH": TOOLS_PATH,
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        # Threads count against the process limit: one per numerical library is enough.
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


def _supervise(child: subprocess.Popen, verdict_fd: int, timeout_s: float,
               whole_namespace: bool) -> tuple[bytes, bytes, bool]:
    """Wait for the tests' verdict (or the wall clock's end), killing the program as soon as it ends,
    so that nothing it left behind can hold the channel open; then kill both.

    Returns (the tail of the program's stderr, what the tests' process wrote, whether time ran out).
    The program's stderr is read meanwhile, so that a chatty program cannot block on a full pipe,
    keeping only its tail. `whole_namespace`: the program's first process takes every other with
    it (a PID namespace), so its session need not be searched for strays.
    """
    program_fd = child.stderr.fileno()
    data = {program_fd: bytearray(), verdict_fd: bytearray()}
    open_fds = set(data)
    ended = os.pidfd_open(child.pid)  # readable once the program's first process has exited
    poller = select.poll()
    for fd in (*data, ended):
        poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + timeout_s + 1.0  # the tests' process keeps the time; this is its backstop

    def read(until: float) -> None:
        for fd, _ in poller.poll(max(0.0, until - time.monotonic()) * 1000):
            if fd == ended:
                poller.unregister(ended)
                _kill(child.pid, whole_namespace)
            elif not _read_into(fd, data[fd]):
                poller.unregister(fd)
                open_fds.discard(fd)

    try:
        while verdict_fd in open_fds and time.monotonic() < deadline:
            read(deadline)
        timed_out = verdict_fd in open_fds
        _kill(child.pid, whole_namespace)
        give_up = time.monotonic() + _GRACE_S  # what is left in the pipe was written before the kill
        while program_fd in open_fds and time.monotonic() < give_up:
            read(give_up)
    finally:
        os.close(ended)
    child.stderr.close()
    return bytes(data[program_fd]), bytes(data[verdict_fd]), timed_out


def _reap(process: subprocess.Popen) -> int | None:
    try:
        return process.wait(timeout=_GRACE_S)
    except subprocess.TimeoutExpired:
        return None


def _read_into(fd: int, tail: bytearray) -> bool:
    """Append what the pipe holds to `tail`, keeping only its end; False at end of file."""
    chunk = os.read(fd, _STDERR_TAIL_BYTES)
    tail += chunk
    del tail[:-_STDERR_TAIL_BYTES]
    return bool(chunk)


def _kill(sid: int, whole_namespace: bool) -> None:
    """SIGKILL every process of the session `sid`, including those that left its process group; with
    `whole_namespace`, its leader's end takes every other process with it, and a signal is enough."""
    # One signal to the whole group first: the kernel delivers it atomically, which
    # outruns a fork bomb; the sweep then catches whatever moved to another group.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(sid, signal.SIGKILL)
    if whole_namespace:
        return
    give_up = time.monotonic() + _GRACE_S
    while (members := _session_members(sid)) and time.monotonic() < give_up:
        for pid in members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(_POLL_S)


def _session_members(sid: int) -> list[int]:
    """Pids of the live processes of session `sid` (zombies are dead already)."""
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat_file:
                stat = stat_file.read()
        except OSError:
            continue  # it ended while we looked
        # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
        state, _ppid, _pgrp, session = stat[stat.rindex(b")") + 2 :].split()[:4]
        if int(session) == sid and state not in (b"Z", b"X"):
            members.append(int(name))
    return members


def _verdict(written: bytes, timed_out: bool, returncode: int, stderr: bytes, timeout_s: float,
             cpu_s: int) -> SandboxResult:
    """The result, from the tests' verdict and, where the program ended first, how it ended."""
    try:
        verdict = json.loads(written)
        status, detail = verdict["status"], verdict["detail"]
    except (ValueError, TypeError, KeyError):
        if timed_out:
            return SandboxResult(False, "timeout", f"timed out after {timeout_s:.1f} s")
        return _error("the tests' process ended without a verdict")
    if status in ("passed", "failed", "timeout", "reward_hack", "error"):
        return SandboxResult(status == "passed", status, detail[:_DETAIL_CHARS])
    # status 'gone': the program ended before its tests ran, or while they ran
    if returncode == -signal.SIGXCPU:
        return SandboxResult(False, "timeout", f"CPU time limit of {cpu_s} s exceeded")
    if returncode < 0:
        name = signal.strsignal(-returncode) or "unknown signal"
        return SandboxResult(False, "failed", f"exit code {returncode} ({name})")
    if detail == "during":
        return SandboxResult(False, "reward_hack", f"reward hack: the program exited while its tests ran (status "
                                                   f"{returncode})")
    if returncode == 0:
        return SandboxResult(False, "failed", "exited with status 0 before its tests ran")
    return SandboxResult(False, "failed", _last_line(stderr) or f"exit code {returncode}")


def _last_line(stderr: bytes) -> str:
    lines = [line.strip() for line in stderr.decode("utf-8", "replace").splitlines()]
    return next((line for line in reversed(lines) if line), "")[:_DETAIL_CHARS]


def _error(detail: str) -> SandboxResult:
    return SandboxResult(False, "error", detail)
