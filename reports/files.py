"""The files the report writes: what `reports.render.render` produces and what the Snakefile
declares as the report rule's outputs, named here without importing pandas or matplotlib, so
that parsing the Snakefile stays quick."""

TABLES = ("accuracy", "paired", "warm_start", "cost_time", "cost_queries", "faults", "stages", "claims",
          "crosscheck")
"""Tables also written as CSV (results/report/table_<name>.csv), for the Snakemake report and MLflow."""
FIGURE_TITLES = {"passk": "pass@k against k", "cost": "Accuracy against training cost", "curves": "Training curves",
                 "memory": "Peak memory", "scaling": "ESSA's cluster claim, modelled"}
"""The report's figures: one of each of the first three per task (`<kind>_<task>`), one `memory`, one `scaling`."""
PER_TASK_FIGURES = ("passk", "cost", "curves")
FORMATS = ("png", "svg")
"""Every figure is saved in each of these formats."""


def outputs(tasks) -> list[str]:
    """The file names `render` writes for these tasks, whatever the results."""
    names = ["report.md", "report.html"] + [f"table_{name}.csv" for name in TABLES]
    stems = [f"{kind}_{task}" for task in tasks for kind in PER_TASK_FIGURES] + ["memory", "scaling"]
    return names + [f"{stem}.{fmt}" for stem in stems for fmt in FORMATS]
