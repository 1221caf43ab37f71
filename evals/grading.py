"""Verifiers that cannot hang a run: a grading call runs in a worker process, under a wall-clock limit.

A completion can be built to make a verifier slow: math-verify parses and simplifies whatever
LaTeX a model writes (`\\boxed{9^{9^{9^{9}}}}` never finishes), and its own timeouts rely on
`signal.alarm`, which works only in a main thread (the evaluator grades in a thread pool). `call`
sends a grading function (by its module and name) and its arguments to one worker process and
waits at most `timeout_s`; past the limit it kills the worker and raises
`core.task.Ungradable`, which the harness scores 0 and counts in `reward_errors`. The next
call starts a new worker.

The worker is a plain interpreter running this module (`python -m evals.grading`), started at the
first call and kept: a call costs a round trip over two pipes, not a new process. Calls are
serialised: grading is CPU-bound Python, which threads would not run in parallel anyway, and a
timeout must not take another call's worker with it.
"""

from __future__ import annotations

import importlib
import json
import select
import subprocess
import sys
import threading
from typing import Any, Callable

from core.task import Ungradable

TIMEOUT_S = 10.0
"""Wall-clock limit of one grading call: math-verify grades an ordinary answer in milliseconds (the
first call in a worker also imports it, about 1 s)."""
STARTUP_S = 120.0
"""Time a new worker has to import the task modules and say it is ready."""
READY = "ready\n"

_lock = threading.Lock()
_worker: subprocess.Popen | None = None


def call(function: Callable, *args: Any, timeout_s: float | None = None) -> Any:
    """`function(*args)` (a module-level function; JSON arguments and result) in the grading
    worker; Ungradable when it takes longer than `timeout_s` (`TIMEOUT_S` when None)."""
    global _worker
    timeout_s = TIMEOUT_S if timeout_s is None else timeout_s
    request = json.dumps({"module": function.__module__, "name": function.__qualname__, "args": args}) + "\n"
    with _lock:
        if _worker is None or _worker.poll() is not None:
            _worker = subprocess.Popen([sys.executable, "-m", "evals.grading"], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True, bufsize=1)
            if _reply(STARTUP_S) != READY:
                raise RuntimeError(f"the grading worker did not start within {STARTUP_S:g} s")
        _worker.stdin.write(request)
        _worker.stdin.flush()
        line = _reply(timeout_s)
        if not line:
            raise Ungradable(f"grading took longer than {timeout_s:g} s")
    reply = json.loads(line)
    if "error" in reply:
        raise RuntimeError(reply["error"])
    return reply["result"]


def _reply(timeout_s: float) -> str:
    """The worker's next line, or "" (and no worker) when none comes within `timeout_s`."""
    global _worker
    ready, _, _ = select.select([_worker.stdout], [], [], timeout_s)
    line = _worker.stdout.readline() if ready else ""
    if not line:
        _worker.kill()
        _worker.wait()
        _worker = None
    return line


def serve() -> None:
    """The worker: the task modules imported, then one JSON request per line on stdin and one
    JSON reply per line on stdout."""
    importlib.import_module("evals.tasks")
    sys.stdout.write(READY)
    sys.stdout.flush()
    for line in sys.stdin:
        request = json.loads(line)
        try:
            function = getattr(importlib.import_module(request["module"]), request["name"])
            reply = {"result": function(*request["args"])}
        except Exception as error:
            reply = {"error": f"{type(error).__name__}: {error}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve()
