"""Render the benchmark report (Markdown, self-contained HTML, pass@k figures) from results.

Input is one dict per (method, task, seed), as the evaluator writes it to metrics.json, and a
header describing the run. Seeds are averaged; any cell without results reads "—", so a
partial experiment still renders.
"""

from __future__ import annotations

import base64
from pathlib import Path

import jinja2
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from evals.passk import DEFAULT_BOOTSTRAP_SAMPLES, DEFAULT_CONFIDENCE
from harness.outputs import atomic_path

METHOD_NAMES = {
    "base": "Base model",
    "mezo": "MeZO",
    "grpo": "GRPO",
    "fgrpo": "F-GRPO",
    "essa": "ESSA",
    "essam": "ESSAM",
    "essam_f": "ESSAM-F",
    "randopt": "RandOpt",
    "corp": "CoRP",
    "sazo": "SAZO",
}
"""Method names as their papers write them, in the order the report lists methods."""

MISSING = "—"

# (column, cost phase or None for a top-level field, key, format). The counters are those of
# training: evaluation runs the same protocol for every method, times its inference passes.
COST_COLUMNS = [
    ("Peak memory, train (MB)", "train", "peak_memory_mb", "{:,.0f}"),
    ("Peak memory, eval (MB)", "eval", "peak_memory_mb", "{:,.0f}"),
    ("Wall-clock, train (s)", "train", "wall_clock_s", "{:,.1f}"),
    ("Wall-clock, eval (s)", "eval", "wall_clock_s", "{:,.1f}"),
    ("Forward passes", "train", "forward_passes", "{:,.0f}"),
    ("Backward passes", "train", "backward_passes", "{:,.0f}"),
    ("Tokens generated", "train", "tokens_generated", "{:,.0f}"),
    ("Reward calls", "train", "reward_calls", "{:,.0f}"),
    ("Forward-equivalents", "train", "forward_equivalents", "{:,.0f}"),
    ("Inference passes / answer", None, "inference_passes", "{:,.0f}"),
]

_TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
    autoescape=lambda name: name is not None and name.endswith(".html.j2"),
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
    undefined=jinja2.StrictUndefined,
)


def display_name(method: str) -> str:
    """A method's name as its paper writes it; an unknown method keeps its own name."""
    return METHOD_NAMES.get(method, method)


