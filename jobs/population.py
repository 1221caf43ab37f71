"""Populations scored on Ray actors (`training.population: ray`): `Pool`, the driver's side, which
`Run.score_population` hands its members to, and `Worker`, the actor.

A worker is a run without a step loop: an instance of the driver's run class (jobs/train.py's
`TrainingRun`, sent in the worker's set-up, so this module imports no other job) of its config, method,
task and seed, so that it loads the model from the run's manifest in the driver's dtype on the
driver's kind of device, and rolls out, rewards and meters with the driver's code. It starts from
the driver's centre, written once to the run's work directory when the pool starts (so a resumed
run's, or one a method moved before its first population), and from then on follows every lasting
move: the pool is a mirror of the driver's `perturb.Weights`, told each `combine_` as its (seed,
coefficient) terms, which every worker applies to its own copy with the same arithmetic. A
temporary move on the driver (`perturbed`) is not sent: workers score members around the centre,
and a population cannot be scored inside such a block, as perturbations do not nest.

Between the driver and the workers cross only seeds, coefficients, indices into the training
split, the score's name, the step, rewards and meter readings (and, once, the config and paths a
worker starts from). Every message is counted as the pickled size of its arguments or of its reply
(what Ray serializes, without its framing), and the bytes sent and received since the previous
step's row are logged beside the method's metrics (`population_bytes_sent`,
`population_bytes_received`); the start-up messages count in the step that started the pool.

Bit for bit: each worker computes with the driver's torch thread count (Ray starts actors with
one, and CPU matmuls can round differently with another), rolls out each member with the
sampling seed the driver drew for it, in member order, as the in-process loop draws them, and
draws its noise where the driver does (a worker on another kind of device is refused). An fp32
weight returns from a member's perturbation only within two roundings (one with an fp32 master
returns exactly), so scoring a population in one process moves its centre by a few ulps: with
fp32 weights every worker is sent the whole population, scores its share and moves through the
other members without rolling out (`replay`), and the driver moves through all of them while
the workers roll out, so that every copy's centre stays the one process's, bit for bit.

Meters: a worker answers with what each call added to its counters and phase times. The driver
adds the counts to the run's meters, so a run counts the same queries in one process or many, and
spreads the wall-clock it waited for the workers over the phases in the proportions the workers
spent them, so the phases still add up to the job's wall-clock. A worker holds a model of its own:
the largest peak memory of a worker is logged as `worker_peak_memory_mb`; the job's
`peak_memory_mb` stays the driver's.
"""

from __future__ import annotations

import os
import pickle
import socket
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from core import perturb, plugins
from core.errors import NogradError, one_line
from jobs import data

if TYPE_CHECKING:
    from core.contract import Run
    from core.task import Problem


NO_TRAFFIC = {"population_bytes_sent": 0, "population_bytes_received": 0, "worker_peak_memory_mb": 0.0}
"""A step's row before any worker started (a resumed run's first steps may score nothing)."""


def size(message) -> int:
    """Bytes of a message as pickled: what crosses between driver and worker."""
    return len(pickle.dumps(message, protocol=5))


class Worker:
    """One model copy on a Ray actor (made one by `ray.remote` when the pool starts)."""

    def __init__(self, setup: dict) -> None:
        torch.set_num_threads(setup["threads"])
        self.run = setup["run"](setup["config"], setup["method"], setup["task"], setup["seed"], setup["manifest"],
                       Path(setup["data_dir"]), Path(setup["work_dir"]), Path(setup["work_dir"]))
        self.weights = perturb.trainable(self.run.model)
        self.weights.load_masters(load_file(setup["centre"]))  # every tensor, masters or fp32 weights

    def noise_device(self) -> str:
        return perturb.noise_device(self.run.model.device)

    def score(self, members: list, first: int, seeds: list[int], problems: list[int], score: str, noise: str,
              step: int) -> tuple[list[list[float]], dict]:
        """Rewards [share, problems] of the members from `first` on, one per seed, around the centre (the others
        only replayed), and what scoring them added to the meters."""
        run, meters = self.run, self.run.meters
        run._step = step  # named by a non-finite member's error under `on_nonfinite: raise`
        counts, seconds = dict(meters.counts), dict(meters.seconds)
        replay(self.weights, members[:first], noise)
        rewards = run._score_members(members[first : first + len(seeds)], [run.train[i] for i in problems], score,
                                     noise, seeds)
        replay(self.weights, members[first + len(seeds) :], noise)
        spent = {"counts": {k: v - counts[k] for k, v in meters.counts.items() if v != counts[k]},
                 "seconds": {k: v - seconds.get(k, 0.0) for k, v in meters.seconds.items() if v != seconds.get(k)},
                 "peak_memory_mb": meters.peak_memory_mb()}
        return rewards.tolist(), spent

    def combine(self, terms: list[tuple[int, float]], mode: str) -> None:
        perturb.combine_(self.weights, terms, mode)


