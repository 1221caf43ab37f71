"""Tables, figures and the rendered report, from the evaluator's result files."""