def render(results: list[dict], header: dict, out_dir: Path) -> dict[str, Path]:
    """Write report.md, report.html and passk_<task>.png/.svg into `out_dir`.

    Returns the written paths keyed by file name. Each file is written under a temporary
    name and then renamed, so an interrupted render never leaves a file that looks finished.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    methods = _ordered_methods(results)
    header_tasks = list(header.get("tasks", {}))
    tasks = header_tasks + sorted({r["task"] for r in results} - set(header_tasks))
    scores = _score_summary(results)
    written: dict[str, Path] = {}

    figures = []
    for task in tasks:
        curves = scores[(scores.task == task) & (scores.metric == "pass@k")]
        if curves.empty:
            figures.append({"task": task, "png": None})
            continue
        figure = _passk_figure(curves, methods, task, header.get("model", ""))
        for fmt in ("png", "svg"):
            name = f"passk_{task}.{fmt}"
            with atomic_path(out_dir / name) as tmp:
                figure.savefig(tmp, format=fmt)
            written[name] = out_dir / name
        png = written[f"passk_{task}.png"]
        figures.append({
            "task": task,
            "png": png.name,
            "svg": f"passk_{task}.svg",
            "base64": base64.b64encode(png.read_bytes()).decode("ascii"),
        })

    # The evaluator records how its intervals were made; older results fall back to the defaults.
    intervals = next((r["intervals"] for r in results if r.get("intervals")), {})
    confidence = f"{intervals.get('confidence', DEFAULT_CONFIDENCE):.0%}"
    resamples = intervals.get("bootstrap_samples", DEFAULT_BOOTSTRAP_SAMPLES)
    context = {
        "title": f"nograd report: {header.get('name', MISSING)}",
        "scale": _scale_line(header),
        "facts": _facts(header, results),
        "tables": [
            _table("Tasks", "Test-split hash: content hash of the test problems scored.",
                   _task_table(header, results, tasks)),
            _table("Accuracy (%)",
                   f"Value [{confidence} interval], in percent. With several seeds: the mean over "
                   "seeds, then the min–max of the per-seed values.",
                   _accuracy_table(scores, methods, tasks)),
            _table("Cost", "Means over seeds. Counters are for training; \"—\" where the method "
                   "does not train or where results are missing.",
                   _cost_table(results, methods, tasks)),
        ],
        "figures": figures,
        "notes": _notes(confidence, resamples),
    }
    for name in ("report.md", "report.html"):
        text = _TEMPLATES.get_template(f"{name}.j2").render(**context)
        with atomic_path(out_dir / name) as tmp:
            tmp.write_text(text, encoding="utf-8")
        written[name] = out_dir / name
    return written


def passk_figure(results: list[dict], task: str, model: str = "") -> Figure:
    """The pass@k figure of one task from result dicts (each evaluation run logs its own)."""
    scores = _score_summary(results)
    curves = scores[(scores.task == task) & (scores.metric == "pass@k")]
    return _passk_figure(curves, _ordered_methods(results), task, model)


def _ordered_methods(results: list[dict]) -> list[str]:
    order = {method: index for index, method in enumerate(METHOD_NAMES)}
    return sorted({r["method"] for r in results}, key=lambda m: (order.get(m, len(order)), m))


def _score_summary(results: list[dict]) -> pd.DataFrame:
    """One row per (method, task, metric, k): means over seeds and the per-seed spread.

    metric is "greedy" (k = 0) or "pass@k". A seed without a metric simply does not count.
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
    return (
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


def _interval(point: dict) -> dict:
    return {name: point[name] for name in ("value", "low", "high")}


def _accuracy_table(scores: pd.DataFrame, methods: list[str], tasks: list[str]) -> pd.DataFrame:
    """Task x method: seeds, greedy accuracy, pass@1 and pass@k at the largest k run."""
    by_key = scores.set_index(["method", "task", "metric", "k"])
    largest_k = scores[scores.metric == "pass@k"].groupby(["method", "task"]).k.max().to_dict()
    distinct = set(largest_k.values())
    show_largest = bool(distinct - {1})
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
            if show_largest:
                k = largest_k.get((method, task))
                text = MISSING if k is None else cell(method, task, "pass@k", k)
                row[largest_title] = text if len(distinct) == 1 or k is None else f"{text} (k={k})"
            rows.append(row)
    columns = ["Task", "Method", "Seeds", "Greedy", "pass@1"]
    columns += [largest_title] if show_largest else []
    return pd.DataFrame(rows, columns=columns)


def _cost_table(results: list[dict], methods: list[str], tasks: list[str]) -> pd.DataFrame:
    """Task x method: memory, wall-clock and training counters, means over seeds."""
    rows = []
    for r in results:
        cost = r.get("cost") or {}
        # A run that did no training (base) has no training cost, not a cost of zero.
        trained = any((cost.get("train") or {}).values())
        row = {"method": r["method"], "task": r["task"]}
        for column, phase, key, _ in COST_COLUMNS:
            if phase is None:
                row[column] = r.get(key)
            elif phase == "eval" or trained:
                row[column] = (cost.get(phase) or {}).get(key)
        rows.append(row)
    columns = ["method", "task"] + [c[0] for c in COST_COLUMNS]
    means = (
        pd.DataFrame(rows, columns=columns)
        .astype({c[0]: float for c in COST_COLUMNS})
        .groupby(["method", "task"])
        .mean()
    )

    table = []
    for task in tasks:
        for method in methods:
            row = {"Task": task, "Method": display_name(method)}
            for column, _, _, fmt in COST_COLUMNS:
                value = means[column].get((method, task))
                row[column] = MISSING if value is None or pd.isna(value) else fmt.format(value)
            table.append(row)
    return pd.DataFrame(table, columns=["Task", "Method"] + [c[0] for c in COST_COLUMNS])


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


def _table(title: str, caption: str, frame: pd.DataFrame) -> dict:
    # Every table leads with its two text columns; the HTML stylesheet aligns the same way.
    # (tabulate cannot align a table without rows.)
    align = ["left"] * 2 + ["right"] * (len(frame.columns) - 2) if len(frame) else None
    return {
        "title": title,
        "caption": caption,
        "markdown": frame.to_markdown(index=False, colalign=align, disable_numparse=True),
        "html": frame.to_html(index=False, border=0, escape=True),
    }


def _passk_figure(curves: pd.DataFrame, methods: list[str], task: str, model: str) -> Figure:
    """pass@k (%) against k on a log2 axis, one line per method with its interval as a band."""
    # A bare Figure renders through Agg without pyplot: no GUI backend, no global figure state.
    figure = Figure(figsize=(7, 4.2), dpi=150, layout="constrained")
    ax = figure.subplots()
    for index, method in enumerate(methods):
        curve = curves[curves.method == method].sort_values("k")
        if curve.empty:
            continue
        # Colour by position among all methods, so a method keeps its colour across tasks.
        colour = f"C{index % 10}"
        # Unclipped, so a method at 0% stays visible on the axis instead of half-hidden below it.
        ax.plot(curve.k, 100 * curve.value, marker="o", color=colour, label=display_name(method),
                clip_on=False, zorder=3)
        ax.fill_between(
            curve.k, 100 * curve.low, 100 * curve.high, color=colour, alpha=0.15, linewidth=0
        )
    ks = sorted(int(k) for k in curves.k.unique())
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.xaxis.set_minor_locator(NullLocator())
    # A floor of 1% keeps an all-zero plot from zooming into rounding noise.
    ax.set_ylim(0, max(1.0, 1.08 * 100 * curves.high.max()))
    ax.set_xlabel("k (samples drawn per problem, log scale)")
    ax.set_ylabel("pass@k (%)")
    ax.set_title(f"pass@k on {task} — {model}" if model else f"pass@k on {task}")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    return figure


def _scale_line(header: dict) -> str:
    """One sentence with the run's scale, so a small run is never read as a paper-scale one."""
    tasks = header.get("tasks", {})
    sizes = ", ".join(f"{task} {info.get('test', '?')}" for task, info in tasks.items())
    return (
        f"Scale: config '{header.get('name', MISSING)}', model {header.get('model', MISSING)}, "
        f"test problems per task: {sizes or MISSING}, "
        f"{header.get('samples_per_problem', MISSING)} samples per problem, "
        f"on {header.get('hardware', MISSING)}, "
        f"{_duration(header.get('total_wall_clock_s'))} in total."
    )


def _facts(header: dict, results: list[dict]) -> list[tuple[str, str]]:
    samplings = {_sampling_text(r["sampling"]) for r in results if r.get("sampling")}
    return [
        ("Model", str(header.get("model", MISSING))),
        ("Model source", str(header.get("model_source", MISSING))),
        ("Samples per problem", str(header.get("samples_per_problem", MISSING))),
        ("Sampling", "; ".join(sorted(samplings)) or MISSING),
        ("Hardware", str(header.get("hardware", MISSING))),
        ("Total wall-clock", _duration(header.get("total_wall_clock_s"))),
        ("Config hash", str(header.get("config_hash", MISSING))),
        ("Commit", str(header.get("commit", MISSING))),
        ("Date", str(header.get("date", MISSING))),
    ]


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


def _notes(confidence: str, resamples: int) -> list[str]:
    return [
        "Greedy: the share of test problems whose greedy (temperature 0) answer is correct.",
        "pass@k: the chance that at least one of k samples is correct, from n samples per problem "
        "of which c are correct, with the unbiased estimator 1 − C(n−c, k) / C(n, k) of Chen et al. "
        "(2021), averaged over test problems. pass@1 is the mean share of correct samples.",
        f"Intervals: {confidence} percentile bootstrap over test problems ({resamples} "
        "resamples of the problems, with replacement): they measure how much the figure depends on "
        "which problems are in the test set, not the variation between training seeds. With several "
        "seeds the table shows the mean of the per-seed values and bounds, then the per-seed min–max.",
        "Cost: peak memory is peak RSS on CPU and peak allocated memory on GPU. Forward passes count "
        "sequences; forward-equivalents = forward passes + 2 × backward passes. Inference passes per "
        "answer is 1 for a single model and K for an ensemble of K members, whose test-time cost "
        "is K times as large.",
    ]
