"""After a run of the DAG on the tiny model, `snakemake --report` builds the self-contained HTML with
the report rule's tables and figures, their captions and the workflow description; the run's
cross-check sits in the summary beside nograd's own greedy figure."""

import subprocess
import sys
from pathlib import Path

import yaml

from conftest import tiny_config
from core.outputs import read_json
from reports.files import outputs

REPO = Path(__file__).resolve().parent.parent


def snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
         "--workflow-profile", str(REPO / "profiles" / "default"), "--configfile", str(workdir / "config.yaml"),
         *args],
        capture_output=True, text=True, timeout=1200,
    )


def test_snakemake_report_after_a_run(tmp_path, tiny_model_dir):
    cfg = {**tiny_config(tiny_model_dir, base={}), "tasks": {"gsm8k": {"train_size": 4, "test_size": 2}}}
    cfg["evaluation"]["crosscheck"] = True
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    run = snakemake(tmp_path, "--cores", "2")
    assert run.returncode == 0, run.stderr[-4000:]
    results = tmp_path / "results"
    assert all((results / "report" / name).is_file() for name in outputs(["gsm8k"]))

    summary = read_json(results / "summary.json")
    (check,) = summary["crosschecks"]
    assert check["applicable"] and check["problems"] == 2
    assert check["same_text"] == 2, "lm-eval's greedy completions are nograd's, character for character"
    assert (results / "benchmarks" / "crosscheck" / "base" / "gsm8k" / "seed0.tsv").exists()
    assert "| gsm8k  | Base model |" in (results / "report" / "report.md").read_text()

    html = results / "report" / "snakemake.html"
    built = snakemake(tmp_path, "--report", str(html))
    assert built.returncode == 0, built.stderr[-4000:]
    text = html.read_text()
    assert "nograd: gradient-free LLM post-training against RL" in text, "the workflow description"
    for name in ("report.html", "passk_gsm8k.png", "cost_gsm8k.png", "curves_gsm8k.png", "memory.png",
                 "table_claims.csv", "table_crosscheck.csv"):
        assert name in text, name
    # docutils writes "@" as "&#64;".
    for caption in ("(%) against k (log axis)", "Greedy accuracy (%) of each trained method", "One row per claim"):
        assert caption in text, caption
    assert "crosscheck" in text and "collect" in text, "the rules' provenance"
