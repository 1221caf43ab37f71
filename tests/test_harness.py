"""The harness on its own: config validation, the generated schema, atomic outputs and meters."""

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from core import config, meters, models
from core.errors import NogradError
from core.outputs import WORK, atomic_dir, finished, work_dir, write_json
from evals.tasks import TASKS
from jobs import validation
from methods import METHODS, in_order

REPO = Path(__file__).resolve().parent.parent

MINIMAL = {"name": "t", "model": "m", "seeds": [0], "tasks": {"gsm8k": {}}, "methods": {"base": {}}}


def test_committed_schema_is_generated_from_the_dataclasses():
    assert validation.SCHEMA_PATH.read_text() == validation.schema_yaml(), "run: make configs"


def test_committed_paper_config_is_generated_from_the_defaults():
    assert validation.PAPER_PATH.read_text() == validation.paper_config_yaml(), "run: make configs"
    paper = validation.load(validation.PAPER_PATH)
    assert list(paper.methods) == in_order() and set(paper.tasks) == set(TASKS)
    for name, method in METHODS.items():
        assert set(validation.field_docs(method.config)) == {f.name for f in dataclasses.fields(method.config)}
        assert paper.methods[name] == method.config(), f"paper.yaml {name} is not at its dataclass's defaults"
    assert all(paper.tasks[name] == config.TaskConfig() for name in TASKS), "paper scale runs every split whole"


def test_every_method_record_is_complete():
    for name, method in METHODS.items():
        assert method.display and set(method.outputs) <= {"model", "adapter", "seeds", "ensemble"}, name
        method.config(**method.test_settings)  # the test settings are the config's own keys
        if name != "base":
            assert method.paper and method.bibtex.startswith("@") and method.bibtex.endswith("}"), name
            assert method.bibtex.count("{") == method.bibtex.count("}"), f"{name}: unbalanced BibTeX braces"


@pytest.mark.parametrize(
    "change, message",
    [
        ({"methods": {"foo": {}}}, f"unknown key 'foo' in methods (valid: {', '.join(sorted(METHODS))})"),
        ({"tasks": {"gsm9k": {}}}, f"unknown key 'gsm9k' in tasks (valid: {', '.join(sorted(TASKS))})"),
        ({"methods": {"mezo": {"lrr": 1}}}, "unknown key 'lrr' in methods.mezo (valid: batch_size, eps"),
        ({"methods": {"mezo": {"lr": "fast"}}}, "methods.mezo.lr: 'fast' is not of type 'number'"),
        ({"methods": {"mezo": {"objective": "kl"}}}, "methods.mezo.objective: 'kl' is not one of"),
        ({"evalution": {}}, "unknown key 'evalution' in the top level (valid: data_dir, device"),
        ({"seeds": []}, "seeds: [] should be non-empty"),
        ({"evaluation": {"samples_by_method": {"bse": 64}}}, "evaluation.samples_by_method: 'bse' is not one of"),
        ({"evaluation": {"samples_by_method": {"mezo": 64}}},
         "evaluation.samples_by_method names 'mezo', which this config does not run (methods: base)"),
        ({"evaluation": {"samples_by_method": {"base": 0}}}, "evaluation.samples_by_method.base: 0 is less than"),
        ({"sandbox": {"isolation": "partial"}}, "sandbox.isolation: 'partial' is not one of ['full', 'none']"),
    ],
)
def test_bad_config_fails_with_one_line_naming_key_and_choices(change, message):
    with pytest.raises(NogradError) as error:
        validation.validate({**MINIMAL, **change})
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_yaml_exponents_are_read_as_numbers():
    cfg = validation.validate({**MINIMAL, "methods": {"mezo": {"lr": "1e-6"}}})
    assert cfg.methods["mezo"].lr == 1e-6


def test_run_config_holds_only_its_method_and_task():
    cfg = validation.load(config.REPO / "config" / "config.yaml")
    run = config.for_run(cfg, "mezo", "math", 0)
    assert list(run.methods) == ["mezo"] and list(run.tasks) == ["math"] and run.seeds == [0]
    assert config.config_hash(run) != config.config_hash(config.for_run(cfg, "base", "math", 0))
    assert validation.validate(config.to_dict(run)) == run


