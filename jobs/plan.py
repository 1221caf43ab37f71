"""`nograd plan`: what every training, evaluation and cross-check job of the DAG will ask of the
model, before the run, and about how long it will take on one device.

Counts come from each method's `queries` (its record, methods/__init__.py) on the training
problems its jobs will get (each task's data prepared as the data rule prepares it), and from
evaluation's own (`jobs.evaluate.queries`); tests/test_methods.py holds every method's to the
meters of a real run. A count that depends on outcomes is its largest, marked "<=". Tokens
generated are at most max_new_tokens per rollout.

Device-hours = forward-equivalents (forward passes, recomputed forwards and 2 per backward, the
held-out loss's forwards included) x max_new_tokens positions each / the throughput in tokens per
second: each sequence counted at the length of a rollout, at the speed a rollout's tokens are
generated. A loss forward over a long prompt costs more positions but runs them in parallel, so
this is an order of magnitude to plan with, not a prediction.

Then the power of the claim checks (reports/power.py): for each claim the config can test, the
smallest effect its test detects at 80% power with the config's problems and seeds, and whether
that decides it.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from core import config as configuration
from core import meters, models
from core.contract import QueryCounts
from core.errors import NogradError
from jobs import data
from methods import display_records, get_method, in_order
from reports import power
from reports.names import shown

SAMPLER_BENCHMARK = Path("results/speed/sampler.json")
"""Where `python -m benchmarks.sampler` writes the tokens per second it measured, the plan's default throughput."""
COLUMNS = ("job", "method", "task", "jobs", "rollouts", "tokens generated", "forward passes", "backward passes",
           "device-hours per job", "device-hours")


def measured_throughput() -> tuple[float, str] | None:
    """The nograd sampler's tokens per second from the last sampler benchmark, and what it measured."""
    if not SAMPLER_BENCHMARK.exists():
        return None
    measured = json.loads(SAMPLER_BENCHMARK.read_text())
    return measured["tokens_per_second"]["nograd sampler"], f"{SAMPLER_BENCHMARK} ({measured['setting']})"


def rows(cfg: configuration.Config, tokens_per_second: float | None) -> tuple[list[dict], list[str], dict]:
    """One row per (job kind, method, task), counts per job; a line on each task's data; and each
    task's test problems, as prepared and as available in its source. Without the model's config
    (no hub here) there are no job rows, and the notes say why: the power table needs only the data."""
    from evals.tasks import get_task
    from jobs.evaluate import queries as evaluation_queries

    found, notes, sizes = [], [], {}
    try:
        model = models.skeleton(cfg.model)
    except NogradError as error:
        model = None
        notes.append(f"No job counts or device-hours: {error}")
    for task in cfg.tasks:
        with tempfile.TemporaryDirectory() as tmp:
            manifest = data.prepare(configuration.for_run(cfg, task=task), task, Path(tmp))
            train, test = (data.read_split(Path(tmp) / f"{split}.jsonl") for split in ("train", "test"))
        sizes[task] = (len(test), manifest["test"]["available"])
        notes.append(f"{task}: {len(train):,} training problems from {data.describe(manifest['train'])}, "
                     f"{len(test):,} test problems from {data.describe(manifest['test'])}")
        for method in cfg.methods if model is not None else ():
            spec, job = get_method(method), configuration.for_run(cfg, method, task)
            stops = None
            try:
                trained = spec.queries(cfg.methods[method], train, model) if spec.queries else None
            except NogradError as error:  # what its training job would stop on
                trained, stops = None, str(error)
            members = trained.inference_passes if trained else 1
            jobs = [("train", trained, cfg.training.max_new_tokens),
                    ("evaluate", None if stops else evaluation_queries(job, len(test), members),
                     cfg.evaluation.max_new_tokens)]
            if cfg.evaluation.crosscheck and get_task(task).crosscheck and members == 1 and not stops:
                # lm-eval's greedy answer to each cross-checked problem (an ensemble's is not applicable)
                checked = min(len(test), cfg.evaluation.crosscheck_size or len(test))
                jobs.append(("crosscheck", QueryCounts.rollouts(checked), cfg.evaluation.max_new_tokens))
            for phase, counts, length in jobs:
                found.append({"job": phase, "method": method, "task": task, "jobs": len(cfg.seeds),
                              "counts": counts, "length": length, "stops": stops,
                              "hours": None if counts is None or not tokens_per_second
                              else _equivalents(counts) * length / tokens_per_second / 3600})
    return found, notes, sizes


