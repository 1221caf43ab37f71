"""Where a gradient-free training step's time goes: each method's real training job (jobs/train.py)
at the embedded default's settings (config/config.yaml), one after another in one process on one
thread, as the DAG runs each job, timed by the job's own meters.

A step's forward passes (loss forwards, rollouts) are inference; the rest is the method's own
work: drawing noise and moving the weights, grading rollouts, fitness shaping. Training
throughput is the tokens the job processed per second of its training; inference throughput the
same tokens per second of its forward passes alone (the meters' generate, forward and held-out
phases), measured in the same run, on the same model, shapes and engine. Their ratio is the share
of training time the forward passes take: 1.0 would be a method at inference speed (EGGROLL
reports 0.91 for its evolution strategies).

The quickstart's batches are a smoke test's (2 problems a step), where a draw of the model's noise
costs as much as a few dozen decoding steps; `--batch N` runs every method with N problems a step
(MeZO's and SAZO's batch, ESSAM's batch, RandOpt's support set, CoRP's support and probe sets), the
rest of its settings as in the quickstart: the ratio at a shape nearer the papers' (MeZO's batch is
16; the ES papers score members on 200 to 500 problems).

    python -m benchmarks.steps [--task gsm8k] [--methods mezo sazo ...] [--dtype float32] [--batch 16]
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path

import torch

from benchmarks.common import embedded_model, write_table
from core import config as configuration
from core import machine
from core.config import REPO
from core.outputs import read_json, write_json
from jobs import data, tracking
from jobs.train import train
from jobs.validation import load

METHODS = ("mezo", "sazo", "essam", "essam_f", "randopt", "corp")
"""The gradient-free methods whose steps are inference (issue 27): full-weight perturbations."""
INFERENCE = ("generate", "forward", "heldout")
"""The meters' phases in which the model computes forward passes and nothing else."""
PROBLEMS_PER_STEP = ("batch_size", "support_size", "probe_size")
"""The settings that say how many problems a method's step rolls out or scores (`--batch`)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="gsm8k")
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--dtype", choices=["float32", "bfloat16"],
                        help="the weights' precision (default: the one `dtype: auto` chooses here)")
    parser.add_argument("--batch", type=int,
                        help="problems a step for every method (default: each method's quickstart setting)")
    args = parser.parse_args()
    torch.set_num_threads(machine.JOB_THREADS)

    embedded_model()  # the model converted once into results/model, as the DAG's model job does
    cfg = machine.resolve(load(REPO / "config" / "config.yaml"))[0]
    cfg = dataclasses.replace(cfg, dtype=args.dtype or cfg.dtype)
    if args.batch:
        cfg = dataclasses.replace(cfg, methods={
            name: dataclasses.replace(settings, **{k: args.batch for k in PROBLEMS_PER_STEP if hasattr(settings, k)})
            for name, settings in cfg.methods.items()})
    manifest = Path("results/model/manifest.json")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data_dir = root / "data"
        data.prepare(configuration.for_run(cfg, task=args.task), args.task, data_dir)
        tracking_file = root / "tracking.json"
        cfg = dataclasses.replace(cfg, tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
        write_json(tracking_file, tracking.init(cfg))
        for method in args.methods:
            job = configuration.for_run(cfg, method, args.task, 0)
            out = root / "train" / method / "artifact.json"
            train(job, method, args.task, 0, manifest, data_dir, tracking_file, out)
            meters = read_json(out.parent / "metrics.json")["meters"]
            wall = meters["wall_clock_s"]
            inference = sum(meters.get(f"time_{phase}_s", 0.0) for phase in INFERENCE)
            tokens = meters.get("tokens_processed", 0) + meters.get("heldout_tokens_processed", 0)
            rows.append([method, f"{wall:.1f}", f"{inference:.1f}", f"{meters.get('time_score_s', 0.0):.1f}",
                         f"{meters.get('time_update_s', 0.0):.1f}", f"{tokens:,}", f"{tokens / wall:.1f}",
                         f"{tokens / inference:.1f}" if inference else "—",
                         f"{inference / wall:.2f}" if wall else "—"])
    shape = f", {args.batch} problems a step" if args.batch else ""
    write_table(f"steps-batch{args.batch}" if args.batch else "steps",
                f"Training steps: each method's training job at config/config.yaml's settings{shape} on {args.task}, "
                f"{cfg.dtype} weights, one thread, the job's own meters",
                ["method", "training s", "forward passes s", "grading s", "the rest s", "tokens processed",
                 "training tokens/s", "inference tokens/s", "training / inference"], rows)


if __name__ == "__main__":
    main()