def test_a_method_job_sees_its_own_number_of_evaluation_samples():
    raw = {**MINIMAL, "methods": {"base": {}, "mezo": {}},
           "evaluation": {"samples": 8, "samples_by_method": {"base": 32}}}
    cfg = validation.validate(raw)
    assert config.for_run(cfg, "base", "gsm8k", 0).evaluation.samples == 32
    assert config.for_run(cfg, "mezo", "gsm8k", 0).evaluation.samples == 8
    # Changing base's samples leaves mezo's jobs (and their hash) as they were.
    more = validation.validate({**raw, "evaluation": {"samples": 8, "samples_by_method": {"base": 256}}})
    assert config.config_hash(config.for_run(more, "mezo", "gsm8k", 0)) == \
        config.config_hash(config.for_run(cfg, "mezo", "gsm8k", 0))


def test_atomic_outputs_leave_nothing_when_interrupted(tmp_path):
    target = tmp_path / "out" / "model"
    with pytest.raises(RuntimeError):
        with atomic_dir(target) as tmp:
            (tmp / "weights").write_text("half")
            raise RuntimeError("killed")
    assert not target.exists()
    assert list((tmp_path / "out").iterdir()) == []
    write_json(tmp_path / "a.json", {"x": 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "out"], "no temporary file left behind"


def test_a_write_killed_as_its_file_appears_leaves_only_the_file(tmp_path):
    """A killed DAG's first kill lands as a job's output appears (tests/test_killed.py): here the
    process dies right after the rename, before any clean-up of its own could run."""
    script = ("import os, sys\nfrom core import outputs\nrename = os.replace\n"
              "os.replace = lambda a, b: (rename(a, b), os._exit(9))\n"
              "outputs.write_json(sys.argv[1], {'x': 1})")
    died = subprocess.run([sys.executable, "-c", script, str(tmp_path / "a.json")], cwd=REPO)
    assert died.returncode == 9
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"], "no temporary file or folder left behind"


def test_a_finished_jobs_work_directory_goes_and_only_unfinished_work_stays(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    done, other_seed = work_dir("eval", "mezo", "gsm8k", 0, "abc"), work_dir("eval", "mezo", "gsm8k", 1, "abc")
    (done / "generations.jsonl").write_text("{}\n")
    (done / "member0").mkdir()
    finished(done)
    assert not done.exists() and not done.parent.exists(), "the job's folder and the seed folder it left empty"
    assert other_seed.is_dir(), "another job's work stays"
    finished(other_seed)
    assert WORK.is_dir() and list(WORK.iterdir()) == [], "results/work stays, empty"
    assert work_dir("eval", "mezo", "gsm8k", 0, "abc").is_dir(), "a folder removed is made again"


def test_meters_sample_the_disk_use_of_results_and_keep_the_largest(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"x" * 1000)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.bin").write_bytes(b"y" * 2**20)
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "big.bin").write_bytes(b"z" * 3 * 2**20)
    (tmp_path / "link-to-file").symlink_to(tmp_path / "a.bin")  # symlinks: not counted, not followed
    (tmp_path / "link-to-dir").symlink_to(outside, target_is_directory=True)
    meter = meters.Meters()
    assert meter.snapshot()["peak_disk_mb"] == 0.0, "nothing sampled yet"
    assert meter.disk_sample(tmp_path) == (1000 + 2**20) / 2**20
    (tmp_path / "sub" / "b.bin").unlink()
    assert meter.disk_sample(tmp_path) == 1000 / 2**20
    assert meter.snapshot()["peak_disk_mb"] == meter.peak_disk_mb == (1000 + 2**20) / 2**20, "the largest kept"


def test_missing_model_is_one_clear_line(tmp_path):
    with pytest.raises(NogradError) as error:
        models.prepare("no-such-org/no-such-model", tmp_path)
    text = str(error.value)
    assert "no-such-org/no-such-model" in text and "hub:" in text and "\n" not in text


def test_meters_count_forward_backward_and_generation(tiny_model_dir):
    from core.sampler import SamplingParams, sample

    model, tokenizer = models.load(tiny_model_dir)
    meter = meters.Meters()
    meter.attach(model)
    ids = torch.randint(0, 100, (3, 10))
    model(input_ids=ids)
    assert meter.counts["forward_passes"] == 3 and meter.counts["tokens_processed"] == 30
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    assert meter.counts["forward_passes"] == 6 and meter.counts["backward_passes"] == 3
    rows = sample(model, tokenizer, ["a b", "c"], SamplingParams(n=2, temperature=1.0, max_new_tokens=5))
    assert meter.counts["forward_passes"] == 6 + 4, "a generated sequence is one forward pass"
    assert meter.counts["sequences_generated"] == 4
    assert meter.counts["tokens_generated"] == sum(c.tokens for row in rows for c in row) > 0
    snap = meter.snapshot()
    assert snap["forward_equivalents"] == 10 + 2 * 3
    assert snap["time_generate_s"] > 0 and snap["peak_memory_mb"] > 0
    assert meters.of(model) is meter


@pytest.mark.parametrize("checkpointing", [None, {"use_reentrant": False}, {"use_reentrant": True}],
                         ids=["plain", "checkpointed", "checkpointed-reentrant"])
def test_a_checkpointed_backward_counts_the_forward_it_recomputes(tiny_model_dir, checkpointing):
    """Under gradient checkpointing a backward runs each decoder layer's forward again: a loss
    backward over 3 sequences counts 3 recompute passes (2 layers x 3 sequences recomputed), and
    forward_equivalents includes them; without checkpointing, and during the forward, none."""
    model, _ = models.load(tiny_model_dir)
    meter = meters.Meters()
    meter.attach(model)
    model.train()
    if checkpointing is not None:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=checkpointing)
    ids = torch.randint(0, 100, (3, 10))
    loss = model(input_ids=ids, labels=ids).loss
    assert meter.snapshot()["recompute_passes"] == 0, "the forward is not a recompute"
    loss.backward()
    snap = meter.snapshot()
    recomputed = 0 if checkpointing is None else 3
    assert snap["recompute_passes"] == recomputed and snap["recomputed_layers"] == 2 * recomputed
    assert snap["forward_passes"] == 3 and snap["backward_passes"] == 3
    assert snap["forward_equivalents"] == 3 + recomputed + 2 * 3
    with torch.no_grad():
        model(input_ids=ids)
    assert meter.snapshot()["recompute_passes"] == recomputed, "a no-grad forward in training mode recomputes nothing"


