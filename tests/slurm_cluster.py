"""A real single-node SLURM cluster (munged, slurmctld, slurmd, with two fake GPUs) that a test
starts, and the DAG run through it with Snakemake's SLURM executor plugin and profiles/slurm, as a
cluster's user runs it. tests/test_pipeline.py runs its whole tiny DAG through it where SLURM can
start here, else with the local executor: either way the results are the golden ones
(tests/fingerprint.py). SLURM cannot start where its programs are missing (`make test` installs
them where it can), without root, or where a daemon does not come up: `started` says which."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator

import yaml

from conftest import free_port

REPO = Path(__file__).resolve().parent.parent
PROGRAMS = ("munged", "slurmctld", "slurmd", "srun", "squeue", "scancel", "unshare", "mount")
PARTITION, ACCOUNT = "debug", "nograd"


def tails(folder: Path, lines: int = 15) -> str:
    """The last lines of each daemon's log, for a skip or failure message."""
    return "\n".join(f"--- {log.name}:\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
                     for log in sorted(folder.glob("*.log")))


def write_config(root: Path, host: str) -> Path:
    """slurm.conf and gres.conf in `root`/etc, every path and port the cluster's own."""
    etc, dev = root / "etc", root / "dev"
    for folder in (etc, dev, root / "state", root / "spool"):
        folder.mkdir()
    # SLURM grants a GPU by a device file of gres.conf and sets CUDA_VISIBLE_DEVICES from it, and
    # checks only that the file is a character device; with no file it grants a bare count and
    # sets nothing. Two links to /dev/null are two GPUs a job can really be given.
    for index in (0, 1):
        (dev / f"gpu{index}").symlink_to("/dev/null")
    (etc / "gres.conf").write_text(f"NodeName={host} Name=gpu File={dev}/gpu[0-1]\n")
    # The node is declared with the cores and memory profiles/slurm asks of a job (config_overrides
    # lets slurmd report them): the profile goes in unchanged, and two 4-core jobs run at once,
    # what the 2 real cores can hold, as each computes on one thread. No slurmdbd (accounting_storage/
    # none): squeue answers the plugin's status checks, and MinJobAge keeps finished jobs in its
    # answer for the whole test.
    (etc / "slurm.conf").write_text(f"""\
ClusterName=nogradtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge.socket
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
MinJobAge=3600
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SlurmdParameters=config_overrides
GresTypes=gpu
NodeName={host} NodeAddr=127.0.0.1 CPUs=8 RealMemory=65536 Gres=gpu:2 State=UNKNOWN
PartitionName={PARTITION} Nodes={host} Default=YES MaxTime=INFINITE State=UP
""")
    return etc / "slurm.conf"


class Unavailable(Exception):
    """SLURM cannot start here; the message says why."""


@contextmanager
def started(root: Path) -> Iterator[SimpleNamespace]:
    """A running single-node cluster in `root` (its one partition `PARTITION`): its environment for
    clients (SLURM_CONF) and its logs; stopped on leaving. Raises Unavailable, saying why, where
    SLURM cannot start here."""
    missing = [name for name in PROGRAMS if shutil.which(name) is None]
    if missing:
        raise Unavailable(f"{', '.join(missing)} not installed (`make engines` installs them)")
    if os.geteuid() != 0:
        raise Unavailable("slurmd must run as root to start jobs as their user")
    if not Path("/etc/slurm").is_dir():
        raise Unavailable("no /etc/slurm to mount the test cluster's config on")
    conf = write_config(root, socket.gethostname().split(".")[0])
    env = {**os.environ, "SLURM_CONF": str(conf)}
    key = root / "munge.key"
    key.write_bytes(os.urandom(128))  # a key of the cluster's own: the machine's munge is left alone
    key.chmod(0o600)
    daemons = []

    def start(name, *command):
        with open(root / f"{name}.out.log", "w") as out:
            daemons.append(subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env))

    try:
        start("munged", "munged", "--foreground", "--force", f"--socket={root}/munge.socket", f"--key-file={key}",
              f"--log-file={root}/munged.log", f"--pid-file={root}/munged.pid", f"--seed-file={root}/munged.seed")
        start("slurmctld", "slurmctld", "-D", "-c", "-f", str(conf))
        # A job's step runs `srun` with every SLURM_* variable but a few removed (the jobstep
        # plugin), SLURM_CONF included, so srun reads /etc/slurm/slurm.conf. slurmd, whose jobs
        # inherit its mounts, sees the test's config there, in a mount namespace of its own: the
        # machine's /etc/slurm is untouched.
        start("slurmd", "unshare", "--mount", "--propagation", "private", "sh", "-c",
              'mount --bind "$0" /etc/slurm && exec slurmd -D -c -f "$1"', str(conf.parent), str(conf))
        deadline = time.monotonic() + 60
        while True:
            if any(daemon.poll() is not None for daemon in daemons):
                raise Unavailable(f"a daemon exited\n{tails(root)}")
            answer = subprocess.run(["srun", "--time=1", "hostname"], env=env, capture_output=True, text=True,
                                    timeout=30)
            if answer.returncode == 0:
                break
            if time.monotonic() > deadline:
                raise Unavailable(f"`srun hostname` failed for 60 s: {answer.stderr.strip()}\n{tails(root)}")
            time.sleep(1)
        yield SimpleNamespace(env=env, logs=root)
    finally:
        if daemons:
            subprocess.run(["scancel", "--user", "root"], env=env, capture_output=True, timeout=30)
        for daemon in reversed(daemons):
            daemon.terminate()
            try:
                daemon.wait(timeout=20)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()


def slurm_jobs(env: dict) -> dict[str, dict]:
    """Every job slurmctld knows, by the comment the plugin gives it (rule_<rule>_wildcards_<values>)."""
    fields = ("JobID", "State", "Account", "Partition", "Comment", "tres-per-job")
    listed = subprocess.run(["squeue", "--states=all", "--noheader", "-O", ",".join(f"{f}:|" for f in fields)],
                            env=env, capture_output=True, text=True, check=True).stdout
    rows = [dict(zip(fields, (value.strip() for value in line.split("|")))) for line in listed.splitlines()]
    return {row["Comment"]: row for row in rows if row["Comment"].startswith("rule_")}


def snakemake(cluster: SimpleNamespace, workdir: Path) -> subprocess.CompletedProcess:
    """The DAG of `workdir`/config.yaml run from `workdir` through `cluster` with profiles/slurm, as a
    cluster's user runs it (its two placeholders filled in)."""
    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    profile["default-resources"].update(slurm_partition=PARTITION, slurm_account=ACCOUNT)
    (workdir / "profile").mkdir()
    (workdir / "profile" / "config.yaml").write_text(yaml.safe_dump(profile))
    env = {k: v for k, v in cluster.env.items() if k not in ("CUDA_VISIBLE_DEVICES", "NOGRAD_DEVICE_LOCKS")}
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
         "--workflow-profile", str(workdir / "profile"), "--configfile", str(workdir / "config.yaml"),
         # No slurmdbd here, so no sacct; a status check 1 s (not 40 s) after the last job ended; and
         # the per-job SLURM logs of successful jobs kept, to be checked.
         "--slurm-status-command", "squeue", "--slurm-init-seconds-before-status-checks", "1",
         "--slurm-keep-successful-logs"],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=900,
    )
