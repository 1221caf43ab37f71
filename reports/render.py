"""Render the benchmark report (Markdown, self-contained HTML, tables as CSV, figures as PNG and
SVG) from the summary `collect` wrote.

Input: one dict per (method, task, seed) as the evaluator writes it to metrics.json, a header
describing the run, and, when present, per-problem scores, training histories and lm-eval
cross-checks. Seeds are averaged; any cell without results reads "—", and every output file is
written whatever is missing, so a partial experiment still renders (and Snakemake finds every
declared output).

`compute` gives the report's content (every table, every figure, the templates' context) and
`write` writes it, as the files reports/files.py names.
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass
from pathlib import Path

import jinja2
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from core.outputs import atomic_path, read_json
from reports import claims as claim_checks
from reports import cluster_model, figures
from reports.citations import paper_entries, run_entry
from reports.files import DOCUMENTS, FIGURE_TITLES, PER_TASK_FIGURES, TABLES, figure_stem, figure_stems
from reports.intervals import DEFAULT_CONFIDENCE
from reports.measures import control_mismatch
from reports.names import display_name, ordered, rank, shown
from reports.scores import (
    GREEDY,
    PASS,
    Intervals,
    ProblemScores,
    paired_difference,
    paired_seeds,
    seed_matrix,
    trailing_mean,
    training_curve,
)
from reports.verdicts import Evidence

__all__ = ["render", "samples_text"]

MISSING = "—"
REFERENCES = ("base", "grpo")
"""Every method is compared problem by problem with the base model and with GRPO."""
WARM_START = ("essa", "sft")
"""ESSA and its control: its LoRA SFT warm start alone, without the search."""

# (column, cost phase or None for a top-level field, key, format). The counters are those of
# training: evaluation runs the same protocol for every method, times its inference passes.
TIME_COLUMNS = [
    ("Peak memory, train (MB)", "train", "peak_memory_mb", "{:,.0f}"),
    ("Peak memory, eval (MB)", "eval", "peak_memory_mb", "{:,.0f}"),
    ("Wall-clock, train (s)", "train", "wall_clock_s", "{:,.1f}"),
    ("train: generate (s)", "train", "time_generate_s", "{:,.1f}"),
    ("train: score (s)", "train", "time_score_s", "{:,.1f}"),
    ("train: forward (s)", "train", "time_forward_s", "{:,.1f}"),
    ("train: update (s)", "train", "time_update_s", "{:,.1f}"),
    ("Wall-clock, eval (s)", "eval", "wall_clock_s", "{:,.1f}"),
]
QUERY_COLUMNS = [
    ("Forward passes", "train", "forward_passes", "{:,.0f}"),
    ("Backward passes", "train", "backward_passes", "{:,.0f}"),
    ("Recompute passes", "train", "recompute_passes", "{:,.0f}"),
    ("Tokens generated", "train", "tokens_generated", "{:,.0f}"),
    ("Reward calls", "train", "reward_calls", "{:,.0f}"),
    ("Forward-equivalents", "train", "forward_equivalents", "{:,.0f}"),
    ("Tokens processed", "train", "tokens_processed", "{:,.0f}"),
    ("Inference passes / answer", None, "inference_passes", "{:,.0f}"),
]
COST_COLUMNS = TIME_COLUMNS + QUERY_COLUMNS
FAULT_COLUMNS = [
    ("Reward errors, train", "train", "reward_errors", "{:,.1f}"),
    ("Reward errors, eval", "eval", "reward_errors", "{:,.1f}"),
    ("Reward hacks, train", "train", "reward_hacks", "{:,.1f}"),
    ("Reward hacks, eval", "eval", "reward_hacks", "{:,.1f}"),
    ("Non-finite, skipped", "train", "nonfinite", "{:,.1f}"),
]

_TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
    autoescape=lambda name: name is not None and name.endswith(".html.j2"),
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
    undefined=jinja2.StrictUndefined,
)


@dataclass
class Report:
    """A report's content, computed (`compute`) and not yet written (`write`)."""

    tasks: list[str]
    """The tasks it covers: the header's, then any other the results have."""
    tables: dict[str, pd.DataFrame]
    """Every table by name, those reports/files.py's TABLES names."""
    figures: dict[str, Figure]
    """Every figure by file stem, those reports/files.py's `figure_stems` names for `tasks`."""
    context: dict
    """What the templates fill in; each figure item names its stem, and `write` adds its image."""


def render(results: list[dict], header: dict, out_dir: Path, *, per_problem: list[dict] | None = None,
           histories: list[dict] | None = None, crosschecks: list[dict] | None = None,
           missing: list[dict] | None = None) -> dict[str, Path]:
    """Write the report, its tables and figures into `out_dir`; return the paths by file name.
    Methods are named, ordered and coloured by the header's `method_records` (reports/names.py).

    Each file is written under a temporary name and then renamed, so an interrupted render
    never leaves a file that looks finished.
    """
    with shown(header.get("method_records")):
        report = compute(results, header, per_problem=per_problem, histories=histories, crosschecks=crosschecks,
                         missing=missing)
        return write(report, out_dir)


