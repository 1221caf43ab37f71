"""`training.population: ray` (jobs/population.py): ESSAM, RandOpt and CoRP scoring their
populations on two local Ray CPU workers give, for the same seeds, the single-process run's result
bit for bit (weights or seed lists, every logged reward, every query counted), while only seeds,
scalars and meters cross; a resumed run's workers start from its centre; and what cannot work
(another method, a dead worker, a cluster that does not answer) ends in one line.

The task is `Target` (tests/synthetic.py), whose reward moves with every completion, so that equal
rewards mean equal completions, and a worker that missed a move of the centre would score its
members otherwise. The workers are other processes: they get the task as a user's plugin
(NOGRAD_PLUGINS, which the pool hands them), not from this process's registry."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import ray
import torch
from safetensors.torch import load_file

from conftest import killed_at_step
from core import config, meters, models
from core.errors import NogradError
from core.outputs import read_json, write_json
from evals.tasks import TASKS
from jobs import population, tracking, validation
from jobs import train as training
from methods import METHODS
from synthetic import Target, write_target_data

PLUGIN = """
import sys

sys.path.insert(0, {tests!r})
from evals.tasks import register_task  # noqa: E402
from synthetic import Target  # noqa: E402

register_task({task})
"""
DYING = """
import os
import sys

sys.path.insert(0, {tests!r})
from evals.tasks import register_task  # noqa: E402
from synthetic import Target  # noqa: E402


@register_task
class Dying(Target):
    def is_correct(self, problem, completion):
        os._exit(1)  # a worker lost mid-population, as with a node that goes down
"""
WORKERS = 2


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=WORKERS, include_dashboard=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def target(tmp_path_factory, tiny_model_dir):
    """train(method, settings, population) runs one job on `Target` and returns its artifact.json,
    metrics.json, config and, for a model, its weights; every job of the module in one directory
    and MLflow store, each under its own config's work directory."""
    root = tmp_path_factory.mktemp("population")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        patch.setitem(TASKS, "target", Target())
        Path("target.py").write_text(PLUGIN.format(tests=str(Path(__file__).parent), task="Target"))
        patch.setenv("NOGRAD_PLUGINS", str(Path("target.py").resolve()))
        data_dir = write_target_data(Path("results/data/target"))
        models.prepare(str(tiny_model_dir), Path("results/model"))
        base = config.Config(
            name="ray", model=str(tiny_model_dir), dtype="float32", sampler="torch", seeds=[0],
            tasks={"target": config.TaskConfig()},
            tracking_uri=f"sqlite:///{root / 'results' / 'mlflow.db'}",
            training=config.TrainingConfig(max_new_tokens=12, checkpoint_every=1, population_workers=WORKERS),
        )
        write_json(Path("results/tracking.json"), tracking.init(base))
        yield lambda method, settings, population: train(base, data_dir, method, settings, population)


def train(base: config.Config, data_dir: Path, method: str, settings: dict, population: str) -> dict:
    cfg = dataclasses.replace(base, methods={method: METHODS[method].config(**settings)},
                              training=dataclasses.replace(base.training, population=population))
    out = Path(f"results/train/{population}/{method}/artifact.json")
    training.train(cfg, method, "target", 0, model_manifest=Path("results/model/manifest.json"),
                   data_dir=data_dir, tracking_file=Path("results/tracking.json"), out=out)
    artifact = read_json(out)
    job = {"artifact": {k: v for k, v in artifact.items() if k not in ("run_id", "path")},
           "metrics": read_json(out.parent / "metrics.json"), "config": cfg}
    if artifact["kind"] == "model":
        job["weights"] = load_file(Path(artifact["path"]) / "model.safetensors")
    return job


def assert_same_run(one: dict, workers: dict, rewards: tuple[str, ...], meters_per_row: bool) -> None:
    """The same artifact (weights bit for bit), the same rewards at every step, the same queries."""
    logged = [[{k: row[k] for k in rewards if k in row} for row in job["metrics"]["history"]] for job in (one, workers)]
    values = [row[k] for row in logged[0] for k in row]
    assert any(0 < v < 1 for v in values), f"rewards that do not vary cannot tell a centre from another: {values}"
    assert logged[1] == logged[0]
    assert workers["artifact"] == one["artifact"]
    if "weights" in one:
        assert one["weights"].keys() == workers["weights"].keys()
        assert all(torch.equal(one["weights"][k], workers["weights"][k]) for k in one["weights"]), "other weights"
    counted = [{k: job["metrics"]["meters"][k] for k in meters.COUNTERS} for job in (one, workers)]
    assert counted[1] == counted[0] and counted[0]["sequences_generated"] > 0
    if meters_per_row:  # every member of a step scored within the step
        rows = [job["metrics"]["history"] for job in (one, workers)]
        assert [{k: row[k] for k in meters.COUNTERS} for row in rows[1]] == [
            {k: row[k] for k in meters.COUNTERS} for row in rows[0]]


def assert_traffic(job: dict) -> list[dict]:
    """Every step's row logs the bytes sent and received since the previous one, which add up to the
    job's; its rows, each with traffic or none."""
    rows = job["metrics"]["history"]
    final = job["metrics"]["meters"]
    for key in ("population_bytes_sent", "population_bytes_received"):
        assert final[key] == sum(row[key] for row in rows) > 0
    assert final["population_workers"] == WORKERS and final["worker_peak_memory_mb"] > 0
    return rows