def replay(weights: perturb.Weights, members: list, noise: str) -> None:
    """Move `weights` to each member and back, rolling nothing out. An fp32 weight comes back from a
    `perturbed` block within two roundings, not bit for bit (a weight with an fp32 master does), so
    one process scoring a population leaves its centre moved by them: where that is so, the driver
    and every worker move theirs through every member in order, scoring only their own share."""
    with perturb.moves(weights):
        for terms in members:
            weights.move(terms, noise)


def totals(history: list[dict], workers: int) -> dict[str, float]:
    """A run's traffic, summed over its step rows (a resumed run's, with those kept from before it),
    its workers and the largest peak memory of a worker: what metrics.json's meters add under ray."""
    return {"population_bytes_sent": sum(row.get("population_bytes_sent", 0) for row in history),
            "population_bytes_received": sum(row.get("population_bytes_received", 0) for row in history),
            "population_workers": workers,
            "worker_peak_memory_mb": max((row.get("worker_peak_memory_mb", 0.0) for row in history), default=0.0)}


def connect(ray, address: str | None, workers: int) -> None:
    """Start a local Ray with a CPU per worker, or join the cluster at `address`; one line if it does not answer."""
    if address is None:
        try:
            ray.init(address="local", num_cpus=workers, include_dashboard=False)
        except Exception as error:
            raise NogradError(f"training.population: ray: a local Ray did not start ({one_line(error)})") from None
        return
    if address != "auto" and not address.startswith("ray://"):
        # Ray retries an address that does not answer for minutes: ask its port first.
        host, _, port = address.rpartition(":")
        try:
            socket.create_connection((host or "127.0.0.1", int(port)), timeout=10).close()
        except (OSError, ValueError) as error:
            raise NogradError(f"training.ray_address {address!r}: no Ray cluster answers there "
                              f"({one_line(error)})") from None
    try:
        ray.init(address=address)
    except Exception as error:
        raise NogradError(f"training.ray_address {address!r}: could not join a Ray cluster "
                          f"({one_line(error)})") from None


