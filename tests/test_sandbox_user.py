"""The sandbox as researchers run it: as themselves, with the checkout and its virtual environment in
their home or under /tmp.

The test creates an ordinary user, copies what grading needs (evals/sandbox, which imports the
standard library only) into a checkout of that user's, with a virtual environment of the system's
Python in it, and runs the whole hostile suite of tests/test_sandbox.py there as that user. Either
every promise holds (no hostile program passes or ends late, honest ones pass, no file appears
outside the programs' directories, the user's canary is intact, no connection reaches the caller's
listener and no process is left), or grading refuses with one line. CI runs as root: the test
switches user itself.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from evals.sandbox import SandboxResult
from test_sandbox import HOSTILE, REPO, SECRET, SECRET_VARIABLE, canonical, check_outcome, code, drain, filled

USER = "nograd-sandbox-test"
SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin")
NEEDED = ["evals/__init__.py", "core/__init__.py", "core/errors.py", "pyproject.toml",
          *(str(path.relative_to(REPO)) for path in (REPO / "evals" / "sandbox").glob("*.py"))]
HONEST = ("HumanEval/0", "HumanEval/32", "HumanEval/38", "HumanEval/53")

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="creating a user needs root (CI runs as root)"),
    pytest.mark.skipif(shutil.which("useradd") is None or SYSTEM_PYTHON is None,
                       reason="needs useradd and the system's python3"),
]

# Runs as the user, in the checkout: grades each case, reports what came back.
DRIVER = """
import json, os, sys, time
from concurrent.futures import ThreadPoolExecutor
from evals import sandbox

cases = json.load(sys.stdin)
try:
    sandbox.isolation_in_use()
except sandbox.SandboxUnavailable as unavailable:
    json.dump({"unavailable": str(unavailable)}, sys.stdout)
    sys.exit()

def grade(case):
    arguments = dict(case)
    arguments["program"] = arguments["program"].replace("__CALLER_PID__", str(os.getpid()))
    started = time.monotonic()
    result = sandbox.run_program(**arguments)
    return [result.passed, result.status, result.detail, time.monotonic() - started]

with ThreadPoolExecutor(2) as pool:
    results = dict(zip(cases, pool.map(grade, cases.values())))
json.dump({"isolation": sandbox.isolation_in_use().describe(), "results": results}, sys.stdout)
"""


@pytest.fixture(scope="module")
def user():
    """An ordinary user with a home of its own, removed with its home afterwards."""
    subprocess.run(["userdel", "--remove", USER], capture_output=True)  # left by an interrupted run
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", USER], check=True, capture_output=True)
    try:
        yield pwd.getpwnam(USER)
    finally:
        for process in psutil.process_iter(["uids"]):
            if process.info["uids"] and process.info["uids"].real == pwd.getpwnam(USER).pw_uid:
                process.kill()
        subprocess.run(["userdel", "--remove", USER], capture_output=True)


def as_user(user, command: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, user=user.pw_uid, group=user.pw_gid, extra_groups=[], capture_output=True,
                          text=True, env={"HOME": user.pw_dir, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
                                          "PYTHONDONTWRITEBYTECODE": "1", SECRET_VARIABLE: SECRET}, **kwargs)


def files_under(*roots: str) -> set[str]:
    found = set()
    for root in roots:
        for directory, subdirectories, names in os.walk(root):
            found.update(os.path.join(directory, name) for name in subdirectories + names)
    return found


def owner(path: str) -> int | None:
    """The uid owning `path`, or None where it is already gone."""
    try:
        return os.lstat(path).st_uid
    except FileNotFoundError:
        return None


@pytest.fixture(params=["home", "tmp"])
def base(request, user):
    """Where the user's checkout lives: in its home, or in a directory of its own under /tmp."""
    if request.param == "home":
        yield Path(user.pw_dir)
        return
    directory = Path(tempfile.mkdtemp(prefix="nograd-user-checkout-", dir="/tmp"))
    os.chown(directory, user.pw_uid, user.pw_gid)
    yield directory
    shutil.rmtree(directory)


