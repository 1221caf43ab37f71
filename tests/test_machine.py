"""`dtype: auto` and `sampler: auto` (core/machine.py): each chosen by its probe, both ways, from
stand-in figures; kept per machine and per results folder; left alone where the config sets them;
and the report saying what ran and why. The real precision probe runs on the tiny model here, and
the real sampler probe against vLLM in tests/test_vllm_engine.py."""

from __future__ import annotations

import dataclasses
import os

import pytest

from core import config, machine
from reports.render import _facts


@pytest.fixture
def here(tmp_path, monkeypatch, tiny_model_dir):
    """A results folder of its own, and a config on the tiny model that leaves both choices to the machine."""
    monkeypatch.chdir(tmp_path)
    return config.Config(model=str(tiny_model_dir), dtype="auto", sampler="auto", device="cpu")


def stand_in(monkeypatch, name: str, figures: dict) -> list[int]:
    """Probe `name` answers `figures` instead of measuring; the list counts its calls."""
    calls = []
    monkeypatch.setattr(machine, f"_{name}", lambda *args: calls.append(1) or dict(figures))
    return calls


SHAPES = {"decode72": "decoding 72 rows", "decode8": "decoding 8 rows", "forward256": "a 256-token forward"}


def precision(float32: float, bfloat16: float, rollout: float | None = None) -> dict:
    """The precision probe's figures: every shape at these seconds, or bf16's rollout at `rollout`."""
    seconds = {f"{dtype}@{shape}": spent for shape in SHAPES for dtype, spent in
               (("float32", float32), ("bfloat16", bfloat16))}
    if rollout is not None:
        seconds["bfloat16@decode8"] = rollout
    return {"shapes": SHAPES, "threads": 1, "seconds": seconds}


@pytest.mark.parametrize("float32, bfloat16, rollout, chosen", [
    (2.0, 1.0, None, "bfloat16"), (1.0, 2.0, None, "float32"), (1.0, 1.0, None, "bfloat16"),
    # bf16 4x as fast on rollouts, half as fast on the other two: a geometric mean of 1, a tie
    (1.0, 2.0, 0.25, "bfloat16"),
    # 3x as fast on rollouts does not make up for the other two
    (1.0, 2.0, 1 / 3, "float32"),
])
def test_auto_precision_is_the_faster_one_by_the_probe_bf16_on_a_tie(here, monkeypatch, float32, bfloat16, rollout,
                                                                     chosen):
    calls = stand_in(monkeypatch, "precision", precision(float32, bfloat16, rollout))
    choice = machine.choose_dtype(here)
    assert (choice.setting, choice.value) == ("auto", chosen)
    speed = float32 / bfloat16
    assert f"{speed:.2f}x decoding 72 rows, {float32 / (rollout or bfloat16):.2f}x decoding 8 rows, " \
           f"{speed:.2f}x a 256-token forward)" in choice.reason
    assert machine.choose_dtype(here).value == chosen and calls == [1], "kept per machine, not measured again"
    assert machine.choose_dtype(here, fresh=True).value == chosen and calls == [1, 1], "measured again on demand"


def rates(torch_rate: float, vllm_rate: float) -> dict:
    return {"shape": [32, 64], "tokens_per_second": {"torch": torch_rate, "vllm": vllm_rate}}


@pytest.mark.parametrize("torch_rate, vllm_rate, chosen", [(100.0, 150.0, "vllm"), (150.0, 100.0, "torch")])
def test_auto_sampler_is_the_faster_engine_by_the_probe(here, monkeypatch, torch_rate, vllm_rate, chosen):
    stand_in(monkeypatch, "precision", precision(1.0, 2.0))
    stand_in(monkeypatch, "samplers", rates(torch_rate, vllm_rate))
    monkeypatch.setattr(machine.importlib.util, "find_spec", lambda name: object())  # vLLM "installed"
    cfg, choices = machine.resolve(here)
    assert (cfg.dtype, cfg.sampler) == ("float32", chosen)
    assert f"vLLM generated {vllm_rate:.1f} tokens/s and nograd's torch sampler {torch_rate:.1f}" in \
        choices["sampler"].reason


def test_without_vllm_or_under_ray_auto_is_the_torch_sampler_and_nothing_is_measured(here, monkeypatch):
    stand_in(monkeypatch, "precision", precision(1.0, 2.0))
    calls = stand_in(monkeypatch, "samplers", rates(1.0, 1000.0))
    monkeypatch.setattr(machine.importlib.util, "find_spec", lambda name: None)
    assert machine.choose_sampler(here) == machine.Choice("auto", "torch", "vLLM is not installed in this environment")
    monkeypatch.setattr(machine.importlib.util, "find_spec", lambda name: object())
    ray = dataclasses.replace(here, training=config.TrainingConfig(population="ray"))
    assert machine.choose_sampler(ray).value == "torch" and "ray" in machine.choose_sampler(ray).reason
    assert calls == []