def _equivalents(counts: QueryCounts) -> int:
    """The meters' forward-equivalents, and the held-out loss's forwards, which take device time too."""
    return (meters.forward_equivalents(counts.forward_passes, counts.recompute_passes, counts.backward_passes)
            + counts.heldout_forward_passes)


def _number(value: float, bound: bool = False, digits: int = 0) -> str:
    return ("<= " if bound and value else "") + f"{value:,.{digits}f}"


def render(cfg: configuration.Config, tokens_per_second: float | None, source: str,
           assumptions: power.Assumptions | None = None) -> str:
    """The plan as a Markdown table with a total, and what it assumes; then the claims' power table."""
    found, notes, sizes = rows(cfg, tokens_per_second)
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    total = {"jobs": 0, "hours": 0.0, "counts": QueryCounts()}
    stopping = sorted({f"{row['method']} on {row['task']}: {row['stops']}" for row in found if row["stops"]})
    for row in found:
        counts, hours, bound = row["counts"], row["hours"], row["counts"] is not None and row["counts"].bound
        cells = [row["job"], row["method"], row["task"], str(row["jobs"])]
        if counts is None:
            cells += ["would stop" if row["stops"] else "not foreseen"] * 4 + ["-", "-"]
        else:
            cells += [_number(counts.sequences_generated, bound),
                      _number(counts.sequences_generated * row["length"], True),
                      _number(counts.forward_passes + counts.heldout_forward_passes, bound),
                      _number(counts.backward_passes, bound)]
            cells += ["-", "-"] if hours is None else [_number(hours, bound, 2), _number(hours * row["jobs"], bound, 2)]
            total["counts"] += counts * row["jobs"]
            total["hours"] += (hours or 0.0) * row["jobs"]
            total["jobs"] += row["jobs"]
        lines.append("| " + " | ".join(cells) + " |")
    counts = total["counts"]
    lines.append("| " + " | ".join([
        "**total**", "", "", str(total["jobs"]), _number(counts.sequences_generated, counts.bound), "",
        _number(counts.forward_passes + counts.heldout_forward_passes, counts.bound),
        _number(counts.backward_passes, counts.bound), "",
        _number(total["hours"], counts.bound, 1) if tokens_per_second else "-"]) + " |")
    said = [f"Plan of {cfg.name}: {cfg.model}, seeds {', '.join(map(str, cfg.seeds))}.", *notes, "", *lines, ""]
    if tokens_per_second:
        said.append(f"Device-hours at {tokens_per_second:,.1f} tokens/s ({source}): forward-equivalents (forward "
                    "passes, recomputed forwards, 2 per backward) x max_new_tokens each / tokens per second; an "
                    "order of magnitude, see jobs/plan.py.")
    else:
        said.append("No device-hours: give --tokens-per-second, or run `python -m benchmarks.sampler` on the device.")
    said += [f"Would stop before training, and is not in the total: {line}" for line in stopping]
    said.append('"<=": the most the job can spend (it may stop early, or its count depends on outcomes); tokens '
                "generated are at most max_new_tokens per rollout. Forward passes include held-out loss forwards.")
    with shown(display_records(in_order())):
        said += ["", power.render(cfg, {t: n for t, (n, _) in sizes.items()}, {t: a for t, (_, a) in sizes.items()},
                                  assumptions or power.Assumptions())]
    return "\n".join(said) + "\n"
