"""Evaluation, identical for every method: greedy accuracy and pass@k on the task's test split.

For each test problem: one greedy completion, and `samples` sampled completions (temperature,
top_p, seed from the config). An ensemble answers by majority vote over its members' final
answers, sample by sample, and costs one inference pass per member. Every completion is
written to `completions.jsonl` with its extracted answer and score. Generation proceeds in
blocks of problems, each seeded by its position and cached in the work directory, so a killed
evaluation resumes where it stopped and gives the same completions; the work directory goes once
`metrics.json` is written.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import shutil
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import mlflow

from core import artifacts, meters
from core.backend import Backend
from core.config import Config, config_hash
from core.contract import QueryCounts
from core.outputs import atomic_path, finished, read_json, work_dir, write_json
from core.sampler import SamplingParams, prompt_text, sample
from core.task import Problem, graded
from evals.passk import mean_ci, pass_at_k_curve
from evals.tasks import get_task
from jobs import data, tracking
from methods import display_records
from reports.figures import passk_of_result
from reports.names import shown

MODES = ("greedy", "sample")


def _vote(task, answers: list[str]) -> int:
    """Index of the member whose answer the majority gives (ties: the first member among them)."""
    keys = [task.extract(text) for text in answers]
    counts = Counter(k for k in keys if k is not None)
    if not counts:
        return 0
    best = max(counts.values())
    return next(i for i, k in enumerate(keys) if k is not None and counts[k] == best)


def _members(artifact: dict, cfg: Config, meter: meters.Meters, work: Path) -> Iterator[tuple]:
    """(tokenizer, generate) for each member in turn, generate(prompts, params, desc) giving
    `sample`'s completions from the configured sampler."""
    backend = Backend.of(cfg)
    if backend.vllm:
        yield from _engines(artifact, backend, meter, work)
        return
    for model, tokenizer in artifacts.each_member(artifact, meter, cfg.dtype, cfg.device):
        yield tokenizer, functools.partial(sample, model, tokenizer)


def _engines(artifact: dict, backend: Backend, meter: meters.Meters, work_dir: Path) -> Iterator[tuple]:
    """`_members` on vLLM: one engine at a time, serving each member. Weights written for a member
    (`work_dir/member<j>`) are removed when its engine is closed; a kill leaves them, complete
    (written atomically), for the resumed evaluation to serve again."""
    from transformers import AutoTokenizer

    for j, spec in enumerate(artifacts.specs(artifact)):
        written = work_dir / f"member{j}"
        model_dir = artifacts.served(spec, written, backend.dtype)
        meter.disk_sample()
        engine = backend.engine(model_dir)
        yield AutoTokenizer.from_pretrained(model_dir), lambda prompts, params, desc=None: engine.sample(
            prompts, params, meter)
        engine.close()
        if written.exists():  # not where the member is a model, served from its own path
            shutil.rmtree(written)


