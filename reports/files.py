"""The files the report writes: what `reports.render.render` produces and what the Snakefile
declares as the report rule's outputs, named here without importing pandas or matplotlib, so
that parsing the Snakefile stays quick."""

DOCUMENTS = ("report.md", "report.html")
"""The report itself, each rendered from its template (reports/templates/<name>.j2)."""
TABLES = ("accuracy", "paired", "warm_start", "cost_time", "cost_queries", "faults", "stages", "claims",
          "crosscheck")
"""Tables also written as CSV (results/report/table_<name>.csv), for the Snakemake report and MLflow."""
FIGURE_TITLES = {"passk": "pass@k against k", "cost": "Accuracy against training cost", "curves": "Training curves",
                 "memory": "Peak memory", "scaling": "ESSA's cluster claim, modelled"}
"""The report's figures: one of each of the first three per task (`<kind>_<task>`), one `memory`, one `scaling`."""
PER_TASK_FIGURES = ("passk", "cost", "curves")
FORMATS = ("png", "svg")
"""Every figure is saved in each of these formats."""


def figure_stem(kind: str, task: str | None = None) -> str:
    """A figure's file name without its format: `<kind>_<task>` for a per-task kind, else `<kind>`."""
    return f"{kind}_{task}" if kind in PER_TASK_FIGURES else kind


def figure_stems(tasks) -> list[str]:
    """The stems of every figure the report draws for these tasks: each task's, then the others."""
    return ([figure_stem(kind, task) for task in tasks for kind in PER_TASK_FIGURES]
            + [kind for kind in FIGURE_TITLES if kind not in PER_TASK_FIGURES])


def outputs(tasks) -> list[str]:
    """The file names `render` writes for these tasks, whatever the results."""
    names = list(DOCUMENTS) + [f"table_{name}.csv" for name in TABLES]
    return names + [f"{stem}.{fmt}" for stem in figure_stems(tasks) for fmt in FORMATS]
