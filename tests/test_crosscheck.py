"""The lm-evaluation-harness cross-check on the tiny model: lm-eval, given nograd's prompts and
verifier, reproduces nograd's greedy completions exactly; an ensemble is not applicable; the task
template, bound to each cross-checked task, reads the prepared split through nograd's prompt and verifier."""

import dataclasses
import json
from pathlib import Path

import pytest

from conftest import tiny_config
from core import config
from core.errors import NogradError
from core.outputs import read_json, write_json
from evals.tasks import TASKS, get_task
from jobs import crosscheck, data, validation
from jobs.crosscheck import TEMPLATE, task_config


def greedy_texts(completions: Path) -> dict[str, str]:
    rows = [json.loads(line) for line in completions.read_text().splitlines()]
    return {r["problem"]: r["text"] for r in rows if r["mode"] == "greedy"}


def test_lm_eval_reproduces_nograds_greedy_completions(workdir):
    artifact = workdir.train()
    evaluation = workdir.evaluate(artifact)
    out = Path("results/crosscheck/mezo/gsm8k/seed0.json")
    result = crosscheck.crosscheck(workdir.config, "mezo", "gsm8k", 0, artifact, Path("results/data/gsm8k"), out)
    assert read_json(out) == json.loads(json.dumps(result))
    problems = data.read_split(Path("results/data/gsm8k/test.jsonl"))
    assert result["applicable"] and result["problems"] == len(problems) == 2
    assert result["prompts_identical"] == 2, "lm-eval's chat rendering gives nograd's prompt, character for character"
    ours = greedy_texts(Path("results/eval/mezo/gsm8k/seed0/completions.jsonl"))
    assert {p["problem"]: p["text"] for p in result["per_problem"]} == ours, "two generation loops, one greedy answer"
    assert result["accuracy"] == evaluation["greedy"]["value"]
    assert result["settings"]["max_gen_toks"] == workdir.config.evaluation.max_new_tokens
    assert result["cost"]["forward_passes"] == 2 and result["cost"]["wall_clock_s"] > 0


def test_math_uses_the_tasks_system_prompt_and_the_size_limit(workdir, tiny_model_dir):
    cfg = validation.validate(tiny_config(tiny_model_dir, base={}))
    data.prepare(cfg, "math", Path("results/data/math"))
    run_cfg = config.for_run(cfg, "base", "math", 0)
    run_cfg = dataclasses.replace(run_cfg, evaluation=dataclasses.replace(run_cfg.evaluation, crosscheck_size=1))
    write_json(Path("base.json"), {"kind": "model", "path": str(tiny_model_dir), "base": str(tiny_model_dir)})
    result = crosscheck.crosscheck(run_cfg, "base", "math", 0, Path("base.json"), Path("results/data/math"),
                                   Path("out.json"))
    assert result["problems"] == 1 and result["prompts_identical"] == 1
    assert result["settings"]["system_instruction"] == get_task("math").system_prompt
    first = data.read_split(Path("results/data/math/test.jsonl"))[0]
    assert [p["problem"] for p in result["per_problem"]] == [first.id], "the first problems of the split"


def test_an_ensemble_is_not_applicable(tmp_path, workdir):
    ensemble = {"kind": "ensemble", "members": [{"kind": "seeds", "terms": [[1, 0.01]]}] * 3, "base": "unused"}
    write_json(tmp_path / "artifact.json", ensemble)
    result = crosscheck.crosscheck(workdir.config, "randopt", "gsm8k", 0, tmp_path / "artifact.json",
                                   Path("results/data/gsm8k"), tmp_path / "out.json")
    assert not result["applicable"] and "ensemble of 3 models" in result["reason"]
    assert read_json(tmp_path / "out.json") == result


CROSSCHECKED = [name for name, task in TASKS.items() if task.crosscheck]


def test_code_is_not_cross_checked(tmp_path, workdir):
    with pytest.raises(NogradError, match=f"no lm-eval cross-check \\(tasks: {', '.join(CROSSCHECKED)}\\)"):
        crosscheck.crosscheck(workdir.config, "mezo", "code", 0, tmp_path / "a.json", tmp_path, tmp_path / "o.json")


def test_the_template_is_one_lm_eval_task_under_its_own_name():
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=str(TEMPLATE.parent), include_defaults=False)
    assert manager.all_tasks == ["nograd"]


@pytest.mark.parametrize("name", CROSSCHECKED)
def test_the_template_reads_the_prepared_split_through_nograds_hooks(name, tmp_path):
    task = get_task(name)
    cfg = task_config(name, tmp_path / "test.jsonl", 7)
    assert cfg["task"] == f"nograd_{name}"
    assert cfg["dataset_path"] == "json" and cfg["num_fewshot"] == 0
    assert cfg["dataset_kwargs"]["data_files"]["test"] == str((tmp_path / "test.jsonl").resolve())
    assert cfg["generation_kwargs"]["max_gen_toks"] == 7 and cfg["generation_kwargs"]["do_sample"] is False
    # Rows as the `data` rule writes them (jobs.data.write_split), from the task's offline test split.
    problems = task.load("test", None)[0]
    right = problems[0]
    wrong = next(p for p in problems if p.answer != right.answer)
    doc = json.loads(right.to_json())
    assert cfg["doc_to_text"](doc) == task.user_message(right)
    assert cfg["process_results"](doc, [right.solution]) == {"exact_match": 1.0}
    assert cfg["process_results"](doc, [wrong.solution]) == {"exact_match": 0.0}


def test_adapter_and_seed_list_artifacts_are_materialised(workdir, tiny_model_dir, tmp_path):
    from peft import LoraConfig, get_peft_model

    from core import models

    base, _ = models.load(tiny_model_dir)
    adapter = get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    adapter.save_pretrained(tmp_path / "adapter")
    kinds = {"adapter": {"kind": "adapter", "path": str(tmp_path / "adapter")},
             "seeds": {"kind": "seeds", "terms": [[3, 0.01]], "mode": "iid"}}
    for kind, spec in kinds.items():
        write_json(tmp_path / f"{kind}.json", {**spec, "base": str(tiny_model_dir)})
        result = crosscheck.crosscheck(workdir.config, kind, "gsm8k", 0, tmp_path / f"{kind}.json",
                                       Path("results/data/gsm8k"), tmp_path / f"{kind}.out.json")
        assert result["applicable"] and result["problems"] == 2 and result["prompts_identical"] == 2, kind


def test_a_model_without_chat_template_gets_nograds_plain_prompt(workdir, tiny_model_dir, tmp_path):
    import shutil

    plain = tmp_path / "plain"
    shutil.copytree(tiny_model_dir, plain)
    (plain / "chat_template.jinja").unlink()
    write_json(tmp_path / "plain.json", {"kind": "model", "path": str(plain), "base": str(plain)})
    result = crosscheck.crosscheck(workdir.config, "base", "gsm8k", 0, tmp_path / "plain.json",
                                   Path("results/data/gsm8k"), tmp_path / "out.json")
    assert not result["settings"]["chat_template"] and result["prompts_identical"] == 2
