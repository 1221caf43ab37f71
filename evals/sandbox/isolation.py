"""How programs are isolated on this machine: found once by a probe, refused when it falls short.

`full` (the default) needs all of: network, mount, PID and IPC namespaces of the program's own
(util-linux's `unshare`, in Debian's base system); a file system of its own in which only the
system's directories and the interpreter's prefix are visible, read-only (`init.py`); and either
the drop from root to `nobody` or, for a caller that is not root, an unprivileged user namespace
in which the program holds no capability. When any of it cannot be had, the probe (in
`evals/sandbox/__init__.py`) raises SandboxUnavailable with one line that says what is missing and
how to get it: no program is graded without isolation unless the configuration says
`sandbox.isolation: none`, which the report's header shows in red.

Memory and processes: a cgroup per program (memory and pids limits) where the caller may make
one (v2, or v1's memory and pids hierarchies), else the limits that still bound memory held
outside the address space (file size and open files, the private tmpfs sizes, the IPC
namespace's own shared-memory limits), which `describe()` says.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from core.errors import NogradError

LEVELS = ("full", "none")
SANDBOX_USER = "nobody"
TOOLS_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
NAMESPACES = ["--net", "--mount", "--pid", "--ipc", "--propagation=private", "--fork", "--kill-child"]


def inlined(module: str) -> str:
    """The source of evals/sandbox/`module`.py with each `from evals.sandbox.X import ...` replaced by X's
    own (inlined) source: the processes it runs in need nothing from this repository, which the
    program's cannot even see."""
    lines = []
    for line in Path(__file__).with_name(f"{module}.py").read_text().splitlines(keepends=True):
        imported = re.match(r"from evals\.sandbox\.(\w+) import ", line)
        lines.append(inlined(imported[1]) + "\n" if imported else line)
    return "".join(lines)


INIT = inlined("init")
"""The program's process: the namespace's init, the privilege drop and the program's side (init.py)."""
CGROUP_ROOT = Path("/sys/fs/cgroup")


class SandboxUnavailable(NogradError):
    """The isolation the configuration asks for cannot be had on this machine."""


@dataclass(frozen=True)
class Isolation:
    """How programs run here: `level` 'full' (namespaces, own file system, no privilege) or 'none'."""

    level: str
    interpreter: str
    """The Python programs run with (`-I -S`: its standard library only)."""
    uid: int | None = None
    """The user a root caller drops to; None: a caller that is not root (a user namespace) or level none."""
    gid: int | None = None
    unshare: str = ""
    """util-linux's unshare, which makes the namespaces."""
    shown: tuple[str, ...] = ()
    """Directories shown read-only beside the system's: the interpreter's prefix."""
    cgroups: tuple[str, ...] = ()
    """The cgroup hierarchies programs are limited by ('v2', or 'memory' and 'pids' of v1)."""

    def describe(self) -> str:
        """One line for a job's metrics and the report's header."""
        if self.level == "none":
            return ("none (sandbox.isolation: none): programs run as the caller, with the caller's network, files "
                    "and processes, held by resource limits only")
        who = f"as {SANDBOX_USER}" if self.uid is not None else "in a user namespace, without capabilities"
        memory = (f"a cgroup per program ({' and '.join(self.cgroups)})" if self.cgroups else
                  "no cgroup: memory bound per process (address space, file size x open files, tmpfs sizes, "
                  "IPC namespace limits)")
        return f"full: network, mount, PID and IPC namespaces, a read-only file system of their own, {who}; {memory}"

    def command(self, spec: dict, cgroup_files: list[str]) -> list[str]:
        """The argv that starts the program's process (init.py) on `spec`: its directory, channel,
        limits and entry point."""
        spec = {**spec, "isolation": self.level, "shown": list(self.shown), "cgroups": cgroup_files,
                "uid": self.uid, "gid": self.gid}
        python = [self.interpreter, "-I", "-S", "-c", INIT, json.dumps(spec)]
        if self.level == "none":
            return python
        user = ["--user", "--map-root-user"] if self.uid is None else []
        return [self.unshare, *user, *NAMESPACES, *python]


