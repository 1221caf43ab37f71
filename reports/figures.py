"""The report's figures, drawn with matplotlib's object API (a bare `Figure`, no pyplot state) and
saved as PNG and SVG.

Every figure colours a method the same way and names it as its paper does (reports/names.py),
labels its axes with units, and is sized for the width the HTML report shows it at.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from core.outputs import atomic_path
from reports.files import FORMATS
from reports.names import colour, display_name

STYLE = {"font.size": 11, "axes.titlesize": 12, "legend.fontsize": 9.5, "axes.grid": True, "grid.alpha": 0.3}
"""Sizes chosen for a 7-inch figure shown about 700 px wide (a two-panel one about 1000 px)."""
SINGLE, DOUBLE = (7.0, 4.2), (10.5, 4.2)


@contextmanager
def _style():
    with matplotlib.rc_context(STYLE):
        yield


def _new(size: tuple[float, float], panels: int = 1):
    figure = Figure(figsize=size, dpi=150, layout="constrained")
    axes = figure.subplots(1, panels)
    return figure, (list(axes) if panels > 1 else [axes])


def save(figure: Figure, out_dir: Path, stem: str) -> dict[str, Path]:
    """Write `stem.png` and `stem.svg` atomically; return them by file name. The constrained layout
    is computed by the first save and kept for the second (the positions are fractions of the
    figure), rather than computed again: it takes about half of a save's time."""
    written = {}
    for fmt in FORMATS:
        path = Path(out_dir) / f"{stem}.{fmt}"
        with _style(), atomic_path(path) as tmp:
            figure.savefig(tmp, format=fmt)
        figure.set_layout_engine("none")
        written[path.name] = path
    return written


def _message(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, wrap=True, color="0.35")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.grid(False)


def _title(what: str, task: str | None, model: str) -> str:
    where = f" on {task}" if task else ""
    return f"{what}{where} — {model}" if model else f"{what}{where}"


def passk(curves: pd.DataFrame, methods: list[str], task: str, model: str) -> Figure:
    """pass@k (%) against k on a log2 axis, one line per method with its interval as a band.

    `curves`: rows of (method, k, value, low, high) for one task, fractions.
    """
    with _style():
        figure, (ax,) = _new(SINGLE)
        if curves.empty:
            _message(ax, f"No pass@k results for {task}.")
            ax.set_title(_title("pass@k", task, model))
            return figure
        for method in methods:
            curve = curves[curves.method == method].sort_values("k")
            if curve.empty:
                continue
            # Unclipped, so a method at 0% stays visible on the axis instead of half-hidden below it.
            ax.plot(curve.k, 100 * curve.value, marker="o", color=colour(method), label=display_name(method),
                    clip_on=False, zorder=3)
            ax.fill_between(curve.k, 100 * curve.low, 100 * curve.high, color=colour(method), alpha=0.15,
                            linewidth=0)
        ks = sorted(int(k) for k in curves.k.unique())
        ax.set_xscale("log", base=2)
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.xaxis.set_minor_locator(NullLocator())
        # A floor of 1% keeps an all-zero plot from zooming into rounding noise.
        ax.set_ylim(0, max(1.0, 1.08 * 100 * curves.high.max()))
        ax.set_xlabel("k (samples drawn per problem, log scale)")
        ax.set_ylabel("pass@k (%)")
        ax.set_title(_title("pass@k", task, model))
        ax.legend(loc="upper left")
    return figure


def passk_of_result(result: dict, task: str, model: str) -> Figure:
    """One evaluation's pass@k figure (logged with its MLflow run): its own points and intervals."""
    curves = pd.DataFrame([{"method": result["method"], "k": point["k"], "value": point["value"], "low": point["low"],
                            "high": point["high"]} for point in result.get("pass_at_k") or []])
    return passk(curves, [result["method"]], task, model)


def accuracy_vs_cost(points: pd.DataFrame, base: dict | None, task: str, model: str) -> Figure:
    """Greedy accuracy (%) against training queries (forward-equivalents) and training wall-clock,
    both on log axes, one point per method with its interval; the base model, which does not
    train, is the dashed line with its interval as a band.

    `points`: rows of (method, value, low, high, queries, seconds), fractions and means over seeds.
    """
    with _style():
        figure, axes = _new(DOUBLE, 2)
        axis_labels = {"queries": "training queries (forward-equivalents, log scale)",
                       "seconds": "training wall-clock (s, log scale)"}
        for ax, (column, label) in zip(axes, axis_labels.items()):
            shown = points[points[column] > 0] if not points.empty else points
            if shown.empty and base is None:
                _message(ax, f"No trained method has results on {task}.")
                continue
            if base is not None:
                ax.axhline(100 * base["value"], color=colour("base"), linestyle="--", label=display_name("base"))
                ax.axhspan(100 * base["low"], 100 * base["high"], color=colour("base"), alpha=0.1, linewidth=0)
            for row in shown.itertuples():
                ax.errorbar(row._asdict()[column], 100 * row.value,
                            yerr=[[100 * (row.value - row.low)], [100 * (row.high - row.value)]],
                            marker="o", markersize=7, capsize=3, color=colour(row.method),
                            label=display_name(row.method), linestyle="none", clip_on=False, zorder=3)
            if not shown.empty:
                ax.set_xscale("log")
            ax.set_xlabel(label)
            ax.set_ylabel("greedy accuracy (%)")
            highs = [0.0] + list(100 * shown.high) + ([100 * base["high"]] if base else [])
            top = max(1.0, 1.1 * max(highs))
            # A little room below 0, so a method or base line at 0% is not hidden by the axis.
            ax.set_ylim(-0.03 * top, top)
            ax.legend(loc="best")
        figure.suptitle(_title("Greedy accuracy against training cost", task, model))
    return figure