def _generate(artifact: dict, cfg: Config, task, problems: list[Problem], meter: meters.Meters,
              cache: Path) -> list[dict[str, list[list[dict]]]]:
    """Completions per member, mode, problem and sample index (an ensemble has several members).

    Each problem's greedy completion and its samples are decoded in one batch (`greedy_first`),
    in blocks of as many problems as fit `batch_size` rows; a block is the unit of caching, so a
    killed evaluation redoes at most one. Each cached block keeps the meters it cost, which a
    resumed evaluation adds back, so that its cost is the whole evaluation's."""
    ev = cfg.evaluation
    params = SamplingParams(n=1 + ev.samples, temperature=ev.temperature, top_p=ev.top_p,
                            max_new_tokens=ev.max_new_tokens, batch_size=ev.batch_size, greedy_first=True)
    block = max(1, ev.batch_size // params.n)
    done = [json.loads(line) for line in cache.read_text().splitlines()] if cache.exists() else []
    # A block cached without its meters (an older version) is generated again, not counted as free.
    cached = {(d["member"], d["block"]): {"rows": d["rows"], "spent": d["spent"]} for d in done if "spent" in d}
    per_member = []
    for member, (tokenizer, generate) in enumerate(_members(artifact, cfg, meter, cache.parent)):
        rows = []
        for b, start in enumerate(range(0, len(problems), block)):
            if (member, b) in cached:
                spent = cached[member, b]["spent"]
                for name, amount in spent["counts"].items():
                    meter.count(name, amount)
                for name, seconds in spent["seconds"].items():
                    meter.seconds[name] += seconds
            else:
                chunk = problems[start : start + block]
                prompts = [prompt_text(tokenizer, task.messages(p)) for p in chunk]
                seeded = dataclasses.replace(params, seed=ev.seed * 100_003 + b)
                counts, seconds = dict(meter.counts), dict(meter.seconds)
                completions = generate(prompts, seeded,
                                       desc=f"{task.name} member {member} problems {start}-{start + len(chunk)}")
                spent = {"counts": {k: v - counts.get(k, 0) for k, v in meter.counts.items() if v != counts.get(k, 0)},
                         "seconds": {k: v - seconds.get(k, 0.0) for k, v in meter.seconds.items()}}
                cached[member, b] = {"spent": spent, "rows": [
                    [{"text": c.text, "tokens": c.tokens, "finished": c.finished} for c in r] for r in completions]}
                with open(cache, "a") as fh:
                    fh.write(json.dumps({"member": member, "block": b, **cached[member, b]}) + "\n")
            rows.extend(cached[member, b]["rows"])
        per_member.append({"greedy": [r[:1] for r in rows], "sample": [r[1:] for r in rows]})
    return per_member


def queries(cfg: Config, problems: int, inference_passes: int) -> QueryCounts:
    """What evaluating one artifact asks of the model (`nograd plan`): each problem's greedy answer
    and its `evaluation.samples` (the job's own), from every member of an ensemble."""
    return QueryCounts.rollouts(problems * (1 + cfg.evaluation.samples)) * inference_passes


def evaluate(cfg: Config, method: str, task_name: str, seed: int, artifact_file: Path, data_dir: Path,
             tracking_file: Path, out: Path) -> dict:
    """Evaluate one trained artifact; write `completions.jsonl` and, last, `metrics.json`; then the
    work directory (the cached blocks) goes."""
    task = get_task(task_name)
    isolation = task.sandbox(cfg.sandbox.isolation)  # before the model: a missing sandbox stops at once
    problems = data.read_split(data_dir / "test.jsonl")
    manifest = read_json(data_dir / "manifest.json")
    artifact = read_json(artifact_file)
    train_metrics = read_json(artifact_file.parent / "metrics.json")
    work = work_dir("eval", method, task_name, seed, config_hash(cfg))
    meter = meters.Meters()
    ev = cfg.evaluation

    per_member = _generate(artifact, cfg, task, problems, meter, work / "generations.jsonl")
    records, correct = [], {mode: [] for mode in MODES}
    with meter.phase("score"), ThreadPoolExecutor() as pool:
        for mode in MODES:
            for i, problem in enumerate(problems):
                candidates = [m[mode][i] for m in per_member]  # [member][sample]
                chosen = []
                for s in range(len(candidates[0])):
                    winner = _vote(task, [c[s]["text"] for c in candidates]) if len(candidates) > 1 else 0
                    chosen.append(candidates[winner][s])
                verdicts = list(pool.map(lambda c: graded(task, problem, c["text"]), chosen))
                scores = [score for score, _ in verdicts]
                meter.count("reward_calls", len(chosen))
                for _, fault in verdicts:
                    if fault:
                        meter.count(fault)
                correct[mode].append(sum(scores))
                for s, (c, ok) in enumerate(zip(chosen, scores)):
                    records.append({"problem": problem.id, "mode": mode, "sample": s, "text": c["text"],
                                    "tokens": c["tokens"], "finished": c["finished"],
                                    "answer": task.extract(c["text"]), "correct": bool(ok)})

    ci = dict(bootstrap_samples=ev.bootstrap_samples, confidence=ev.confidence, seed=ev.seed)
    meter.disk_sample()
    result = {
        "method": method, "task": task_name, "seed": seed,
        "problems": len(problems), "samples_per_problem": ev.samples,
        "inference_passes": artifacts.inference_passes(artifact),
        "greedy": mean_ci(correct["greedy"], **ci),
        "pass_at_k": pass_at_k_curve(correct["sample"], ev.samples, **ci),
        "intervals": {"confidence": ev.confidence, "bootstrap_samples": ev.bootstrap_samples},
        "sampling": {"temperature": ev.temperature, "top_p": ev.top_p, "max_new_tokens": ev.max_new_tokens,
                     "seed": ev.seed},
        "data": {"source": data.describe(manifest["test"]), "hash": manifest["test"]["hash"]},
        "cost": {"train": train_metrics["meters"] if train_metrics.get("trained") else {}, "eval": meter.snapshot()},
        "config_hash": config_hash(cfg),
        "sandbox": isolation,
    }
    out_dir = out.parent
    with atomic_path(out_dir / "completions.jsonl") as tmp:
        tmp.write_text("".join(json.dumps(r) + "\n" for r in records))

    tags = {"nograd.kind": "eval", "nograd.method": method, "nograd.model": cfg.model, "nograd.task": task_name,
            "nograd.seed": str(seed),
            "nograd.data_test": result["data"]["source"], "nograd.data_test_hash": result["data"]["hash"],
            "mlflow.parentRunId": artifact["run_id"], "nograd.train_run_id": artifact["run_id"]}
    with tracking.mlflow_run(read_json(tracking_file), cfg, f"eval {method} {task_name} seed{seed}", tags):
        mlflow.log_metrics({"greedy_accuracy": result["greedy"]["value"],
                            **{f"pass_at_{row['k']}": row["value"] for row in result["pass_at_k"]},
                            **{f"eval.{k}": v for k, v in result["cost"]["eval"].items()}})
        mlflow.log_artifact(str(out_dir / "completions.jsonl"))
        mlflow.log_table({key: [row[key] for row in result["pass_at_k"]] for key in ("k", "value", "low", "high")},
                         "pass_at_k.json")
        with shown(display_records([method])):
            mlflow.log_figure(passk_of_result(result, task_name, cfg.model), f"passk_{task_name}.png")
        write_json(out, result)
        mlflow.log_artifact(str(out))
    finished(work)
    return result
