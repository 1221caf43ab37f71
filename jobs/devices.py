"""One set of GPUs per job: a training, evaluation or cross-check job claims `resources.gpus`
devices of its own before CUDA starts, and sees only those (CUDA_VISIBLE_DEVICES), as cuda:0, ...

Snakemake's `gpu` resource (`snakemake --resources gpu=8`) bounds how many devices the running
jobs hold together, but it does not say which: without this every job would compute on device 0.
So each job takes an exclusive lock (`fcntl.flock`) on a file per device id, from the ids its
environment makes visible (CUDA_VISIBLE_DEVICES, else every GPU `nvidia-smi -L` lists, in which
case the job also sets CUDA_DEVICE_ORDER=PCI_BUS_ID, nvidia-smi's order, unless it is set: CUDA's
default order puts the fastest device first, so on a mixed node id 0 would name another GPU). The
kernel releases a lock when its holder ends, however it ends, so a killed job frees its devices
for the next without any cleanup; a job that finds too few free waits for them.

The lock files live on the node (`NOGRAD_DEVICE_LOCKS`, by default a folder in the system's temp
dir), since a device id means a device of this node only. Inside a SLURM allocation the folder is
the allocation's own: SLURM already gives each allocation devices of its own, and may number them
from 0 in each. A machine with no GPU has no ids to claim: nothing changes there.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from core.errors import NogradError

_held: list = []
"""The open lock files of the devices this process holds: closing one (or ending) frees it."""


def visible() -> list[str]:
    """The device ids this process may claim from: CUDA_VISIBLE_DEVICES's entries when it is set
    (an empty value: none), else one per GPU that nvidia-smi lists (none without it)."""
    if (ids := os.environ.get("CUDA_VISIBLE_DEVICES")) is not None:
        return [i.strip() for i in ids.split(",") if i.strip()]
    if shutil.which("nvidia-smi") is None:
        return []
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return [str(i) for i, line in enumerate(listed.stdout.splitlines()) if line.startswith("GPU ")]


def lock_dir() -> Path:
    if where := os.environ.get("NOGRAD_DEVICE_LOCKS"):
        return Path(where)
    scope = f"-slurm{os.environ['SLURM_JOB_ID']}" if "SLURM_JOB_ID" in os.environ else ""
    return Path(tempfile.gettempdir()) / f"nograd-devices-{os.getuid()}{scope}"


def claim(count: int, what: str, poll_s: float = 1.0) -> list[str]:
    """Hold `count` of the visible devices until this process ends, and make them the only ones
    CUDA sees; returns their ids. Must run before anything starts CUDA. `count` 0 hides every GPU
    (the job runs on the CPU); on a machine without GPUs this does nothing."""
    listed = "CUDA_VISIBLE_DEVICES" not in os.environ  # ids are nvidia-smi's indices
    pool = visible()
    if not pool:
        return []
    if count == 0:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        return []
    if count > len(pool):
        raise NogradError(f"{what}: resources.gpus asks for {count} GPUs, but only {len(pool)} are visible "
                          f"({', '.join(pool)})")
    folder = lock_dir()
    folder.mkdir(parents=True, exist_ok=True)
    waiting = False
    while True:
        got = []
        for device in pool:
            lock = open(folder / f"{device}.lock", "a")
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.close()
                continue
            got.append((device, lock))
            if len(got) == count:
                _held.extend(lock for _, lock in got)
                ids = [device for device, _ in got]
                os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(ids)
                if listed:
                    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
                print(f"{what}: holding GPU {', '.join(ids)} of {', '.join(pool)}", file=sys.stderr)
                return ids
        for _, lock in got:  # too few free: hold none while waiting, so two waiters cannot deadlock
            lock.close()
        if not waiting:
            print(f"{what}: waiting for {count} free GPUs of {', '.join(pool)} (locks in {folder})", file=sys.stderr)
            waiting = True
        time.sleep(poll_s)