def compute(results: list[dict], header: dict, *, per_problem: list[dict] | None = None,
            histories: list[dict] | None = None, crosschecks: list[dict] | None = None,
            missing: list[dict] | None = None) -> Report:
    """The report's content: every table, every figure and the templates' context, nothing written."""
    results = [r for r in results if r]
    # A method the config lists but that left no result still gets its rows, reading "—".
    methods = ordered({r["method"] for r in results} | set(header.get("methods") or {}))
    header_tasks = list(header.get("tasks", {}))
    tasks = header_tasks + sorted({r["task"] for r in results} - set(header_tasks))
    problems = ProblemScores(per_problem or [])
    histories = histories or []
    crosschecks = crosschecks or []
    # The evaluator records how its intervals were made; older results fall back to the defaults.
    recorded = next((r["intervals"] for r in results if r.get("intervals")), {})
    intervals = Intervals(recorded.get("confidence", DEFAULT_CONFIDENCE), paired_seeds(header))
    scores = _score_summary(results, problems, intervals)
    model = header.get("model", "")

    drawn: dict[str, Figure] = {}
    for task in tasks:
        curves = scores[(scores.task == task) & (scores.metric == "pass@k")]
        per_task = {
            "passk": figures.passk(curves, methods, task, model),
            "cost": figures.accuracy_vs_cost(*_cost_points(scores, results, task), task, model),
            "curves": figures.training_curves(_curve_series(histories, task), task, model),
        }
        drawn.update({figure_stem(kind, task): figure for kind, figure in per_task.items()})
    drawn["memory"] = figures.peak_memory(_memory(results), methods, model, _device(header))
    # The modelled cluster curve comes from the cost model's stated defaults alone, not from this run
    # (whose jobs each train on one device), so every report draws the same one.
    drawn["scaling"] = figures.cluster_speedup(list(cluster_model.GPUS), cluster_model.speedups(),
                                               cluster_model.PAPER_POINTS, cluster_model.assumptions())

    evidence = Evidence(results, problems, histories, header, intervals)
    tables = {
        "accuracy": _accuracy_table(scores, methods, tasks),
        "paired": _paired_table(problems, methods, tasks, intervals),
        "warm_start": _warm_start_table(problems, header, tasks, intervals),
        "cost_time": _cost_table(results, methods, tasks, TIME_COLUMNS),
        "cost_queries": _cost_table(results, methods, tasks, QUERY_COLUMNS),
        "faults": _cost_table(results, methods, tasks, FAULT_COLUMNS),
        "stages": _stages_table(histories),
        "claims": _claims_table(claim_checks.check_all(evidence)),
        "crosscheck": _crosscheck_table(crosschecks, problems, methods, tasks, intervals),
    }
    return Report(tasks, tables, drawn, _context(header, results, missing, tasks, tables, evidence))


def write(report: Report, out_dir: Path) -> dict[str, Path]:
    """Write `report` into `out_dir` as the files reports/files.py names for its tasks: each figure
    as PNG and SVG, each table as CSV, then report.md and report.html (which embeds the PNGs);
    return the paths by file name. Each file is written under a temporary name and then renamed."""
    stems = figure_stems(report.tasks)
    assert sorted(report.figures) == sorted(stems), \
        f"the figures computed, {sorted(report.figures)}, are not those reports/files.py names, {sorted(stems)}"
    assert sorted(report.tables) == sorted(TABLES), \
        f"the tables computed, {sorted(report.tables)}, are not those reports/files.py names, {sorted(TABLES)}"
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for stem in stems:
        written.update(figures.save(report.figures[stem], out_dir, stem))
    for name in TABLES:
        path = out_dir / f"table_{name}.csv"
        with atomic_path(path) as tmp:
            report.tables[name].to_csv(tmp, index=False)
        written[path.name] = path
    sections = [{**section, "items": [_figure_entry(written, item["stem"], item["label"]) for item in section["items"]]}
                for section in report.context["figures"]]
    context = {**report.context, "figures": sections}
    for name in DOCUMENTS:
        text = _TEMPLATES.get_template(f"{name}.j2").render(**context)
        with atomic_path(out_dir / name) as tmp:
            tmp.write_text(text, encoding="utf-8")
        written[name] = out_dir / name
    return written


def _figure_entry(written: dict[str, Path], stem: str, label: str) -> dict:
    png = written[f"{stem}.png"]
    return {"label": label, "png": png.name, "svg": f"{stem}.svg",
            "base64": base64.b64encode(png.read_bytes()).decode("ascii")}


