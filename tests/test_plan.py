"""`nograd plan`: a row per job kind with the counts each method's `queries` foresees (held to the
meters of real runs in tests/test_methods.py), a total, and device-hours from the throughput given
or measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from conftest import tiny_config
from core.contract import QueryCounts
from core.outputs import write_json
from jobs import plan, validation
from methods import METHODS
from reports import power

REPO = Path(__file__).resolve().parent.parent


def cells(text: str) -> dict[tuple[str, str, str], list[str]]:
    """The plan's job table rows by (job, method, task)."""
    jobs = text.split("Power of the claim checks")[0]
    rows = [line.strip("|").split(" | ") for line in jobs.splitlines() if line.startswith("| ")]
    return {tuple(c.strip() for c in row[:3]): [c.strip() for c in row[3:]] for row in rows[1:]}


def test_the_plan_counts_every_job_and_adds_them_up(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)
    methods = {"base": {}, "mezo": METHODS["mezo"].test_settings, "randopt": METHODS["randopt"].test_settings,
               "corp": METHODS["corp"].test_settings}
    raw = {**tiny_config(tiny_model_dir, **methods), "seeds": [0, 1]}
    cfg = validation.validate(raw)
    text = plan.render(cfg, 1000.0, "given")
    table = cells(text)
    assert len(table) == 2 * len(methods) * len(cfg.tasks) + 1, "a train and an evaluate row per method and task"
    # MeZO on gsm8k, 8 training problems: 2 held out, batch 2, 3 steps, and the held-out curve at 0 and 3.
    assert table["train", "mezo", "gsm8k"][:5] == ["2", "0", "0", str(2 * 2 * 3 + 2 * 2), "0"]
    # RandOpt's vote of top_k = 2 members: each evaluated problem costs two models' answers.
    samples = cfg.evaluation.samples
    assert table["evaluate", "randopt", "gsm8k"][1] == str(2 * 2 * (1 + samples))
    assert table["evaluate", "mezo", "gsm8k"][1] == str(2 * (1 + samples))
    assert table["train", "corp", "gsm8k"][1].startswith("<= "), "CoRP's Stage 2 may stop early: a bound"
    total = table["**total**", "", ""]
    rows = [row for key, row in table.items() if key[0] != "**total**"]
    assert total[0] == str(sum(int(row[0]) for row in rows)) == str(2 * 2 * len(methods) * len(cfg.tasks))
    assert total[1] == "<= " + f"{sum(int(row[0]) * int(row[1].removeprefix('<= ')) for row in rows):,}"
    hours = sum(float(row[-1].removeprefix("<= ")) for row in rows)
    assert abs(float(total[-1].removeprefix("<= ")) - hours) < 0.05 + 0.005 * len(rows)
    assert "Device-hours at 1,000.0 tokens/s (given)" in text


def power_rows(text: str) -> dict[str, list[str]]:
    """The power table's rows by claim."""
    table = text.split("Power of the claim checks")[1]
    rows = [line.strip("|").split(" | ") for line in table.splitlines() if line.startswith("| ")][1:]
    return {row[0].strip(): [c.strip() for c in row[1:]] for row in rows}


def test_the_plan_says_which_claims_its_design_can_decide(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)
    methods = {m: METHODS[m].test_settings for m in ("base", "grpo", "essam", "mezo", "sazo")}
    cfg = validation.validate({**tiny_config(tiny_model_dir, **methods), "seeds": [0, 1, 2]})
    rows = power_rows(plan.render(cfg, None, ""))
    assert set(rows) == {"essam_parity", "essam_memory", "sazo_queries"}, "only what the config's methods can test"
    parity = rows["essam_parity"]
    assert parity[1] == "2 problems x 3 seeds" and parity[5] == "no" and parity[3] == "1.00 pp"
    assert "of the task's problems" in parity[6], "tiny data: not even all of GSM8K decides it"
    assert rows["sazo_queries"][1] == "9 paired runs" and rows["sazo_queries"][5] == "yes", "7 runs clear 0.05 / 3"
    assert "0.05 / 3 claims" in plan.render(cfg, None, "")
    big = power.Assumptions(grpo_gain=0.5, seed_spread=0.0, flip_rate=0.0, disagreement=0.01)
    decided = power_rows(plan.render(cfg, None, "", big))
    assert decided["essam_parity"][5] == "no", "two test problems cannot decide even a 50-point gain"


