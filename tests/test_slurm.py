"""The DAG on a real SLURM cluster through Snakemake's SLURM executor plugin and profiles/slurm: a
single-node cluster (munged, slurmctld, slurmd, with two fake GPUs) started by the test, on which
the tiny experiment must give exactly the local run's results (tests/fingerprint.py).

Skips, saying why, only where SLURM cannot run here: its programs missing, not root, or daemons
that do not come up (`make test` installs the programs where it can)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from conftest import free_port, tiny_config
from evals.tasks import TASKS
from fingerprint import assert_unchanged

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


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A running single-node cluster: its environment for clients (SLURM_CONF) and its partition."""
    missing = [name for name in PROGRAMS if shutil.which(name) is None]
    if missing:
        pytest.skip(f"SLURM cannot start here: {', '.join(missing)} not installed (`make engines` installs them)")
    if os.geteuid() != 0:
        pytest.skip("SLURM cannot start here: slurmd must run as root to start jobs as their user")
    if not Path("/etc/slurm").is_dir():
        pytest.skip("SLURM cannot start here: no /etc/slurm to mount the test cluster's config on")
    root = tmp_path_factory.mktemp("slurm")
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
                pytest.skip(f"SLURM cannot start here: a daemon exited\n{tails(root)}")
            answer = subprocess.run(["srun", "--time=1", "hostname"], env=env, capture_output=True, text=True,
                                    timeout=30)
            if answer.returncode == 0:
                break
            if time.monotonic() > deadline:
                pytest.skip(f"SLURM cannot start here: `srun hostname` failed for 60 s: {answer.stderr.strip()}\n"
                            f"{tails(root)}")
            time.sleep(1)
        yield SimpleNamespace(env=env, partition=PARTITION, logs=root)
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


def test_the_tiny_dag_through_slurm_gives_the_local_runs_results(slurm, tmp_path, tiny_model_dir):
    cfg = tiny_config(tiny_model_dir)
    cfg["evaluation"]["samples_by_method"] = {"base": 8}
    # No job sees `resources`, so the results stay the local run's: base on the CPU, MeZO on 2 GPUs.
    cfg["resources"] = {"gpus_by_method": {"base": 0, "mezo": 2}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    profile["default-resources"].update(slurm_partition=slurm.partition, slurm_account=ACCOUNT)
    (tmp_path / "profile").mkdir()
    (tmp_path / "profile" / "config.yaml").write_text(yaml.safe_dump(profile))
    env = {k: v for k, v in slurm.env.items() if k not in ("CUDA_VISIBLE_DEVICES", "NOGRAD_DEVICE_LOCKS")}

    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
         "--workflow-profile", str(tmp_path / "profile"), "--configfile", str(tmp_path / "config.yaml"),
         # No slurmdbd here, so no sacct; a status check 1 s (not 40 s) after the last job ended; and
         # the per-job SLURM logs of successful jobs kept, to be checked below.
         "--slurm-status-command", "squeue", "--slurm-init-seconds-before-status-checks", "1",
         "--slurm-keep-successful-logs"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:] + "\n" + tails(slurm.logs)

    jobs = slurm_jobs(slurm.env)
    gpus = {"base": "N/A", "mezo": "gres:gpu:2"}
    assert {name: job["tres-per-job"] for name, job in jobs.items()} == {
        "rule_probe": "gres:gpu:1",  # it measures a node like the jobs': one of the default `resources.gpus`
        **{f"rule_{rule}_wildcards_{method}_{task}_0": gpus[method]
           for rule in ("train", "evaluate") for method in gpus for task in TASKS},
    }, "the probe and every train and evaluate job, and only those, ran as a SLURM job with its GPUs"
    for name, job in jobs.items():
        assert (job["State"], job["Account"], job["Partition"]) == ("COMPLETED", ACCOUNT, slurm.partition), name
        rule, _, wildcards = name.removeprefix("rule_").partition("_wildcards_")  # the probe has none
        assert (tmp_path / ".snakemake" / "slurm_logs" / f"rule_{rule}" / wildcards / f"{job['JobID']}.log").exists()

    logs = sorted((tmp_path / "results" / "logs").glob("[te]*/*/*/seed0.log"))
    assert len(logs) == len(jobs) - 1, "a log for every train and evaluate job"
    for log in logs:
        held = "holding GPU 0, 1 of 0, 1\n" in log.read_text()
        assert held == (log.parent.parent.name == "mezo"), f"{log}: SLURM's GPUs are the ones the job holds"

    assert_unchanged("dag_base_mezo", tmp_path / "results", tiny_model_dir)