def _context(header: dict, results: list[dict], missing: list[dict] | None, tasks: list[str],
             tables: dict[str, pd.DataFrame], evidence: Evidence) -> dict:
    """What the templates fill in: the run's scale and facts, each table with its title and caption,
    the figures' sections, the claims' rules, citations and notes."""
    confidence = f"{evidence.intervals.confidence:.0%}"
    return {
        "title": f"nograd report: {header.get('name', MISSING)}",
        "scale": _scale_line(header),
        "differences": header.get("scale_differences") or [],
        "untrusted": header.get("trust_differences") or [],
        "facts": _facts(header, results),
        "missing": [f"{display_name(m['method'])} on {m['task']}, seed {m['seed']}" for m in missing or []],
        "main": [
            _table("Accuracy (%)", "accuracy", _accuracy_caption(confidence), tables["accuracy"]),
            _table("Paired differences (percentage points)", "paired", _paired_caption(confidence), tables["paired"]),
        ] + ([_table("ESSA against its warm start (percentage points)", "warm_start",
                     "ESSA minus its LoRA SFT warm start alone (SFT: the same adapter and SFT settings, no search), "
                     "beside ESSA minus GRPO, paired as above: how much of ESSA's result the warm start already "
                     "reaches. The last column says whether SFT's warm-start settings are ESSA's.",
                     tables["warm_start"], text_columns=1, left=("SFT's settings",))]
             if len(tables["warm_start"]) else []),
        "cost": [
            _table("Cost: memory and wall-clock", "cost_time",
                   "Means over seeds. Training wall-clock split by phase: generate (sampling rollouts), score "
                   "(verifiers), forward (loss forwards), update (the rest: perturbations, optimizer steps). "
                   "\"—\" where the method does not train or results are missing.", tables["cost_time"]),
            _table("Cost: queries", "cost_queries",
                   "Means over seeds, counted in training, except inference passes per answer (what each test answer "
                   "costs: 1, or K for an ensemble of K). Recompute passes: sequences run forward a second time by "
                   "gradient checkpointing (\"—\" where not metered). Forward-equivalents = forward passes + 2 × "
                   "backward passes + recompute passes; tokens processed, the token positions all forward calls "
                   "computed, beside it, since a sequence's cost grows with its length.",
                   tables["cost_queries"]),
            _table("Faults", "faults",
                   "Means over seeds. Reward errors: completions scored 0 because the verifier failed or could not "
                   "grade them within its limits. Reward hacks: code completions scored 0 because they handed their "
                   "tests something other than plain data (an object equal to everything, a subclass of int); a "
                   "method whose evaluation shows them learned to hack. Non-finite: losses, perturbed members and "
                   "training batches found NaN or Inf and left out (training.on_nonfinite). \"—\" where the method "
                   "does not train or results are missing.", tables["faults"]),
        ] + ([_table("Cost: separately reported stages", "stages",
                     "Training stages a method reports on their own (e.g. ESSA's supervised warm start before its "
                     "search), per seed.", tables["stages"])] if len(tables["stages"]) else []),
        "claims": _table("Claim checks", "claims", "One row per claim of the seed papers. The verdict is computed "
                         "from this run's result files by the rule stated in full below; the last column gives that "
                         "rule, or why this run cannot tell. The scale column says what the comparison ran on; the "
                         "detectable effect is the smallest effect this run could have detected at 80% power, from "
                         "the observed variance (crossed-interval comparisons).", tables["claims"], text_columns=8),
        "crosscheck": _table("Cross-check with lm-evaluation-harness", "crosscheck",
                             _crosscheck_caption(header, confidence), tables["crosscheck"], left=("Flag",)),
        "tasks": _table("Tasks", "tasks", "Test-split hash: content hash of the test problems scored.",
                        _task_table(header, results, tasks)),
        "figures": _figure_sections(tasks, confidence),
        "verdicts": _verdict_rules(evidence, evidence.intervals.confidence),
        "rules": [(claim.statement, claim_checks.rule_text(claim)) for claim in claim_checks.CLAIMS],
        "citations": [run_entry(header)] + paper_entries({r["method"] for r in results}),
        "notes": _notes(confidence),
    }


def _figure_sections(tasks: list[str], confidence: str) -> list[dict]:
    """One section per kind of figure (reports/files.py's FIGURE_TITLES): its title, caption and
    items, one per task or one for all tasks, each naming its figure's stem."""
    captions = {
        "passk": "pass@k (%) for k = 1, 2, 4, … up to the samples drawn per problem, on a log axis (means over "
                 f"seeds); bands: the accuracy table's {confidence} intervals.",
        "cost": "Greedy accuracy (%) of each trained method against its training queries (forward-equivalents) and "
                f"training wall-clock, log axes; bars: {confidence} intervals. The dashed line is the base model, "
                "which does not train.",
        "curves": "Training reward and loss against training queries (forward-equivalents): faint, the logged "
                  "values; solid, a trailing mean over a tenth of the points. One line per seed.",
        "memory": "Peak memory per method (GiB), training (solid) beside evaluation (hatched), the largest over "
                  "tasks of the mean over seeds.",
        "scaling": "MODELLED, NOT MEASURED: ESSA's speed-up over GRPO (GRPO's seconds per rollout over ESSA's, each "
                   "on G GPUs) for 1.5B, 7B and 32B models, from the cost model reports/cluster_model.py with its "
                   "documented defaults and no quantity of this run (every job of it trains on one device); stars: "
                   "ESSA's reported 2x on 16 GPUs and 6x on 128 (Qwen2.5-32B, time to a fixed MATH500 accuracy). Per "
                   "step, ESSA: ceil(N/G) members' rollouts + the driver's messages (2G latencies + bytes / "
                   "bandwidth); data-parallel GRPO: ceil(R/G) rollouts and loss passes + a ring all-reduce of its "
                   "gradient (2(G−1)/G × bytes / bandwidth + 2(G−1) latencies). Assumptions: "
                   f"{cluster_model.assumptions()}. Left out: decoding's memory-bound floor, GRPO's optimizer step "
                   "and weight sync, whether a model fits a GPU, overlap of communication with compute. python -m "
                   "benchmarks.scaling checks the model's ES step against 1- and 2-worker Ray steps on one machine "
                   "(README).",
    }
    wide = {"cost", "curves"}
    return [{"title": title, "caption": captions[kind],
             "items": ([{"label": task, "stem": figure_stem(kind, task)} for task in tasks]
                       if kind in PER_TASK_FIGURES else [{"label": "all tasks", "stem": figure_stem(kind)}]),
             "wide": kind in wide}
            for kind, title in FIGURE_TITLES.items()]


# ---------------------------------------------------------------- accuracy


