"""The job layer: the CLI and every job of the DAG, above everything else."""
