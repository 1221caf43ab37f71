"""ESSA's cluster claim, modelled (reports/cluster_model.py), and the model checked on this machine.

Measured here, on the embedded model, one torch thread per process: (a) one member's compute in
the training process (an ES member: perturb from its seed, greedy rollouts of the batch, restore),
and what an ES step adds around its members (`replay`: a member's perturbation and restore without
rollouts, which Ray workers holding fp32 weights run for the members they do not score; the
update from the step's seeds); (b) ES steps under `training.population: ray` with 1 and 2 local
Ray workers: wall-clock per step and the bytes the pool counts (seeds out, rewards and meters back);
(c) the bytes a data-parallel GRPO step all-reduces: the gradient of every trainable parameter.

The model's ES step, with these measured inputs, is then set against the Ray points (relative
error), and its speed-ups of ESSA over GRPO on 16 and 128 GPUs for 1.5B, 7B and 32B models follow
from its stated defaults. Written to results/speed/scaling.md and results/speed/scaling.json.

    python -m benchmarks.scaling [--members 4] [--problems 2] [--new-tokens 24] [--steps 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import machine, write_table
from core import config as configuration
from core import models, perturb
from core.config import REPO
from core.outputs import write_json
from jobs import data
from jobs.train import TrainingRun
from jobs.validation import load
from methods import METHODS
from reports import cluster_model as cm

OUT = Path("results/speed/scaling.json")
NOISE = "shared"
LOOPBACK_BANDWIDTH = 1e9
"""Bytes per second assumed for Ray's loopback messages: a step's few hundred bytes make it immaterial."""


def timed(call) -> tuple[float, object]:
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--problems", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--steps", type=int, default=3, help="ES steps per setting; the first (start-up) is not timed")
    args = parser.parse_args()
    torch.set_num_threads(1)  # each Ray worker takes the driver's count: one core each on a 2-core machine

    base = load(REPO / "config" / "config.yaml")
    base = dataclasses.replace(
        base, methods={"essam": METHODS["essam"].config(population_size=args.members, batch_size=args.problems)},
        training=dataclasses.replace(base.training, max_new_tokens=args.new_tokens))
    manifest = models.prepare(base.model, Path("results/model"))
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        data_dir.mkdir()
        data.prepare(configuration.for_run(base, task="gsm8k"), "gsm8k", data_dir)

        def run_with(population: str, workers: int) -> TrainingRun:
            cfg = dataclasses.replace(base, training=dataclasses.replace(base.training, population=population,
                                                                         population_workers=workers))
            work = Path(tmp) / f"{population}{workers}"
            work.mkdir()
            return TrainingRun(cfg, "essam", "gsm8k", 0, manifest, data_dir, work, work)

        # (a) in the training process
        run = run_with("process", 1)
        problems = run.train[: args.problems]
        members = [[term] for term in perturb.population(np.random.default_rng(0), args.members)]
        weights = perturb.trainable(run.model)
        run.score_population(members[:1], problems, noise=NOISE)  # warm-up
        tokens_before = run.meters.counts["tokens_generated"]
        member_s = statistics.median(timed(lambda m=m: run.score_population([m], problems, noise=NOISE))[0]
                                     for m in members)
        tokens = (run.meters.counts["tokens_generated"] - tokens_before) / len(members)

        def replay_one(m):
            with perturb.perturbed(weights, m, NOISE):
                pass

        replay_s = statistics.median(timed(lambda m=m: replay_one(m))[0] for m in members)
        step_terms = [(seed, 1e-3 * sign) for [(seed, sign)] in members]
        update_s = timed(lambda: perturb.combine_(weights, step_terms, NOISE))[0]
        trainable = sum(p.numel() for p in run.model.parameters() if p.requires_grad)
        element_bytes = run.model.dtype.itemsize
        grad_bytes = trainable * element_bytes
        exact = len(weights.masters) == len(weights)
        process_step_s = args.members * member_s + update_s  # one process: one copy to move

        # (b) under Ray, 1 and 2 workers
        measured = {}
        for workers in (1, 2):
            run = run_with("ray", workers)
            weights = perturb.trainable(run.model)
            steps, traffic = [], []
            for step in range(args.steps):
                seconds, _ = timed(lambda: (run.score_population(members, problems, noise=NOISE),
                                            perturb.combine_(weights, step_terms, NOISE)))
                steps.append(seconds)
                traffic.append(run._pool.traffic())
            pool = run._pool
            round_trips = [timed(lambda: pool.ray.get(pool.workers[0].noise_device.remote()))[0] for _ in range(20)]
            pool.close()
            measured[workers] = {
                "step_s": statistics.median(steps[1:]), "first_step_s": steps[0],
                "bytes_sent": statistics.median(t["population_bytes_sent"] for t in traffic[1:]),
                "bytes_received": statistics.median(t["population_bytes_received"] for t in traffic[1:]),
                "startup_bytes_sent": traffic[0]["population_bytes_sent"],
                "latency_s": statistics.median(round_trips) / 2}
    
    # The model's ES step with this machine's inputs: each worker scores ceil(N/G) members; with fp32
    # weights (no masters) every worker also replays the members it does not score. The update is
    # paid twice in a row: the driver holds a model too and moves it first, and the pool hands the
    # seeds to the workers after it (jobs/population.py, a mirror of the driver's weights).
    check = {}
    for workers, point in measured.items():
        share = math.ceil(args.members / workers)
        replays = 0 if exact else args.members - share
        link = cm.Link(LOOPBACK_BANDWIDTH, point["latency_s"])
        predicted = cm.es_step_seconds(args.members, workers, member_s, 2 * update_s + replays * replay_s,
                                       point["bytes_sent"], point["bytes_received"], link)
        check[workers] = {"predicted_s": predicted, "measured_s": point["step_s"],
                          "relative_error": predicted / point["step_s"] - 1}

    modelled = cm.speedups()
    at = {g: cm.GPUS.index(g) for g in cm.PAPER_POINTS}
    params = {m.name: m.params for m in cm.MODELS}
    work = cm.Workload()
    setting = (f"ESSAM-style ES step, {args.members} members x {args.problems} GSM8K problems, greedy, "
               f"{args.new_tokens} new tokens, {base.dtype} weights, 1 torch thread per process, median of "
               f"{args.steps - 1} steps after the first")
    rows = [["ES member in process (perturb, roll out, restore)", f"{member_s:.2f} s", f"{tokens:.0f} tokens"],
            ["member replay (perturb, restore)", f"{replay_s:.2f} s", ""],
            ["update from the step's seeds", f"{update_s:.2f} s", ""],
            ["ES step in process", f"{process_step_s:.2f} s (sum)", ""]]
    for workers, point in measured.items():
        rows.append([f"ES step, Ray, {workers} worker{'s' * (workers > 1)}", f"{point['step_s']:.2f} s",
                     f"{point['bytes_sent']:,.0f} B sent, {point['bytes_received']:,.0f} B received per step "
                     f"(start-up: {point['startup_bytes_sent']:,.0f} B sent); round trip "
                     f"{2e3 * point['latency_s']:.2f} ms"])
    for workers, c in check.items():
        rows.append([f"model check, {workers} worker{'s' * (workers > 1)}", f"{c['predicted_s']:.2f} s predicted",
                     f"{c['measured_s']:.2f} s measured, error {c['relative_error']:+.0%}"])
    rows.append(["GRPO all-reduce per step, this model", f"{grad_bytes / 1e6:,.0f} MB",
                 f"{trainable:,} trainable parameters x {element_bytes} B ({base.dtype})"])
    for m in cm.MODELS:
        rows.append([f"GRPO all-reduce per step, {m.name} (modelled)",
                     f"{m.params * work.gradient_bytes / 1e9:,.1f} GB",
                     f"{m.params:,.3g} parameters x {work.gradient_bytes} B (bf16)"])
        rows.append([f"ESSA over GRPO, {m.name} (modelled)",
                     " / ".join(f"{modelled[m.name][i]:.1f}x" for i in at.values()),
                     f"on {' / '.join(map(str, at))} GPUs; the paper: "
                     f"{' / '.join(f'{v:g}x' for v in cm.PAPER_POINTS.values())} (32B, time to accuracy)"])
    write_table("scaling", f"ESSA's cluster claim: {setting}", ["quantity", "value", "detail"], rows)
    write_json(OUT, {"setting": f"{setting}; {machine()}", "member_s": member_s, "member_tokens": tokens,
                     "replay_s": replay_s, "update_s": update_s, "fp32_replays": not exact,
                     "measured": {str(k): v for k, v in measured.items()},
                     "check": {str(k): v for k, v in check.items()},
                     "grpo_allreduce_bytes": {"this model": grad_bytes,
                                              **{n: p * work.gradient_bytes for n, p in params.items()}},
                     "modelled_speedup": {"gpus": list(cm.GPUS), **modelled},
                     "assumptions": cm.assumptions()})


if __name__ == "__main__":
    main()