class Pool:
    """The run's Ray workers, each with one copy of the model at the driver's centre."""

    def __init__(self, run: Run) -> None:
        try:
            import ray
        except ImportError as error:
            raise NogradError(f"training.population: ray needs Ray installed (pip install ray): "
                              f"{one_line(error)}") from None
        training = run.config.training
        self.ray, self.meters = ray, run.meters
        self.where = f"Ray at {training.ray_address}" if training.ray_address else "a local Ray"
        self.started_ray = not ray.is_initialized()  # a Ray the caller started is left running
        if self.started_ray:
            connect(ray, training.ray_address, training.population_workers)
        self.workers: list = []
        try:
            self._start(run)
        except BaseException:
            self.close()
            raise

    def _start(self, run: Run) -> None:
        training, ray = run.config.training, self.ray
        self.sent = self.received = 0
        self.logged = (0, 0)
        self.peak_memory_mb = 0.0
        self.pending: list = []  # lasting moves sent, not yet answered
        self.inside = False  # the driver's weights are inside a `perturbed` block
        self.index = {p.id: i for i, p in enumerate(data.read_split(run.data_dir / "train.jsonl"))}

        weights = self.weights = perturb.trainable(run.model)
        self.exact = len(weights.masters) == len(weights)  # no weight moves when a member is restored
        centre = run.work_dir / "population" / "centre.safetensors"
        centre.parent.mkdir(parents=True, exist_ok=True)
        save_file({str(i): t.detach().contiguous() for i, t in enumerate(weights.centre())}, str(centre))
        run.meters.disk_sample()
        cuda = run.model.device.type == "cuda"
        setup = {"run": type(run), "config": run.config, "method": run.method, "task": run.task.name, "seed": run.seed,
                 "manifest": run.model_manifest, "data_dir": str(run.data_dir.resolve()),
                 "work_dir": str(run.work_dir.resolve()), "centre": str(centre.resolve()),
                 "threads": torch.get_num_threads()}
        options = {"num_cpus": 1, "num_gpus": 1 if cuda else 0, "max_restarts": 0}
        if os.environ.get(plugins.VARIABLE):  # a plugin's task or method must be known to the workers too
            options["runtime_env"] = {"env_vars": {plugins.VARIABLE: os.environ[plugins.VARIABLE]}}
        actor = ray.remote(Worker).options(**options)
        self.workers = [actor.remote(setup) for _ in range(training.population_workers)]
        self.sent += size(setup) * len(self.workers)
        try:
            devices = self._answers([(k, w.noise_device.remote()) for k, w in enumerate(self.workers)])
        finally:
            centre.unlink()
        ours = perturb.noise_device(run.model.device)
        if other := next((d for d in devices if d != ours), None):
            raise NogradError(f"training.population: ray: a worker draws its noise on {other}, the training job on "
                              f"{ours}: the same seeds would give other members there")
        weights.attach(self)

    def _answers(self, calls: Sequence[tuple[int, object]]) -> list:
        """The workers' replies to `calls`, (worker, reference) pairs, counted; a failure is one line naming
        the worker."""
        replies = []
        for k, ref in calls:
            where = f"population worker {k + 1} of {len(self.workers)} ({self.where})"
            try:
                reply = self.ray.get(ref)
            except self.ray.exceptions.RayTaskError as error:
                if isinstance(error.cause, NogradError):
                    raise NogradError(str(error.cause)) from None
                raise NogradError(f"{where} failed: {one_line(error.cause)}") from None
            except self.ray.exceptions.RayActorError as error:
                raise NogradError(f"{where} died: {one_line(error)}") from None
            self.received += size(reply)
            replies.append(reply)
        return replies

    def score(self, members: list[list[tuple[int, float]]], seeds: list[int], problems: Sequence[Problem],
              score: str, noise: str, step: int) -> np.ndarray:
        """`Run.score_population` on the workers: contiguous shares of the members, one share each."""
        if self.inside:
            raise RuntimeError("perturbed() blocks do not nest: score a population outside the block")
        self._answers(self.pending)
        self.pending = []
        if missing := [p.id for p in problems if p.id not in self.index]:
            raise NogradError(f"training.population: ray: problem {missing[0]} is not in the training split the "
                              "workers hold")
        indices = [self.index[p.id] for p in problems]
        calls = []
        for k, worker in enumerate(self.workers):
            low, high = k * len(members) // len(self.workers), (k + 1) * len(members) // len(self.workers)
            if self.exact and high > low:
                message = (members[low:high], 0, seeds[low:high], indices, score, noise, step)
            elif not self.exact:  # every worker replays the members it does not score
                message = (members, low, seeds[low:high], indices, score, noise, step)
            else:
                continue
            self.sent += size(message)
            calls.append((k, worker.score.remote(*message)))
        if not self.exact:
            replay(self.weights, members, noise)  # while the workers roll out; counted as update time
        start = time.perf_counter()
        replies = self._answers(calls)
        waited = time.perf_counter() - start
        phases: dict[str, float] = defaultdict(float)
        for _, spent in replies:
            for name, amount in spent["counts"].items():
                self.meters.count(name, amount)
            for name, seconds in spent["seconds"].items():
                phases[name] += seconds
            self.peak_memory_mb = max(self.peak_memory_mb, spent["peak_memory_mb"])
        for name, seconds in phases.items():
            self.meters.seconds[name] += waited * seconds / sum(phases.values())
        rows = [row for rewards, _ in replies for row in rewards]
        return np.array(rows, dtype=np.float64).reshape(len(members), len(problems))

    # The mirror of the driver's weights (`perturb.Weights.attach`): workers hold the centre.

    def perturb(self, terms: list[tuple[int, float]], mode: str) -> None:
        self.inside = True

    def restore(self) -> None:
        self.inside = False

    def combine(self, terms: list[tuple[int, float]], mode: str) -> None:
        """A lasting move, sent to every worker; its answers are collected before the next population."""
        message = (list(terms), mode)
        self.sent += size(message) * len(self.workers)
        self.pending += [(k, w.combine.remote(*message)) for k, w in enumerate(self.workers)]

    def traffic(self) -> dict[str, float]:
        """Bytes sent and received since the last call (a step's row), and the largest worker's peak memory."""
        sent, received = self.sent - self.logged[0], self.received - self.logged[1]
        self.logged = (self.sent, self.received)
        return {"population_bytes_sent": sent, "population_bytes_received": received,
                "worker_peak_memory_mb": self.peak_memory_mb}

    def close(self) -> None:
        for worker in self.workers:
            self.ray.kill(worker)
        if self.started_ray:
            self.ray.shutdown()