def _score_summary(results: list[dict], problems: ProblemScores | None = None,
                   intervals: Intervals | None = None) -> pd.DataFrame:
    """One row per (method, task, metric, k): means over seeds and the per-seed spread.

    metric is "greedy" (k = 0) or "pass@k". A seed without a metric simply does not count. Where
    the per-problem scores of a (method, task) are at hand, its value and interval are recomputed
    from them with the crossed seeds x problems interval, so that the interval holds the
    variation between seeds; elsewhere (a summary without completions) they are the means of the
    per-seed values and bounds, the evaluator's problem bootstrap.
    """
    rows = []
    for r in results:
        key = {"method": r["method"], "task": r["task"], "seed": r.get("seed")}
        if r.get("greedy"):
            rows.append({**key, "metric": "greedy", "k": 0, **_interval(r["greedy"])})
        for point in r.get("pass_at_k") or []:
            rows.append({**key, "metric": "pass@k", "k": point["k"], **_interval(point)})
    columns = ["method", "task", "seed", "metric", "k", "value", "low", "high"]
    scores = pd.DataFrame(rows, columns=columns)
    summary = (
        scores.groupby(["method", "task", "metric", "k"], as_index=False)
        .agg(
            value=("value", "mean"),
            low=("low", "mean"),
            high=("high", "mean"),
            seed_min=("value", "min"),
            seed_max=("value", "max"),
            seeds=("seed", "nunique"),
        )
    )
    if problems is None:
        return summary
    for i, row in summary.iterrows():
        if not problems.has(row.method, row.task) or row.k > problems.samples(row.method, row.task):
            continue
        metric, k = (GREEDY, 1) if row.metric == "greedy" else (PASS, int(row.k))
        per_seed = problems.per_seed(row.method, row.task, metric, k)
        if per_seed:
            ci = intervals.mean(seed_matrix(per_seed, list(per_seed)))
            summary.loc[i, ["value", "low", "high"]] = ci["value"], ci["low"], ci["high"]
    return summary


def _interval(point: dict) -> dict:
    return {name: point[name] for name in ("value", "low", "high")}


def _accuracy_table(scores: pd.DataFrame, methods: list[str], tasks: list[str]) -> pd.DataFrame:
    """Task x method: seeds, greedy accuracy, pass@1, pass@16 and pass@k at the largest k run."""
    by_key = scores.set_index(["method", "task", "metric", "k"])
    largest_k = scores[scores.metric == "pass@k"].groupby(["method", "task"]).k.max().to_dict()
    distinct = set(largest_k.values())
    show_largest = bool(distinct - {1})
    show_16 = any(k > 16 for k in distinct)
    # One column title when every row ran the same largest k; else each cell names its k.
    largest_title = f"pass@{next(iter(distinct))}" if len(distinct) == 1 else "pass@k, largest k"

    def cell(method, task, metric, k):
        if (method, task, metric, k) not in by_key.index:
            return MISSING
        row = by_key.loc[(method, task, metric, k)]
        text = f"{100 * row.value:.1f} [{100 * row.low:.1f}, {100 * row.high:.1f}]"
        if row.seeds > 1:
            text += f"; seeds {100 * row.seed_min:.1f}–{100 * row.seed_max:.1f}"
        return text

    rows = []
    for task in tasks:
        for method in methods:
            seeds = scores[(scores.method == method) & (scores.task == task)].seeds.max()
            row = {
                "Task": task,
                "Method": display_name(method),
                "Seeds": MISSING if pd.isna(seeds) else str(int(seeds)),
                "Greedy": cell(method, task, "greedy", 0),
                "pass@1": cell(method, task, "pass@k", 1),
            }
            if show_16:
                row["pass@16"] = cell(method, task, "pass@k", 16)
            if show_largest:
                k = largest_k.get((method, task))
                text = MISSING if k is None else cell(method, task, "pass@k", k)
                row[largest_title] = text if len(distinct) == 1 or k is None else f"{text} (k={k})"
            rows.append(row)
    columns = ["Task", "Method", "Seeds", "Greedy", "pass@1"]
    columns += ["pass@16"] if show_16 else []
    columns += [largest_title] if show_largest else []
    return pd.DataFrame(rows, columns=columns)


def _accuracy_caption(confidence: str) -> str:
    return (f"Value [{confidence} interval], in percent: the mean over seeds, with the crossed seeds x problems "
            "interval (see the notes), so that it holds the variation between training runs; with several "
            "seeds, then the min–max of the per-seed values (without per-problem scores, the interval is the mean "
            "of the per-seed bounds). pass@k up to the largest k the samples allow (the papers report pass@256 from "
            "256 samples per problem).")


PAIRED_METRICS = {"greedy": (GREEDY, 1), "pass@1": (PASS, 1), "pass@n": (PASS, None)}
"""The paired tables' metrics: label -> (metric, k); k None is n, the samples per problem both drew."""


def _paired_cell(problems: ProblemScores, method: str, reference: str, task: str, label: str,
                 intervals: Intervals) -> str:
    """`method` minus `reference` on their shared problems of `task`, with its interval; "—" where there is none."""
    if reference == method or not problems.has(method, task) or not problems.has(reference, task):
        return MISSING
    metric, k = PAIRED_METRICS[label]
    n = min(problems.samples(method, task), problems.samples(reference, task))
    if metric == PASS and n < 1:
        return MISSING
    diff = paired_difference(problems.per_seed(method, task, metric, k or n),
                             problems.per_seed(reference, task, metric, k or n), intervals, (method, reference))
    return MISSING if diff is None else _signed(diff) + (f" (n={n})" if k is None else "")