def training_curves(series: list[dict], task: str, model: str) -> Figure:
    """Training reward and loss against training queries (forward-equivalents), one line per
    (method, seed): faint, the logged values; solid, their trailing mean.

    `series`: dicts with method, seed, metric ('reward' or 'loss'), x, y and smooth (arrays).
    """
    with _style():
        figure, axes = _new(DOUBLE, 2)
        for ax, metric, label in zip(axes, ("reward", "loss"),
                                     ("training reward (mean per rollout)",
                                      "training loss (cross-entropy, nats/token)")):
            lines = [s for s in series if s["metric"] == metric]
            if not lines:
                _message(ax, f"No method logged a training {metric} on {task}.")
                ax.set_title(f"{metric.capitalize()}")
                continue
            labelled = set()
            for line in lines:
                c = colour(line["method"])
                ax.plot(line["x"], line["y"], color=c, alpha=0.25, linewidth=0.8)
                name = display_name(line["method"])
                ax.plot(line["x"], line["smooth"], color=c, linewidth=1.8,
                        label=None if name in labelled else name)
                labelled.add(name)
            log = all(np.min(line["x"]) > 0 for line in lines)
            if log:
                ax.set_xscale("log")
            ax.set_xlabel("training queries (forward-equivalents" + (", log scale)" if log else ")"))
            ax.set_ylabel(label)
            ax.set_title(metric.capitalize())
            ax.legend(loc="best")
        figure.suptitle(_title("Training curves", task, model))
    return figure


def peak_memory(memory: pd.DataFrame, methods: list[str], model: str, device: str) -> Figure:
    """Peak memory (GiB) per method, training beside evaluation, the largest over tasks.

    `memory`: rows of (method, train, eval) in MiB; NaN where a method did not train.
    """
    with _style():
        figure, (ax,) = _new(SINGLE)
        shown = [m for m in methods if m in set(memory.method)]
        if not shown:
            _message(ax, "No peak memory recorded.")
            return figure
        rows = memory.set_index("method").loc[shown]
        x = np.arange(len(shown))
        width = 0.38
        for offset, phase, hatch in ((-width / 2, "train", None), (width / 2, "eval", "//")):
            values = rows[phase].to_numpy(dtype=float) / 1024
            bars = ax.bar(x + offset, np.nan_to_num(values), width, color=[colour(m) for m in shown],
                          hatch=hatch, edgecolor="white" if hatch else None,
                          label="training" if phase == "train" else "evaluation")
            for bar, value in zip(bars, values):
                text = "no training" if np.isnan(value) else f"{value:.1f}"
                ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center",
                            va="bottom", fontsize=8.5, xytext=(0, 2), textcoords="offset points")
        ax.set_xticks(x, [display_name(m) for m in shown], rotation=30 if len(shown) > 5 else 0,
                      ha="right" if len(shown) > 5 else "center")
        ax.set_ylabel(f"peak memory (GiB, {device})")
        ax.set_title(_title("Peak memory, largest over tasks", None, model))
        ax.grid(axis="x", visible=False)
        legend = ax.legend(loc="upper left")
        for patch in legend.get_patches():
            patch.set_facecolor("0.6")
    return figure


def cluster_speedup(gpus: list[int], curves: dict[str, list[float]], paper: dict[int, float], note: str) -> Figure:
    """ESSA over GRPO against cluster size, MODELLED (reports/cluster_model.py): one line per model
    size, ESSA's reported points marked; `note`, the model's assumptions, under the title."""
    with _style():
        figure, (ax,) = _new(SINGLE)
        for i, (name, values) in enumerate(curves.items()):
            ax.plot(gpus, values, marker="o", linestyle="--", color=f"C{i}", label=f"{name}, modelled")
        ax.plot(list(paper), list(paper.values()), marker="*", markersize=14, linestyle="none", color="black",
                label="ESSA's paper (Qwen2.5-32B, time to accuracy)", zorder=3)
        ax.set_xscale("log", base=2)
        ax.set_xticks(gpus, [str(g) for g in gpus])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_ylim(0, 1.1 * max([*paper.values()] + [v for values in curves.values() for v in values]))
        ax.set_xlabel("GPUs (log scale)")
        ax.set_ylabel("ESSA's speed-up over GRPO (x)")
        ax.set_title("ESSA over GRPO by cluster size: MODELLED, not measured")
        ax.text(0.01, 0.01, note, transform=ax.transAxes, fontsize=7, color="0.35", wrap=True, va="bottom")
        ax.legend(loc="upper left")
    return figure
