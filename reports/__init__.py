"""Tables, figures and the rendered report, from the evaluator's result files."""

from reports.render import METHOD_NAMES, render

__all__ = ["METHOD_NAMES", "render"]
