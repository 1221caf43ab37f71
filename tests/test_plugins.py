"""A method and a task added as a newcomer adds them: one file each, registered through the
registries alone, then run through the tiny DAG to a report. Here both live in one plugin file
outside the repository (NOGRAD_PLUGINS, core/plugins.py), so that nothing in the checkout is
touched; a file in methods/ or evals/tasks/ registers the same way."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest
import yaml

from conftest import tiny_config
from core import plugins
from core.errors import NogradError
from core.outputs import read_json
from test_pipeline import snakemake

PLUGIN = textwrap.dedent('''
    """A throwaway task (say a letter) and a throwaway method (keep the better of two seeded nudges)."""

    from dataclasses import dataclass

    from evals.tasks import register_task
    from core.task import Problem, Source, Task
    from methods import register


    @register_task
    class Letters(Task):
        name = "letters"

        def load(self, split, data_dir):
            count = 8 if split == "train" else 3
            problems = [Problem(id=f"letters/{split}/{i}", question=f"Say the letter {c}.", answer=c, solution=c)
                        for i, c in enumerate("abcdefgh"[:count])]
            return problems, Source("package", "nograd-test-plugin", note="eight letters")

        def user_message(self, problem):
            return problem.question

        def extract(self, completion):
            return completion.strip()[:1] or None

        def is_correct(self, problem, completion):
            return completion.strip().startswith(problem.answer)

        def has_format(self, completion):
            return bool(completion.strip())


    @dataclass
    class NudgeConfig:
        """Two seeded nudges of the weights; the one with the higher reward is kept."""

        sigma: float = 1e-3
        """Scale of each nudge."""


    BIBTEX = """
    @misc{nudge2026,
      title = {Nudge: a throwaway method},
      year = {2026}
    }"""


    @register("nudge", config=NudgeConfig, display="Nudge", order=1000, outputs="seeds", bibtex=BIBTEX,
              paper="A test's throwaway method", test_settings={"sigma": 0.01})
    def train(config, run):
        from core.perturb import perturbed, trainable

        batch = run.batch(2)
        rewards = {}
        for _ in run.steps(2):
            seed = int(run.rng.integers(2**31))
            with perturbed(trainable(run.model), [(seed, config.sigma)]):
                rewards[seed] = run.rollout(batch)[1].mean()
            run.log(reward=rewards[seed])
        best = max(rewards, key=rewards.get)
        return run.seeds_artifact([(best, config.sigma)])
''')


def test_a_method_and_a_task_from_one_plugin_file_run_through_the_dag(tmp_path, tiny_model_dir, monkeypatch):
    (tmp_path / "nudge.py").write_text(PLUGIN)
    monkeypatch.setenv(plugins.VARIABLE, str(tmp_path / "nudge.py"))
    cfg = {**tiny_config(tiny_model_dir, base={}, nudge={}), "tasks": {"letters": {}, "gsm8k": {"test_size": 2}}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    result = snakemake(tmp_path, "--configfile", str(tmp_path / "config.yaml"), "--cores", "2")
    assert result.returncode == 0, result.stderr[-4000:]

    summary = read_json(tmp_path / "results" / "summary.json")
    assert {(r["method"], r["task"]) for r in summary["results"]} == {
        (m, t) for m in ("base", "nudge") for t in ("letters", "gsm8k")}
    nudged = next(r for r in summary["results"] if r["method"] == "nudge" and r["task"] == "letters")
    assert nudged["problems"] == 3 and nudged["cost"]["train"]["sequences_generated"] == 2 * 2
    report = (tmp_path / "results" / "report" / "report.md").read_text()
    assert re.search(r"^\| letters +\| Nudge +\|", report, re.MULTILINE), "the plugin method and task are in the tables"
    assert "@misc{nudge2026," in report, "the plugin method's BibTeX is cited"
    assert "eight letters" in report, "the plugin task's source is recorded"

    # The results alone render the report again, where the plugin is not installed, and no registry is read.
    monkeypatch.delenv(plugins.VARIABLE)
    again = tmp_path / "again"
    code = ("import runpy, sys; sys.argv = ['render', 'results/summary.json', 'again']; "
            "runpy.run_module('reports.render', run_name='__main__'); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('methods', 'jobs', 'evals')))")
    rendered = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                              env={k: v for k, v in os.environ.items() if k != plugins.VARIABLE})
    assert rendered.returncode == 0, rendered.stderr[-2000:]
    assert rendered.stdout.splitlines()[-1] == "['evals', 'evals.passk']", "a report reads no method, task or job"
    assert (again / "report.md").read_text() == report, "the same report, without the plugin that produced it"


def test_a_missing_or_failing_plugin_file_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.setenv(plugins.VARIABLE, str(tmp_path / "absent.py"))
    with pytest.raises(NogradError, match=f"{plugins.VARIABLE}: plugin file .*absent.py does not exist"):
        plugins.load()
    (tmp_path / "twice.py").write_text("from methods import register\n"
                                       "register('mezo', config=object, display='x', order=0, outputs='model')(len)\n")
    monkeypatch.setenv(plugins.VARIABLE, str(tmp_path / "twice.py"))
    with pytest.raises(NogradError, match="plugin file .*twice.py failed to load: ValueError: method 'mezo' is "
                                          "registered twice"):
        plugins.load()