def test_settings_the_config_gives_are_kept_unmeasured_and_nothing_is_written(here, monkeypatch):
    calls = stand_in(monkeypatch, "precision", precision(1.0, 2.0))
    cfg, choices = machine.resolve(dataclasses.replace(here, dtype="bfloat16", sampler="torch"))
    assert (cfg.dtype, cfg.sampler) == ("bfloat16", "torch") and calls == []
    assert choices["dtype"] == machine.Choice("bfloat16", "bfloat16", "set in the config")
    assert not machine.PROBES.exists()


def test_choices_are_made_once_per_results_folder_and_rewritten_only_when_they_change(here, monkeypatch):
    """Every job of a DAG reads the probe job's choices (and reruns when the file changes), so a
    new measurement that chooses the same leaves the file as it was."""
    calls = stand_in(monkeypatch, "precision", precision(1.0, 2.0))
    monkeypatch.setattr(machine.importlib.util, "find_spec", lambda name: None)
    assert machine.resolve(here)[0].dtype == "float32"
    written = machine.DECIDED.stat().st_mtime_ns
    os.utime(machine.DECIDED, ns=(written - 10**9, written - 10**9))
    calls.clear()
    assert machine.resolve(here)[0].dtype == "float32" and calls == [], "jobs read the kept choices"
    machine.decide(here, fresh=True)
    assert calls == [1] and machine.DECIDED.stat().st_mtime_ns == written - 10**9, "same choice: file untouched"
    stand_in(monkeypatch, "precision", precision(2.0, 1.0))
    assert machine.decide(here, fresh=True)["dtype"].value == "bfloat16"
    assert machine.resolve(here)[0].dtype == "bfloat16", "a changed choice is rewritten, and jobs follow it"
    calls = stand_in(monkeypatch, "precision", precision(1.0, 2.0))
    machine.resolve(dataclasses.replace(here, evaluation=config.EvaluationConfig(batch_size=8)))
    assert calls == [1] and machine.read_json(machine.DECIDED)["asked"]["rows"] == 8, "other settings ask again"


def test_a_probe_that_fails_stops_with_one_line_saying_how_to_skip_it(here, monkeypatch):
    def broken(*args):
        raise RuntimeError("no matmul today")

    monkeypatch.setattr(machine, "_precision", broken)
    with pytest.raises(machine.NogradError, match="the machine probe failed .RuntimeError: no matmul today.; set "
                                                  "dtype and sampler in the config"):
        machine.resolve(here)
    assert not machine.DECIDED.exists(), "nothing half-decided"


def test_the_real_precision_probe_times_both_precisions_and_chooses_by_its_own_figures(here):
    cfg, choices = machine.resolve(dataclasses.replace(here, sampler="torch"))
    [kept] = machine.PROBES.glob("dtype-*.json")
    figures = machine.read_json(kept)
    seconds, shapes = figures["seconds"], figures["shapes"]
    assert shapes == {f"decode{here.evaluation.batch_size}": f"decoding {here.evaluation.batch_size} rows",
                      f"decode{machine.ROLLOUT_ROWS}": f"decoding {machine.ROLLOUT_ROWS} rows",
                      f"forward{machine.TRAINING_TOKENS}": f"a {machine.TRAINING_TOKENS}-token forward"}
    assert set(seconds) == {f"{dtype}@{shape}" for dtype in ("float32", "bfloat16") for shape in shapes}
    assert all(0 < value < float("inf") for value in seconds.values())
    speeds = [seconds[f"float32@{shape}"] / seconds[f"bfloat16@{shape}"] for shape in shapes]
    assert cfg.dtype == ("bfloat16" if (speeds[0] * speeds[1] * speeds[2]) ** (1 / 3) >= 1 else "float32")
    assert figures["machine"] == machine.fingerprint() and figures["threads"] == machine.JOB_THREADS
    assert str(kept) in choices["dtype"].reason and f"{speeds[1]:.2f}x decoding" in choices["dtype"].reason


def test_the_report_states_each_choice_and_why():
    header = {"dtype": "float32", "choices": {
        "dtype": {"setting": "auto", "value": "float32", "reason": "bf16 ran 0.6x as fast"},
        "sampler": {"setting": "torch", "value": "torch", "reason": "set in the config"}}}
    facts = dict(_facts(header, []))
    assert facts["Weights"] == "float32, chosen by `dtype: auto`: bf16 ran 0.6x as fast"
    assert facts["Sampler"] == "nograd's torch sampler (core/sampler.py), set in the config"


def test_a_summary_of_settings_no_probe_chose_says_so_and_measures_nothing(here, monkeypatch):
    calls = stand_in(monkeypatch, "precision", precision(1.0, 2.0))
    choices = machine.recorded(here)
    assert choices["dtype"] == machine.Choice("auto", "auto", "not chosen: no probe ran for these settings in this "
                                                             "results folder") and calls == []
    facts = dict(_facts({"choices": {name: dataclasses.asdict(c) for name, c in choices.items()}}, []))
    assert facts["Weights"] == "left to `dtype: auto`, and not chosen: no probe ran for these settings in this " \
                               "results folder"
    machine.decide(here)
    assert machine.recorded(here)["dtype"].value == "float32", "what the probe job chose"