def _paired_table(problems: ProblemScores, methods: list[str], tasks: list[str], intervals: Intervals) -> pd.DataFrame:
    """Task x method: the paired difference to the base model and to GRPO on the same problems, for
    greedy accuracy, pass@1 and pass@n (n: the samples per problem both ran)."""
    columns = {(reference, label): f"vs {display_name(reference)}: {label}"
               for reference in REFERENCES for label in PAIRED_METRICS}
    rows = []
    for task in tasks:
        for method in methods:
            cells = {title: _paired_cell(problems, method, reference, task, label, intervals)
                     for (reference, label), title in columns.items()}
            if any(value != MISSING for value in cells.values()):
                rows.append({"Task": task, "Method": display_name(method), **cells})
    return pd.DataFrame(rows, columns=["Task", "Method", *columns.values()])


def _warm_start_table(problems: ProblemScores, header: dict, tasks: list[str], intervals: Intervals) -> pd.DataFrame:
    """Per task where ESSA and its warm start alone (SFT) were both scored: ESSA minus SFT beside
    ESSA minus GRPO, greedy and pass@n, and whether SFT's warm-start settings are ESSA's."""
    method, control = WARM_START
    mismatch = control_mismatch(header, method, control)
    setting = f"does not match: {'; '.join(mismatch)}" if mismatch else f"{display_name(method)}'s warm start"
    columns = {(reference, label): f"{display_name(method)} − {display_name(reference)}: {label}"
               for label in ("greedy", "pass@n") for reference in (control, "grpo")}
    rows = []
    for task in tasks:
        if problems.has(method, task) and problems.has(control, task):
            cells = {title: _paired_cell(problems, method, reference, task, label, intervals)
                     for (reference, label), title in columns.items()}
            rows.append({"Task": task, **cells, "SFT's settings": setting})
    return pd.DataFrame(rows, columns=["Task", *columns.values(), "SFT's settings"])


def _signed(diff: dict) -> str:
    return f"{100 * diff['value']:+.1f} [{100 * diff['low']:+.1f}, {100 * diff['high']:+.1f}]"


def _paired_caption(confidence: str) -> str:
    return ("Each method minus the base model, and minus GRPO, on the same test problems: per problem, each "
            "method's score averaged over its seeds; the mean difference over the problems both were scored on, "
            f"with its {confidence} crossed seeds x problems interval (see the notes). Exploratory: each interval "
            f"holds at {confidence} on its own, with no correction for the many comparisons here; the claim checks are "
            "the corrected family. pass@n is pass@k at k = n, the samples per problem. \"—\": the "
            "reference was not run on the task (or is the method itself).")


# ---------------------------------------------------------------- cost


def _cost_rows(results: list[dict], columns) -> pd.DataFrame:
    rows = []
    for r in results:
        cost = r.get("cost") or {}
        # A run that did no training (base) has no training cost, not a cost of zero.
        trained = any((cost.get("train") or {}).values())
        row = {"method": r["method"], "task": r["task"]}
        for column, phase, key, _ in columns:
            if phase is None:
                row[column] = r.get(key)
            elif phase == "eval" or trained:
                row[column] = (cost.get(phase) or {}).get(key)
        rows.append(row)
    frame = pd.DataFrame(rows, columns=["method", "task"] + [c[0] for c in columns])
    return frame.astype({c[0]: float for c in columns}).groupby(["method", "task"]).mean()


def _cost_table(results: list[dict], methods: list[str], tasks: list[str], columns) -> pd.DataFrame:
    """Task x method: the given cost columns, means over seeds."""
    means = _cost_rows(results, columns)
    table = []
    for task in tasks:
        for method in methods:
            row = {"Task": task, "Method": display_name(method)}
            for column, _, _, fmt in columns:
                value = means[column].get((method, task))
                row[column] = MISSING if value is None or pd.isna(value) else fmt.format(value)
            table.append(row)
    return pd.DataFrame(table, columns=["Task", "Method"] + [c[0] for c in columns])


def _stages_table(histories: list[dict]) -> pd.DataFrame:
    rows = []
    for h in sorted(histories, key=lambda h: (h["task"], rank(h["method"]), h["seed"])):
        for stage, meters in (h.get("stages") or {}).items():
            rows.append({"Task": h["task"], "Method": display_name(h["method"]), "Seed": str(h["seed"]),
                         "Stage": stage, "Wall-clock (s)": f"{meters.get('wall_clock_s', math.nan):,.1f}",
                         "Forward-equivalents": f"{meters.get('forward_equivalents', math.nan):,.0f}",
                         "Backward passes": f"{meters.get('backward_passes', math.nan):,.0f}",
                         "Peak memory (MB)": f"{meters.get('peak_memory_mb', math.nan):,.0f}"})
    return pd.DataFrame(rows, columns=["Task", "Method", "Seed", "Stage", "Wall-clock (s)", "Forward-equivalents",
                                       "Backward passes", "Peak memory (MB)"])


def _memory(results: list[dict]) -> pd.DataFrame:
    """Per method: peak memory in training and in evaluation, the largest over tasks of the mean over seeds."""
    means = _cost_rows(results, [("train", "train", "peak_memory_mb", ""), ("eval", "eval", "peak_memory_mb", "")])
    if means.empty:
        return pd.DataFrame(columns=["method", "train", "eval"])
    return means.groupby(level="method").max().reset_index()


def _device(header: dict) -> str:
    return "peak RSS, CPU" if "no GPU" in str(header.get("hardware", "")) else "peak allocated, GPU"