def test_rollout_scores_the_reward_or_correctness_alone_each_a_counted_reward_call(workdir, monkeypatch):
    """`score="correctness"` drops the format term (reward.format_weight = 0.1 here) and is still
    metered: every completion scored either way is one reward call."""
    from pathlib import Path

    from core.outputs import read_json
    from jobs import train as training

    run = training.TrainingRun(workdir.config, "mezo", "gsm8k", 0, read_json(Path("results/model/manifest.json")),
                       Path("results/data/gsm8k"), Path("results/out"), Path("results/work"))
    first = run.train[0].id
    monkeypatch.setattr(type(run.task), "is_correct", lambda self, problem, text: problem.id == first)
    monkeypatch.setattr(type(run.task), "has_format", lambda self, text: True)
    problems = run.train[:3]
    _, reward = run.rollout(problems, n=2)
    _, correct = run.rollout(problems, n=2, score="correctness")
    assert correct.tolist() == [[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]]
    assert torch.allclose(torch.as_tensor(reward),
                          torch.tensor([[1.1, 1.1], [0.1, 0.1], [0.1, 0.1]], dtype=torch.float64))
    assert run.meters.counts["reward_calls"] == 2 * 3 * 2


def test_a_model_stored_as_seeds_is_rebuilt_only_from_the_noise_it_was_trained_with(tiny_model_dir):
    """The same seed draws other numbers on the CPU and on a GPU: training records where its noise
    was drawn, and a rebuild elsewhere stops with one line instead of evaluating other weights."""
    from core import artifacts
    from core.perturb import combine_
    from jobs.train import with_noise_device

    seeds = {"kind": "seeds", "terms": [[1, 0.1]], "mode": "iid", "trained": True}
    stamped = with_noise_device({"kind": "ensemble", "members": [seeds, {"kind": "adapter", "path": "a"}]}, "cpu")
    assert [m.get("noise_device") for m in stamped["members"]] == ["cpu", None]
    spec = {**seeds, "base": str(tiny_model_dir)}
    with pytest.raises(NogradError, match="drew its noise on NVIDIA H200; rebuilt on cpu"):
        artifacts.load({**spec, "noise_device": "NVIDIA H200"}, "float32", "cpu")
    model, _ = artifacts.load({**spec, "noise_device": "cpu"}, "float32", "cpu")
    expected, _ = models.load(str(tiny_model_dir), "float32", "cpu")
    combine_(list(expected.parameters()), [(1, 0.1)])
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), expected.parameters()))