def interpreter_and_prefixes() -> tuple[str, tuple[str, ...]]:
    """The job's own CPython without its virtual environment, and the prefix to show for it.

    Programs need the standard library only: the base interpreter, whose prefix is shown read-only
    wherever it lives (a user's pyenv in their home, the checkout under /tmp), never the virtual
    environment, the repository or results/.
    """
    interpreter = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    prefix = os.path.realpath(sys.base_prefix)
    system = ("/usr/", "/bin/", "/sbin/", "/lib/", "/lib64/")
    shown = () if any((prefix + "/").startswith(d) for d in system) else (prefix,)
    return interpreter, shown


LIMIT_FILES = {"v2": ("memory.max", "pids.max"), "memory": ("memory.limit_in_bytes",), "pids": ("pids.max",)}
"""The limits a program's cgroup sets, per hierarchy: cgroup v2, or v1's memory and pids."""


class Cgroup:
    """A cgroup of its own per program, with memory and process limits, in `hierarchies`; OSError
    where one cannot be made (not root and no delegated cgroup, or the controllers are off)."""

    def __init__(self, hierarchies: tuple[str, ...], memory_bytes: int, processes: int):
        values = {"memory.max": memory_bytes, "memory.limit_in_bytes": memory_bytes, "pids.max": processes}
        name = f"nograd-sandbox-{uuid.uuid4().hex}"
        self.paths = []
        try:
            for hierarchy in hierarchies:
                path = _own_cgroup(hierarchy) / name
                path.mkdir()
                self.paths.append(path)
                for key in LIMIT_FILES[hierarchy]:
                    (path / key).write_text(str(values[key]))  # cgroupfs refuses to create a file it lacks
        except OSError:
            self.remove()
            raise

    @property
    def files(self) -> list[str]:
        """The files a process writes 0 to, to join (init.py does, first thing)."""
        return [str(path / "cgroup.procs") for path in self.paths]

    def remove(self) -> None:
        """Remove the cgroups, once the kernel has torn down their last processes."""
        for path in self.paths:
            for _ in range(500):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)


def _own_cgroup(hierarchy: str) -> Path:
    """This process's own cgroup directory in `hierarchy`."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        number, controllers, path = line.split(":", 2)
        if hierarchy == "v2" and number == "0":
            unified = CGROUP_ROOT / "unified"
            return (unified if (unified / "cgroup.procs").exists() else CGROUP_ROOT) / path.lstrip("/")
        if hierarchy in controllers.split(","):
            return CGROUP_ROOT / hierarchy / path.lstrip("/")
    raise OSError(f"this process is in no {hierarchy} cgroup")


def cgroup_hierarchies() -> tuple[str, ...]:
    """Where a cgroup with memory and process limits can be made here: ('v2',), ('memory', 'pids') or ()."""
    for hierarchies in (("v2",), ("memory", "pids")):
        try:
            Cgroup(hierarchies, 2**30, 64).remove()
        except OSError:
            continue
        return hierarchies
    return ()


def candidate(level: str) -> Isolation:
    """The isolation of `level` as it would be made here, before the probe checks it."""
    interpreter, shown = interpreter_and_prefixes()
    if level == "none":
        return Isolation("none", interpreter)
    unshare = shutil.which("unshare", path=TOOLS_PATH)
    if unshare is None:
        raise SandboxUnavailable("sandbox: unshare not found (Debian: apt-get install util-linux)")
    uid = gid = None
    if os.geteuid() == 0:
        try:
            entry = pwd.getpwnam(SANDBOX_USER)
            uid, gid = entry.pw_uid, entry.pw_gid
        except KeyError:
            uid = gid = 65534
    return Isolation("full", interpreter, uid, gid, unshare, shown, cgroup_hierarchies())