def _cost_points(scores: pd.DataFrame, results: list[dict], task: str) -> tuple[pd.DataFrame, dict | None]:
    """(trained methods' greedy accuracy with training queries and seconds, the base model's accuracy)."""
    greedy = scores[(scores.task == task) & (scores.metric == "greedy")].set_index("method")
    spent = _cost_rows([r for r in results if r["task"] == task],
                       [("queries", "train", "forward_equivalents", ""), ("seconds", "train", "wall_clock_s", "")])
    rows, base = [], None
    for method in greedy.index:
        accuracy = greedy.loc[method]
        cost = spent.loc[(method, task)] if (method, task) in spent.index else None
        if cost is None or pd.isna(cost.queries) or pd.isna(cost.seconds):
            if method == "base":
                base = {"value": accuracy.value, "low": accuracy.low, "high": accuracy.high}
            continue
        rows.append({"method": method, "value": accuracy.value, "low": accuracy.low, "high": accuracy.high,
                     "queries": cost.queries, "seconds": cost.seconds})
    points = pd.DataFrame(rows, columns=["method", "value", "low", "high", "queries", "seconds"])
    order = {m: i for i, m in enumerate(ordered(points.method))}
    return points.sort_values("method", key=lambda s: s.map(order)), base


def _curve_series(histories: list[dict], task: str) -> list[dict]:
    series = []
    for h in sorted(histories, key=lambda h: (rank(h["method"]), h["seed"])):
        if h["task"] != task:
            continue
        for metric in ("reward", "loss"):
            curve = training_curve(h.get("history") or [], metric)
            if curve is not None:
                series.append({"method": h["method"], "seed": h["seed"], "metric": metric, "x": curve[0],
                               "y": curve[1], "smooth": trailing_mean(curve[1])})
    return series


# ---------------------------------------------------------------- claims and cross-check


def _claims_table(rows: list[dict]) -> pd.DataFrame:
    columns = ["Claim", "Paper", "Paper's figure", "Ours (this run)", "Scale", "Verdict", "Detectable effect",
               "Rule or reason"]
    return pd.DataFrame(
        [{"Claim": row["claim"], "Paper": display_name(row["paper"]), "Paper's figure": row["paper_figure"],
          "Ours (this run)": row["ours"], "Scale": row["scale"], "Verdict": row["verdict"],
          "Detectable effect": MISSING if row["detectable"] is None else f"{100 * row['detectable']:.1f} pp",
          "Rule or reason": row["reason"]} for row in rows],
        columns=columns)


def _crosscheck_table(checks: list[dict], problems: ProblemScores, methods: list[str], tasks: list[str],
                      intervals: Intervals) -> pd.DataFrame:
    """Task x method: lm-eval's greedy accuracy beside nograd's on the same problems, with our
    interval, and a flag when lm-eval's figure falls outside it."""
    columns = ["Task", "Method", "Seeds", "Problems", "lm-eval greedy (%)", "nograd greedy, same problems (%)",
               "Difference (pp)", "Identical completions", "Identical prompts", "Flag"]
    rows = []
    for task in tasks:
        for method in methods:
            found = sorted((c for c in checks if c["method"] == method and c["task"] == task), key=lambda c: c["seed"])
            if not found:
                continue
            row = {"Task": task, "Method": display_name(method), "Seeds": str(len(found))}
            applicable = [c for c in found if c.get("applicable")]
            if not applicable:
                rows.append({**row, "Flag": f"not applicable: {found[0].get('reason', '')}"})
                continue
            # Compared seed by seed: only the seeds nograd's own evaluation also scored.
            compared = [c for c in applicable if c["seed"] in problems.seeds(method, task)]
            if not compared:
                rows.append({**row, "Seeds": "0", "Flag": "no nograd per-problem scores of these seeds to compare"})
                continue
            ids = list(compared[0]["per_problem"])
            ours = problems.values(method, task, GREEDY, seeds={c["seed"] for c in compared})
            shared = [p for p in ids if p in ours]
            if not shared:
                rows.append({**row, "Flag": "no nograd per-problem scores of these problems to compare"})
                continue
            theirs = float(np.mean([np.mean([c["per_problem"][p] for p in shared]) for c in compared]))
            ci = intervals.mean([ours[p] for p in shared])
            outside = not ci["low"] <= theirs <= ci["high"]
            same_text = [c.get("same_text") for c in compared]
            total = len(shared) * len(compared)
            rows.append({
                **row,
                "Seeds": str(len(compared)),
                "Problems": str(len(shared)),
                "lm-eval greedy (%)": f"{100 * theirs:.1f}",
                "nograd greedy, same problems (%)":
                    f"{100 * ci['value']:.1f} [{100 * ci['low']:.1f}, {100 * ci['high']:.1f}]",
                "Difference (pp)": f"{100 * (theirs - ci['value']):+.1f}",
                "Identical completions": f"{sum(same_text)} of {total}" if None not in same_text else MISSING,
                "Identical prompts": f"{sum(c.get('prompts_identical', 0) for c in compared)} of {total}",
                "Flag": "OUTSIDE our interval" if outside else "within our interval",
            })
    return pd.DataFrame(rows, columns=columns).fillna(MISSING)


