"""One set of GPUs per job (jobs/devices.py), tried with fake device ids: the jobs are real
processes that claim devices through the same locks and the same CUDA_VISIBLE_DEVICES a GPU job
uses; only the ids name no hardware."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import tiny_config
from core import config
from core.errors import NogradError
from jobs import devices, validation

REPO = Path(__file__).resolve().parent.parent

JOB = """
import json, os, subprocess, sys, time
from jobs import devices
ids = devices.claim(int(sys.argv[1]), "job " + sys.argv[2])
start = time.time()
child = subprocess.run([sys.executable, "-c", "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"],
                       capture_output=True, text=True).stdout.strip()
print(json.dumps({"ids": ids, "child_sees": child, "start": start}), flush=True)
time.sleep(float(sys.argv[3]))
print(json.dumps({"end": time.time()}), flush=True)
"""
"""A job: claims `count` devices, records what a process it starts sees, holds them `hold` seconds."""


def job(tmp_path: Path, visible: str, count: int, name: str, hold: float) -> subprocess.Popen:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": visible, "NOGRAD_DEVICE_LOCKS": str(tmp_path / "locks"),
           "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", JOB, str(count), name, str(hold)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finished(process: subprocess.Popen) -> dict:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    held, ended = (json.loads(line) for line in out.splitlines())
    return {**held, **ended, "log": err}


def test_four_concurrent_jobs_holding_two_devices_each_never_share_one(tmp_path):
    # Eight ids: all four hold at once, each its own pair.
    together = [finished(p) for p in [job(tmp_path, "0,1,2,3,4,5,6,7", 2, str(i), 2.0) for i in range(4)]]
    assert all(max(j["start"] for j in together) < j["end"] for j in together), "they did not run side by side"
    held = [set(j["ids"]) for j in together]
    assert all(len(ids) == 2 for ids in held) and len(set().union(*held)) == 8
    assert [j["child_sees"] for j in together] == [",".join(j["ids"]) for j in together]

    # Four ids for four jobs of two: two wait, and no two jobs that overlap in time share an id.
    runs = [finished(p) for p in [job(tmp_path, "0,1,2,3", 2, str(i), 1.5) for i in range(4)]]
    overlapping = [(a, b) for i, a in enumerate(runs) for b in runs[i + 1:]
                   if a["start"] < b["end"] and b["start"] < a["end"]]
    assert overlapping, "the jobs never held devices at the same time: the test would prove nothing"
    assert all(not set(a["ids"]) & set(b["ids"]) for a, b in overlapping)
    assert sum("waiting for 2 free GPUs of 0, 1, 2, 3" in r["log"] for r in runs) >= 2


def test_a_killed_job_frees_its_devices(tmp_path):
    holder = job(tmp_path, "0,1", 2, "holder", 600)
    assert json.loads(holder.stdout.readline())["ids"] == ["0", "1"]
    waiter = job(tmp_path, "0,1", 1, "waiter", 0)
    # Its first word, once it has tried every lock: waiting, not holding a device the holder holds.
    assert waiter.stderr.readline().startswith("job waiter: waiting for 1 free GPUs of 0, 1 ")
    assert waiter.poll() is None
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    killed_at = time.time()
    run = finished(waiter)
    assert run["ids"] in (["0"], ["1"]) and run["start"] - killed_at < 5


def test_no_gpu_changes_nothing_and_zero_gpus_hides_them(monkeypatch, tmp_path):
    monkeypatch.setenv("NOGRAD_DEVICE_LOCKS", str(tmp_path / "locks"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert devices.claim(1, "job") == [] and os.environ["CUDA_VISIBLE_DEVICES"] == ""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert devices.claim(0, "job") == [] and os.environ["CUDA_VISIBLE_DEVICES"] == ""
    assert not (tmp_path / "locks").exists()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi: a CPU machine
    assert devices.visible() == [] and devices.claim(2, "job") == []
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


def test_ids_from_nvidia_smi_are_meant_in_its_order_and_a_users_ids_in_theirs(monkeypatch, tmp_path):
    """nvidia-smi numbers GPUs by PCI bus; CUDA by default puts the fastest first. Ids taken from
    nvidia-smi must be read in its order; ids the user gave in CUDA_VISIBLE_DEVICES keep the order
    they were given in (CUDA_DEVICE_ORDER as the user set it, or not)."""
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 (UUID: GPU-a)'\necho 'GPU 1: NVIDIA A10 (UUID: GPU-b)'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("NOGRAD_DEVICE_LOCKS", str(tmp_path / "listed"))
    assert devices.claim(1, "job") == ["0"]
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0" and os.environ["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"

    monkeypatch.delenv("CUDA_DEVICE_ORDER")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    monkeypatch.setenv("NOGRAD_DEVICE_LOCKS", str(tmp_path / "given"))
    assert devices.claim(1, "job") == ["1"] and "CUDA_DEVICE_ORDER" not in os.environ

    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setenv("NOGRAD_DEVICE_LOCKS", str(tmp_path / "ordered"))
    assert devices.claim(1, "job") == ["0"] and os.environ["CUDA_DEVICE_ORDER"] == "FASTEST_FIRST"


def test_more_gpus_than_are_visible_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("NOGRAD_DEVICE_LOCKS", str(tmp_path / "locks"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with pytest.raises(NogradError, match=r"^grpo gsm8k seed0: resources.gpus asks for 3 GPUs, but only 2 are "
                                          r"visible \(0, 1\)$"):
        devices.claim(3, "grpo gsm8k seed0")


def test_gpus_by_method_names_run_methods_and_never_reaches_a_jobs_config():
    raw = tiny_config("model", mezo={}, grpo={})
    with pytest.raises(NogradError, match=r"resources.gpus_by_method names 'essa', which this config does not run"):
        validation.validate({**raw, "resources": {"gpus_by_method": {"essa": 2}}})
    cfg = validation.validate({**raw, "resources": {"gpus": 1, "gpus_by_method": {"grpo": 2}}})
    assert (cfg.resources.for_method("grpo"), cfg.resources.for_method("mezo")) == (2, 1)
    plain = validation.validate(raw)
    assert config.config_hash(config.for_run(cfg, "grpo", "gsm8k", 0)) == \
        config.config_hash(config.for_run(plain, "grpo", "gsm8k", 0)), "a job reran for moving to other devices"