def test_a_job_that_would_stop_is_named_and_left_out_of_the_total(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = validation.validate(tiny_config(tiny_model_dir, mezo=METHODS["mezo"].test_settings,
                                      randopt={**METHODS["randopt"].test_settings, "support_size": 5}))
    text = plan.render(cfg, None, "")
    table = cells(text)
    assert table["train", "randopt", "code"][1:5] == ["would stop"] * 4
    assert table["train", "randopt", "gsm8k"][1] == str(3 * 5), "population x support set"
    assert ("Would stop before training, and is not in the total: randopt on code: the support set needs training "
            "problems 0..4, but the task has 4; lower it or raise the task's train_size") in text
    assert table["**total**", "", ""][0] == str(2 * 2 * 3 - 2)


def test_cross_checked_tasks_add_lm_evals_greedy_answers_of_single_models(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)
    raw = tiny_config(tiny_model_dir, mezo=METHODS["mezo"].test_settings, randopt=METHODS["randopt"].test_settings)
    raw["evaluation"].update(crosscheck=True, crosscheck_size=1)
    table = cells(plan.render(validation.validate(raw), None, ""))
    checked = {(method, task) for job, method, task in table if job == "crosscheck"}
    assert checked == {("mezo", task) for task in ("gsm8k", "math")}, "no vote of an ensemble, no code task"
    assert table["crosscheck", "mezo", "gsm8k"][1] == "1"


def test_device_hours_are_forward_equivalents_of_a_rollouts_length_at_the_throughput():
    counts = QueryCounts(sequences_generated=10, forward_passes=30, backward_passes=10, recompute_passes=10,
                     heldout_forward_passes=5)
    assert plan._equivalents(counts) == 30 + 10 + 2 * 10 + 5


def test_the_cli_takes_the_sampler_benchmarks_throughput_or_says_it_has_none(tmp_path, tiny_model_dir):
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(tiny_config(tiny_model_dir)))
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "jobs.cli", "plan", "--configfile", "config.yaml", *args],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    plain = run()
    assert plain.returncode == 0, plain.stderr
    assert "No device-hours: give --tokens-per-second" in plain.stdout
    write_json(tmp_path / plan.SAMPLER_BENCHMARK, {"setting": "64 samples on a test machine",
                                                   "tokens_per_second": {"nograd sampler": 250.0}})
    measured = run()
    assert "Device-hours at 250.0 tokens/s (results/speed/sampler.json (64 samples on a test machine))" \
        in measured.stdout
    assert cells(measured.stdout).keys() == cells(plain.stdout).keys()
    assert "Assumptions, assumed (reports/power.py defaults)" in plain.stdout
    summary = {"per_problem": [{"method": m, "task": "gsm8k", "seed": s, "n": 0,
                                "problems": {f"p{i}": [int(m == "grpo" or i < 5 + s), 0] for i in range(20)}}
                               for m in ("base", "grpo", "essam") for s in (0, 1)]}
    write_json(tmp_path / "summary.json", summary)
    given = run("--from", "summary.json", "--grpo-gain", "0.2", "--seed-spread", "0.02")
    assert "measured from the summary given" in given.stdout, given.stderr
    assert "given: seed_spread, grpo_gain" in given.stdout or "given: grpo_gain, seed_spread" in given.stdout
    assert "seed-to-seed spread 2.0 pp, GRPO's gain over the base model 20.0 pp" in given.stdout
    missing = run("--from", "nowhere.json")
    assert missing.returncode == 2 and "--from: no summary at nowhere.json" in missing.stderr
    refused = run("--tokens-per-second", "0")
    assert refused.returncode == 2 and refused.stderr.strip() == \
        "nograd plan: error: --tokens-per-second must be positive, not 0.0"
    assert not (tmp_path / "results" / "data").exists(), "the plan prepares data outside the DAG's outputs"
    assert json.loads((tmp_path / plan.SAMPLER_BENCHMARK).read_text())["tokens_per_second"]["nograd sampler"] == 250.0


def test_the_gpu_day_config_decides_what_its_comments_say():
    """config/gpu-day.yaml on GSM8K's 1,319 test problems: SAZO's queries and ESSAM's memory are
    decidable, ESSAM's parity is not, under the planner's stated assumptions."""
    cfg = validation.load(REPO / "config" / "gpu-day.yaml")
    rows = {row["claim"]: row for row in power.table(cfg, {"gsm8k": 1319}, {"gsm8k": 1319}, power.Assumptions())}
    assert set(rows) == {"sazo_queries", "essam_parity", "essam_memory"}
    assert rows["sazo_queries"]["decidable"] == "yes" and rows["sazo_queries"]["design"] == "8 paired runs"
    assert rows["essam_memory"]["decidable"].startswith("yes")
    assert rows["essam_parity"]["decidable"] == "no" and rows["essam_parity"]["design"] == "1,319 problems x 8 seeds"