def _verdict_rules(evidence: Evidence, confidence: float) -> str:
    """How every verdict is decided, in words (reports/verdicts.py), before each claim's own rule."""
    tail = (1 - confidence) / 2
    return (
        "Verdicts: supported, not supported, inconclusive at this scale, not run (a method the claim compares did "
        "not run on its task), missing data (a metric the comparison needs is not in the result files, named in the "
        "row). Each claim is tested as stated, its size included: parity with GRPO as non-inferiority on the share "
        "of GRPO's gain kept, gains against half the paper's effect. The claims this run tests are one family: "
        f"Holm's step-down method holds the chance that any definite verdict is wrong at "
        f"{evidence.setting('family_alpha'):g} (report.family_alpha), so a claim whose own {confidence:.0%} interval "
        "would decide it can still read inconclusive; the paired-difference tables are exploratory, each interval "
        f"at {confidence:.0%} alone. A claim is tested only where this run could tell: each compared method has at "
        f"least {evidence.min_seeds} training seeds (report.min_seeds); a parity or gain claim compares methods off "
        "the floor (GRPO's greedy accuracy beats the base model's on the task, else no method moved); and the "
        "scores vary (an interval of no width, as from all-zero data, is not certainty: n problems cannot resolve "
        f"less than 1 − {tail:g}^(1/n), {_floor(8, tail):.0f} points for 8 problems, {_floor(200, tail):.1f} for "
        "200). Where any of these fails, or the claim's own preconditions do, the verdict is inconclusive at this "
        "scale and the row says why; an inconclusive row also says when the smallest effect this run could detect "
        "at 80% power exceeds the size the claim turns on. The rule of each claim:")


def _floor(problems: int, tail: float) -> float:
    return 100 * (1 - tail ** (1 / problems))


def _crosscheck_caption(header: dict, confidence: str) -> str:
    setting = header.get("crosscheck") or {}
    if setting and not setting.get("enabled", True):
        return "The cross-check is off in this run's config (evaluation.crosscheck: false)."
    size = setting.get("size")
    scope = "every test problem" if size is None else f"the first {size} test problems of each task"
    return ("Greedy GSM8K and MATH accuracy of each single-model result scored by lm-evaluation-harness "
            "(simple_evaluate over an HFLM of the loaded model, zero-shot, with task YAMLs that read the same "
            f"prepared test split) on {scope}, beside nograd's own greedy accuracy on the same problems with its "
            f"{confidence} bootstrap interval over those problems (not over seeds: both loops scored the same trained "
            "models). The prompt (the model's chat template, rendered by lm-eval) and the verifier are "
            "nograd's, so only the generation loop differs: a flag means one of the two loops produced different "
            "answers. Identical completions: greedy texts equal character for character.")


# ---------------------------------------------------------------- header and text


def _task_table(header: dict, results: list[dict], tasks: list[str]) -> pd.DataFrame:
    """Per task: split sizes, data source and the hash of the scored test split."""
    data = {r["task"]: r.get("data") or {} for r in results}
    rows = []
    for task in tasks:
        info = header.get("tasks", {}).get(task, {})
        source = info.get("source") or data.get(task, {}).get("source")
        digest = data.get(task, {}).get("hash")
        rows.append({
            "Task": task,
            "Source": source or MISSING,
            "Train problems": str(info.get("train", MISSING)),
            "Test problems": str(info.get("test", MISSING)),
            "Test-split hash": digest[:12] if digest else MISSING,
        })
    columns = ["Task", "Source", "Train problems", "Test problems", "Test-split hash"]
    return pd.DataFrame(rows, columns=columns)


def _table(title: str, name: str, caption: str, frame: pd.DataFrame, text_columns: int = 2, left=()) -> dict:
    # A table leads with its text columns, left-aligned, then numbers (and any text columns named
    # in `left`); the HTML stylesheet aligns the same way. (tabulate cannot align a table without rows.)
    align = None
    if len(frame):
        align = ["left" if i < text_columns or column in left else "right" for i, column in enumerate(frame.columns)]
    return {
        "title": title,
        "name": name,
        "caption": caption,
        "rows": len(frame),
        "markdown": frame.to_markdown(index=False, colalign=align, disable_numparse=True),
        "html": frame.to_html(index=False, border=0, escape=True, classes=f"table-{name}"),
    }


def samples_text(samples, by_method: dict[str, int] | None = None) -> str:
    """Samples per problem in words: '8', or '8 (Base model: 256)' where some methods draw more."""
    exceptions = ", ".join(f"{display_name(m)}: {n}" for m, n in (by_method or {}).items())
    return f"{samples} ({exceptions})" if exceptions else str(samples)


def _samples(header: dict) -> str:
    return samples_text(header.get("samples_per_problem", MISSING), header.get("samples_by_method"))


def _scale_line(header: dict) -> str:
    """One sentence with the run's scale, so a small run is never read as a paper-scale one."""
    tasks = header.get("tasks", {})
    sizes = ", ".join(f"{task} {info.get('test', '?')}" for task, info in tasks.items())
    seeds = header.get("seeds")
    return (
        f"Scale: config '{header.get('name', MISSING)}' (hash {header.get('config_hash', MISSING)}), "
        f"model {header.get('model', MISSING)}, "
        f"test problems per task: {sizes or MISSING}, "
        f"{_samples(header)} samples per problem, "
        + (f"{len(seeds)} seed{'s' if len(seeds) != 1 else ''}, " if seeds else "")
        + f"on {header.get('hardware', MISSING)}, "
        f"{_duration(header.get('job_time_s'))} of training and evaluation jobs in total (summed: jobs may "
        "run side by side)."
    )