def test_the_hostile_suite_as_an_ordinary_user(user, base):
    checkout = base / "checkout"
    for name in NEEDED:
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, checkout / name)
    canary = base / "canary" / "canary.txt"
    canary.parent.mkdir()
    canary.write_text("canary\n")
    for path in files_under(str(base)):
        os.chown(path, user.pw_uid, user.pw_gid)
    venv = as_user(user, [SYSTEM_PYTHON, "-m", "venv", "--without-pip", str(checkout / ".venv")])
    assert venv.returncode == 0, venv.stderr

    server = socket.create_server(("0.0.0.0", 0))
    server.setblocking(False)
    hosts = sorted({"127.0.0.1", *(a.address for e in psutil.net_if_addrs().values() for a in e
                                   if a.family == socket.AF_INET)})
    fills = {"CANARY_DIR": repr(str(canary.parent)), "CANARY": repr(str(canary)), "REPO": repr(str(checkout)),
             "REPO_FILE": repr(str(checkout / "pyproject.toml")), "SECRET_VARIABLE": repr(SECRET_VARIABLE),
             "SECRET": repr(SECRET), "HOSTS": repr(hosts), "PORT": str(server.getsockname()[1])}
    cases = {name: filled(hostile, {**fills, "CALLER_PID": "__CALLER_PID__"}) for name, hostile in HOSTILE.items()}
    cases.update({f"honest {p}": code(canonical(p), p) for p in HONEST})
    watched = [str(base), "/tmp", "/var/tmp", "/dev/shm"]
    before = files_under(*watched)
    started = time.monotonic()
    driver = as_user(user, [str(checkout / ".venv" / "bin" / "python"), "-c", DRIVER], cwd=checkout,
                     input=json.dumps(cases), timeout=600)
    print(f"{len(cases)} programs as {USER}, checkout in {base}: {time.monotonic() - started:.1f} s")
    assert driver.returncode == 0, driver.stderr
    report = json.loads(driver.stdout)
    if "unavailable" in report:  # grading refused: that too keeps every promise, if it says why in one line
        assert "\n" not in report["unavailable"] and report["unavailable"].startswith("sandbox: ")
        pytest.skip(f"as an ordinary user, grading refuses: {report['unavailable']}")
    assert report["isolation"].startswith("full:")
    results = report["results"]
    assert [p for p in HONEST if results[f"honest {p}"][:2] != [True, "passed"]] == []
    for name, hostile in HOSTILE.items():
        passed, status, detail, elapsed = results[name]
        check_outcome(hostile, SandboxResult(passed, status, detail), elapsed)
    assert canary.read_text() == "canary\n"
    assert sorted(os.listdir(canary.parent)) == ["canary.txt"]
    # The user's processes can create only files the user owns; other tests (`make test` runs them
    # side by side) write under /tmp too, as root.
    new = {path for path in files_under(*watched) - before
           if "/nograd-sandbox-" not in path and owner(path) == user.pw_uid}
    assert new == set(), "files written outside the programs' directories"
    assert drain(server) == 0, "a connection reached the caller's listener"
    server.close()
    assert live_processes_of(user.pw_uid) == []


def live_processes_of(uid: int, wait_s: float = 5.0) -> list[int]:
    """The user's processes still running after `wait_s` (the grader's own, the testers' zygote, end
    when their caller has: give them that moment)."""
    give_up = time.monotonic() + wait_s
    while True:
        left = [p.pid for p in psutil.process_iter(["uids", "status"])
                if p.info["uids"] and p.info["uids"].real == uid and p.info["status"] != psutil.STATUS_ZOMBIE]
        if not left or time.monotonic() > give_up:
            return left
        time.sleep(0.05)