ESSAM = {"steps": 3, "batch_size": 4, "population_size": 4, "sigma": 0.05, "alpha": 0.2, "rho": 1e-3}


def test_a_job_starts_a_local_ray_of_its_own_and_a_worker_that_dies_is_one_line(target, monkeypatch):
    """Where no Ray runs (this test comes before the others of this file start theirs), the job
    starts a local one, a CPU per worker; a worker lost mid-population stops it with one line
    naming the worker, and the job leaves no Ray behind."""
    assert not ray.is_initialized(), "run this test before those that start a Ray for the module"
    Path("dying.py").write_text(DYING.format(tests=str(Path(__file__).parent)))
    monkeypatch.setenv("NOGRAD_PLUGINS", str(Path("dying.py").resolve()))
    with pytest.raises(NogradError, match=r"^population worker [12] of 2 \(a local Ray\) died: \w+Error: "):
        target("essam", {**ESSAM, "steps": 1}, "ray")
    assert not ray.is_initialized()


def test_essam_on_workers_killed_and_resumed_is_the_one_process_run(target, local_ray, monkeypatch):
    """Killed in its last step (after two steps of moves) and resumed from the checkpoint before it,
    the run on workers ends where the uninterrupted one-process run does: the resumed workers
    started from the checkpoint's centre and followed the ascent, its undoing and the update.

    Its traffic is what the messages carry: per step, to each worker two populations (fp32 weights:
    every member, 2 numbers each, the worker's seeds, the problems' indices, the step) and three
    moves (N terms of 2 numbers), and back N x |B| rewards and the meters (16 numbers) per
    population and worker; at most 512 bytes of names and framing per message besides 16 per
    number, and in a step that starts workers the config each starts from. Some kilobytes, where
    one weight tensor of even the tiny model, its embedding (384 x 32 in fp32), takes 49 KB."""
    one = target("essam", ESSAM, "process")
    with killed_at_step(monkeypatch, 2):
        target("essam", ESSAM, "ray")
    workers = target("essam", ESSAM, "ray")
    assert_same_run(one, workers, ("reward", "adversarial_reward"), meters_per_row=True)
    assert not any(key.startswith("population_") for key in one["metrics"]["meters"])

    n, batch = ESSAM["population_size"], ESSAM["batch_size"]
    messages = 2 * (2 * WORKERS) + 3 * (2 * WORKERS)  # populations and moves: a message and its reply each
    numbers = 2 * WORKERS * (3 * n + batch + 1) + 3 * WORKERS * 2 * n + 2 * (n * batch + 16 * WORKERS)
    setup = WORKERS * (population.size(workers["config"]) + 1024)
    for row in assert_traffic(workers):
        traffic = row["population_bytes_sent"] + row["population_bytes_received"]
        assert 0 < traffic <= 512 * messages + 16 * numbers + (setup if row["step"] in (0, 2) else 0), row
        assert row["step"] in (0, 2) or traffic < 49_152 / 10, row


def test_randopt_on_workers_scores_members_side_by_side_as_one_process(target, local_ray):
    """Five members, two workers: groups of two and a last member alone, logged a step each."""
    settings = {"population": 5, "sigmas": [0.05], "top_k": 2, "support_size": 4}
    one, workers = target("randopt", settings, "process"), target("randopt", settings, "ray")
    assert_same_run(one, workers, ("reward", "sigma", "perturbations"), meters_per_row=False)
    rows = assert_traffic(workers)
    assert [row["sequences_generated"] for row in rows[:5]] == [8, 8, 16, 16, 20], "two members, then one"
    assert [row["population_bytes_sent"] > 0 for row in rows[:5]] == [True, False, True, False, True]


def test_corp_on_workers_follows_its_commits_as_one_process(target, local_ray):
    """Stage 2 scores its local population around the centre Stage 1 committed."""
    settings = {"population": 4, "sigmas": [0.05], "support_size": 4, "probe_size": 4, "q_grid": [0.5],
                "beta_grid": [10.0], "scale_grid": [1.0, 2.0], "rounds": 1, "local_population": 3, "rank": 2,
                "step_factors": [1.0], "line_search": [1.0]}
    one, workers = target("corp", settings, "process"), target("corp", settings, "ray")
    assert_same_run(one, workers, ("reward", "support_reward", "probe_reward", "positive_share"), meters_per_row=False)
    assert_traffic(workers)


def test_a_cluster_that_does_not_answer_is_one_line():
    with pytest.raises(NogradError, match=r"^training.ray_address '127.0.0.1:1': no Ray cluster answers there \("):
        population.connect(ray, "127.0.0.1:1", WORKERS)


def test_methods_that_cannot_use_workers_are_refused_at_validation(tiny_model_dir):
    from conftest import tiny_config

    raw = {**tiny_config(tiny_model_dir, base={}, essam={}, mezo={}, essa={}), "training": {"population": "ray"}}
    with pytest.raises(NogradError, match=r"^config: training.population: 'ray' scores seeded populations on Ray "
                                          r"workers, and mezo, essa score none through run.score_population, .*"
                                          r"\(ray runs essam, essam_f, randopt, corp\)$"):
        validation.validate(raw)
    assert validation.validate({**raw, "methods": {"base": {}, "essam": {}}}).training.population == "ray"
    with pytest.raises(NogradError, match="with sampler: 'vllm': the Ray workers roll out with nograd's torch sampler"):
        validation.validate({**raw, "methods": {"essam": {}}, "sampler": "vllm"})