def _facts(header: dict, results: list[dict]) -> list[tuple[str, str]]:
    samplings = {_sampling_text(r["sampling"]) for r in results if r.get("sampling")}
    return [
        ("Model", str(header.get("model", MISSING))),
        ("Model source", str(header.get("model_source", MISSING))),
        ("Weights", _chosen(header, "dtype", str(header.get("dtype", MISSING)))),
        ("Sampler", _chosen(header, "sampler", MISSING)),
        ("Samples per problem", _samples(header)),
        ("Sampling", "; ".join(sorted(samplings)) or MISSING),
        ("Seeds", ", ".join(map(str, header.get("seeds") or [])) or MISSING),
        ("Hardware", str(header.get("hardware", MISSING))),
        ("Code isolation", _isolation(header)),
        ("Job time (training, evaluation, cross-checks; summed over jobs)", _duration(header.get("job_time_s"))),
        ("Disk (results/)", _disk(header)),
        ("Config hash", str(header.get("config_hash", MISSING))),
        ("Commit", str(header.get("commit", MISSING))),
        ("Suite version", str(header.get("suite_version", MISSING))),
        ("Date", str(header.get("date", MISSING))),
    ]


ENGINES = {"torch": "nograd's torch sampler (core/sampler.py)", "vllm": "vLLM (core/vllm_sampler.py)"}


def _chosen(header: dict, setting: str, before: str) -> str:
    """What ran for `setting` (dtype, sampler) and why, as the run chose it (core/machine.py);
    `before` for a summary written before runs recorded their choices."""
    choice = (header.get("choices") or {}).get(setting)
    if choice is None:
        return before
    value = ENGINES.get(choice["value"], choice["value"]) if setting == "sampler" else choice["value"]
    if choice["setting"] != "auto":
        return f"{value}, set in the config"
    if choice["value"] == "auto":
        return f"left to `{setting}: auto`, and {choice['reason']}"
    return f"{value}, chosen by `{setting}: auto`: {choice['reason']}"


def _isolation(header: dict) -> str:
    """How code completions were isolated while graded, as each code job recorded it (evals/sandbox)."""
    sandbox = header.get("sandbox") or {}
    return "; ".join(sandbox.get("jobs") or []) or "no code graded in this run"


def _disk(header: dict) -> str:
    """The run's disk use as collect found it (jobs/collect.py)."""
    peak, collected = header.get("peak_disk_mb"), header.get("results_disk_mb")
    if peak is None or collected is None:
        return MISSING
    return (f"peak {peak:,.1f} MB, {collected:,.1f} MB at collection. The peak is the largest size of results/ "
            "measured by a job (after each training checkpoint, after writing weights for vLLM, and at its end "
            "before removing its work directory) or at collection: a lower bound, since results/ can be larger "
            "between these samples, with jobs running side by side; this report's own files come after both")


def _sampling_text(sampling: dict) -> str:
    return (
        f"temperature {sampling.get('temperature')}, top-p {sampling.get('top_p')}, "
        f"at most {sampling.get('max_new_tokens')} new tokens, seed {sampling.get('seed')}"
    )


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return MISSING
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def _notes(confidence: str) -> list[str]:
    return [
        "Greedy: the share of test problems whose greedy (temperature 0) answer is correct.",
        "pass@k: the chance that at least one of k samples is correct, from n samples per problem "
        "of which c are correct, with the unbiased estimator 1 − C(n−c, k) / C(n, k) of Chen et al. "
        "(2021), averaged over test problems. pass@1 is the mean share of correct samples.",
        f"Intervals: {confidence}, for the crossed design every figure here has (each training seed answers the "
        "same test problems): Student's t on the grand mean with a variance from the two-way analysis of variance "
        "(problems, seeds and their interaction; Miller, \"Adding Error Bars to Evals\"), Satterthwaite's degrees "
        "of freedom, and the seed term made median-unbiased for its few degrees of freedom (reports/intervals.py). "
        "An interval holds how much the figure depends on which problems are in the test set and how much it varies "
        "between training runs; simulated with known truth, it covers 93–97% (python -m benchmarks.calibration). "
        "With one seed it is the interval over problems alone. With several seeds the accuracy table also shows "
        "the per-seed min–max.",
        "Paired differences and claim checks compare methods problem by problem (each method's per-problem "
        "score averaged over its seeds): each method's seeds add their own seed term, except where two methods' "
        "seed k share work (ESSA's seed k starts from SFT's seed k), which are compared seed by seed.",
        "Cost: peak memory is peak RSS on CPU and peak allocated memory on GPU. Forward passes count "
        "sequences; forward-equivalents = forward passes + 2 × backward passes + recompute passes (gradient "
        "checkpointing's second forward). Inference passes per "
        "answer is 1 for a single model and K for an ensemble of K members, whose test-time cost "
        "is K times as large.",
    ]


def render_summary(summary_file: Path, out_dir: Path) -> dict[str, Path]:
    """`render` the results a collect job gathered in `summary_file` (results/summary.json) into
    `out_dir`: all a report needs is in that file, so it renders anywhere nograd is installed,
    without the config or the plugins that produced it."""
    summary = read_json(summary_file)
    return render(summary["results"], summary["header"], out_dir, per_problem=summary.get("per_problem"),
                  histories=summary.get("histories"), crosschecks=summary.get("crosschecks"),
                  missing=summary.get("missing"))


if __name__ == "__main__":  # python -m reports.render results/summary.json results/report
    import sys

    if len(sys.argv) != 3:
        sys.exit("usage: python -m reports.render SUMMARY_JSON OUT_DIR")
    for name in sorted(render_summary(Path(sys.argv[1]), Path(sys.argv[2]))):
        print(Path(sys.argv[2]) / name)
