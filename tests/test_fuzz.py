"""Bad input, fuzzed: configs mutated at every key the schema knows, and data files broken in
every way a file can be.

Each case ends in one NogradError line naming the key, or the file and line, never another
exception from inside a library, and a data preparation that fails leaves no output behind.
Hypothesis draws the mutations (derandomized, so every run tries the same ones).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from conftest import tiny_config
from core import config
from core.errors import NogradError
from core.task import MAX_LINE_BYTES, MalformedData, read_jsonl
from jobs import data, validation
from methods import METHODS

REPO = Path(__file__).resolve().parent.parent
FUZZ = settings(max_examples=150, deadline=None, derandomize=True, database=None)

BASE = tiny_config("model", **{name: copy.deepcopy(method.test_settings) for name, method in METHODS.items()})
"""Every registered task and method, at the methods' tiny settings: a config that validates. Each
method's settings are its own copy: ESSA's tiny settings extend SFT's, and a list the two shared
would take a value written at one key to the other too."""
SCHEMA = validation.schema()
CROSS_CHECKED = {"randopt": {"population", "top_k"}, "corp": {"support_size", "rounds"},
                 "grpo": {"prompts_per_step", "num_generations", "micro_batch_size"},
                 "fgrpo": {"prompts_per_step", "num_generations", "micro_batch_size"}}
"""The keys a method's config checks against each other (its __post_init__): a value within its
own range may still be refused there, so `test_a_value_in_range_still_validates` leaves them out."""


def keys(schema: dict, value: Any, path: tuple = ()) -> Iterator[tuple[tuple, dict]]:
    """(path, schema) of every key a config may set under `schema`, set in `value` or not, and of
    the first item of every list `value` holds."""
    names = dict(schema.get("properties", {}))
    names.update(dict.fromkeys(schema.get("propertyNames", {}).get("enum", []), schema.get("additionalProperties")))
    for key, prop in names.items():
        child = value.get(key) if isinstance(value, dict) else None
        yield (*path, key), prop
        if isinstance(child, list) and child:
            yield (*path, key, 0), prop["items"]
        yield from keys(prop, child, (*path, key))


PATHS = list(keys(SCHEMA, BASE))
OBJECTS = [((), SCHEMA)] + [(path, prop) for path, prop in PATHS if prop.get("type") == "object"]
NON_EMPTY = [(path, prop) for path, prop in PATHS if "minItems" in prop or "minProperties" in prop]


def numeric(prop: dict) -> dict | None:
    """The number (or integer) branch of a key's schema, if it has one."""
    return next((b for b in prop.get("anyOf", [prop]) if b.get("type") in ("integer", "number")), None)


BOUNDS = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}
BOUNDED = [(path, prop) for path, prop in PATHS if BOUNDS & set(numeric(prop) or {})]
UNCHECKED = [(path, prop) for path, prop in BOUNDED
             if not (path[0] == "methods" and path[2] in CROSS_CHECKED.get(path[1], ()))]
"""The bounded keys that no method's check across keys reads."""


def with_value(path: tuple, value: Any, raw: dict = BASE) -> dict:
    """A copy of `raw` with `value` at `path` (mappings on the way created)."""
    raw = copy.deepcopy(raw)
    node = raw
    for key in path[:-1]:
        node = node.setdefault(key, {}) if isinstance(node, dict) else node[key]
    node[path[-1]] = value
    return raw


def at(raw: Any, path: tuple) -> Any:
    for key in path:
        raw = raw[key]
    return raw


def dotted(path: tuple) -> str:
    return ".".join(map(str, path))


def refused(raw: Any) -> str:
    """validate's one line for `raw`; any other exception fails the test."""
    with pytest.raises(NogradError) as error:
        validation.validate(raw, source="fuzz.yaml")
    message = str(error.value)
    assert len(message.splitlines()) == 1, message
    assert message.startswith("fuzz.yaml: "), message
    return message


# ---------------------------------------------------------------- configs


def finite(**bounds) -> st.SearchStrategy:
    return st.floats(allow_nan=False, allow_infinity=False, **bounds)


def _not_a_number(text: str) -> bool:
    """A string that stays one: validate reads '1e-6' (YAML 1.1's way of writing it) as a number."""
    try:
        float(text)
    except ValueError:
        return True
    return False


JSON_VALUES = {
    "null": st.none(),
    "boolean": st.booleans(),
    "integer": st.integers(),
    # JSON Schema counts 2.0 as an integer (validate makes it one), so only fractions are not.
    "number": finite().filter(lambda x: not x.is_integer()),
    "string": st.text(max_size=20).filter(_not_a_number),
    "array": st.lists(st.integers(), max_size=3),
    "object": st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
}
NON_FINITE = st.sampled_from([float("nan"), float("inf"), float("-inf")])


def wrong_values(prop: dict) -> st.SearchStrategy:
    """Values of a JSON type the key does not take (NaN and infinities are wrong for every key)."""
    if "enum" in prop:
        return st.one_of(*JSON_VALUES.values(), NON_FINITE).filter(lambda v: v not in prop["enum"])
    allowed = {branch["type"] for branch in prop.get("anyOf", [prop])}
    if "number" in allowed:
        allowed.add("integer")
    return st.one_of(*(values for kind, values in JSON_VALUES.items() if kind not in allowed), NON_FINITE)


def values_beyond(branch: dict) -> st.SearchStrategy:
    """Numbers just outside a key's bounds: zero and negative budgets, shares above 1."""
    integer, options = branch["type"] == "integer", []
    if "minimum" in branch:
        low = branch["minimum"]
        options.append(st.integers(max_value=low - 1) if integer else finite(max_value=low, exclude_max=True))
    if "exclusiveMinimum" in branch:
        low = branch["exclusiveMinimum"]
        options.append(st.integers(max_value=low) if integer else finite(max_value=low))
    if "maximum" in branch:
        high = branch["maximum"]
        options.append(st.integers(min_value=high + 1) if integer else finite(min_value=high, exclude_min=True))
    if "exclusiveMaximum" in branch:
        high = branch["exclusiveMaximum"]
        options.append(st.integers(min_value=high) if integer else finite(min_value=high))
    return st.one_of(*options)


def values_within(branch: dict) -> st.SearchStrategy:
    low = branch.get("minimum", branch.get("exclusiveMinimum", 0))
    high = branch.get("maximum", branch.get("exclusiveMaximum", low + 10**6))
    above, below = "exclusiveMinimum" in branch, "exclusiveMaximum" in branch
    if branch["type"] == "integer":
        return st.integers(min_value=low + above, max_value=high - below)
    return finite(min_value=low, max_value=high, exclude_min=above, exclude_max=below)


def test_the_base_config_validates_and_every_key_kind_is_fuzzed():
    cfg = validation.validate(BASE)
    assert set(cfg.methods) == set(METHODS)
    paths = {path for path, _ in PATHS}
    assert {("methods", name, f.name) for name, method in METHODS.items() for f in dataclasses.fields(method.config)} \
        | {("tasks", "gsm8k", "test_size"), ("evaluation", "samples_by_method", "base"), ("seeds", 0)} <= paths
    assert {("methods", "mezo", "steps"), ("evaluation", "confidence"), ("methods", "corp", "q_grid", 0),
            ("evaluation", "samples_by_method", "base")} <= {path for path, _ in BOUNDED}
    assert {("tasks",), ("methods",), ("seeds",), ("methods", "corp", "q_grid")} <= {path for path, _ in NON_EMPTY}
    assert {(), ("reward",), ("methods", "base"), ("evaluation", "samples_by_method")} <= {path for path, _ in OBJECTS}


@FUZZ
@given(st.data())
def test_a_value_of_the_wrong_type_is_one_line_naming_its_key(draws):
    path, prop = draws.draw(st.sampled_from(PATHS), label="key")
    value = draws.draw(wrong_values(prop), label="value")
    assume(not (len(path) == 2 and path[0] in ("tasks", "methods") and value is None))  # null: its defaults
    assert f"fuzz.yaml: {dotted(path)}: " in refused(with_value(path, value))


@FUZZ
@given(st.data())
def test_a_value_out_of_its_range_is_one_line_naming_its_key(draws):
    path, prop = draws.draw(st.sampled_from(BOUNDED), label="key")
    value = draws.draw(values_beyond(numeric(prop)), label="value")
    message = refused(with_value(path, value))
    assert f"fuzz.yaml: {dotted(path)}: " in message and ("minimum" in message or "maximum" in message)


@FUZZ
@given(st.data())
def test_a_value_in_range_still_validates(draws):
    path, prop = draws.draw(st.sampled_from(UNCHECKED), label="key")
    value = draws.draw(values_within(numeric(prop)), label="value")
    cfg = validation.validate(with_value(path, value))
    assert at(config.to_dict(cfg), path) == value


@pytest.mark.parametrize("path, prop", NON_EMPTY, ids=[dotted(path) for path, _ in NON_EMPTY])
def test_an_emptied_list_or_mapping_is_one_line_naming_it(path, prop):
    empty = {} if "minProperties" in prop else []
    assert f"fuzz.yaml: {dotted(path)}: {empty} should be non-empty" in refused(with_value(path, empty))


@FUZZ
@given(st.data())
def test_an_unknown_key_at_any_level_is_one_line_naming_it_and_where(draws):
    path, prop = draws.draw(st.sampled_from(OBJECTS), label="mapping")
    names = prop.get("propertyNames", {}).get("enum")  # evaluation.samples_by_method: a method's name
    key = draws.draw(st.text(min_size=1, max_size=5).filter(lambda k: k not in (names or prop["properties"])),
                     label="key")
    message = refused(with_value((*path, key), 1) if path else {**BASE, key: 1})
    if names:
        assert f"fuzz.yaml: {dotted(path)}: {key!r} is not one of " in message
    else:
        assert f"fuzz.yaml: unknown key {key!r} in {dotted(path) or 'the top level'} (valid: " in message


@st.composite
def k_above_n(draw) -> tuple[str, dict, str]:
    """A method's settings whose keys break its own check across them, and the key to name."""
    case = draw(st.sampled_from(["randopt", "grpo", "fgrpo", "essam", "essam_f", "corp"]))
    if case == "randopt":
        population = draw(st.integers(1, 100))
        return case, {"population": population, "top_k": draw(st.integers(population + 1, population + 100))}, "top_k"
    if case in ("grpo", "fgrpo"):
        prompts, group = draw(st.integers(1, 64)), draw(st.integers(2, 16))
        micro = draw(st.integers(1, 2 * prompts * group).filter(lambda m: prompts * group % m))
        return case, {"prompts_per_step": prompts, "num_generations": group, "micro_batch_size": micro}, \
            "micro_batch_size"
    if case == "essam":
        return case, {"antithetic": True, "population_size": 2 * draw(st.integers(0, 50)) + 1}, "population_size"
    if case == "essam_f":
        return case, {"antithetic": True, "population_size": 2 * draw(st.integers(1, 50)),
                      "sam_population_size": 2 * draw(st.integers(0, 50)) + 1}, "sam_population_size"
    return case, {"support_size": 1, "rounds": draw(st.integers(1, 5))}, "support_size"


@FUZZ
@given(k_above_n())
def test_settings_that_break_a_methods_check_across_keys_are_one_line_naming_method_and_key(case):
    method, broken, key = case
    message = refused(with_value(("methods", method), {**METHODS[method].test_settings, **broken}))
    assert f"fuzz.yaml: methods.{method}: {key} ({broken[key]}) must" in message


@FUZZ
@given(population=st.integers(1, 100), draws=st.data())
def test_settings_that_keep_a_methods_checks_validate(population, draws):
    top_k = draws.draw(st.integers(1, population))
    prompts, group = draws.draw(st.integers(1, 64)), draws.draw(st.integers(2, 16))
    micro = draws.draw(st.sampled_from([m for m in range(1, prompts * group + 1) if prompts * group % m == 0]))
    raw = with_value(("methods", "randopt"),
                     {**METHODS["randopt"].test_settings, "population": population, "top_k": top_k})
    raw = with_value(("methods", "grpo"), {"prompts_per_step": prompts, "num_generations": group,
                                           "micro_batch_size": micro}, raw)
    cfg = validation.validate(raw)
    assert (cfg.methods["randopt"].top_k, cfg.methods["grpo"].micro_batch_size) == (top_k, micro)


def test_of_two_faults_the_deeper_key_is_named():
    raw = with_value(("methods", "mezo", "lr"), "fast", {**BASE, "bogus": 1})
    assert refused(raw) == "fuzz.yaml: methods.mezo.lr: 'fast' is not of type 'number'"
    # An unknown method name with a bad count: the count's path holds the name, quoted when unprintable.
    raw = with_value(("evaluation", "samples_by_method"), {"a\nb": 0})
    assert refused(raw) == "fuzz.yaml: evaluation.samples_by_method.'a\\nb': 0 is less than the minimum of 1"


def test_numbers_take_the_type_their_key_has():
    """YAML 1.1 reads 1e-3 as a string and JSON Schema counts 2.0 as an integer: both are given
    the Python type the dataclass declares, in lists and nullable keys too."""
    raw = with_value(("methods", "corp", "sigmas"), ["1e-3", 2])
    raw = with_value(("methods", "sazo", "s0"), "1e-2", raw)
    cfg = validation.validate(with_value(("tasks", "gsm8k", "train_size"), 2.0, raw))
    assert cfg.methods["corp"].sigmas == [1e-3, 2] and cfg.methods["sazo"].s0 == 1e-2
    assert type(cfg.tasks["gsm8k"].train_size) is int


@FUZZ
@given(st.one_of(*(values for kind, values in JSON_VALUES.items() if kind != "object")))
def test_a_config_that_is_not_a_mapping_is_one_line(raw):
    assert "the top level is" in refused(raw)


@pytest.mark.parametrize("text, message", [
    (b"name: t\nmodel: [unclosed\n", r"bad\.yaml:3: not valid YAML: expected ',' or ']'"),
    (b"name: t\n\tmodel: m\n", r"bad\.yaml:2: not valid YAML: found character '\\t'"),
    (b"name: caf\xe9\n", r"bad\.yaml: not valid YAML: .*invalid continuation byte"),
    (b"[" * 100_000, r"bad\.yaml: not valid YAML: nested too deeply"),
    (b"- name\n- model\n", r"bad\.yaml: the top level is list, not a mapping of keys"),
    (b"just words\n", r"bad\.yaml: the top level is str, not a mapping of keys"),
], ids=["unclosed", "tab", "latin-1", "nested", "list", "scalar"])
def test_a_config_file_that_is_not_yaml_or_not_a_mapping_is_one_line_naming_it(tmp_path, text, message):
    (tmp_path / "bad.yaml").write_bytes(text)
    with pytest.raises(NogradError, match=message) as error:
        validation.load(tmp_path / "bad.yaml")
    assert len(str(error.value).splitlines()) == 1


@pytest.mark.parametrize("text, message", [
    ("name: t\nmodel: [unclosed\n", "bad.yaml:3: not valid YAML"),
    ("- name\n- model\n", "bad.yaml: the top level is list"),
])
def test_the_cli_ends_a_bad_config_file_with_exit_2_and_one_line(tmp_path, text, message):
    (tmp_path / "bad.yaml").write_text(text)
    result = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "prepare-data", "--config", "bad.yaml", "--task", "gsm8k",
         "--out", "results/data/gsm8k/manifest.json"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])},
    )
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith(f"nograd prepare-data: error: {message}"), line
    assert not (tmp_path / "results").exists()


# ---------------------------------------------------------------- data files


ROWS = [{"question": f"Person {i} has {i} apples and buys {i} more. How many now?",
         "answer": f"{i} + {i} = {2 * i}\n#### {2 * i}"} for i in range(16)]
"""GSM8K rows in the hub's layout."""
OUTPUTS = ("train.jsonl", "test.jsonl", "manifest.json")


def lines(rows: list[dict]) -> list[bytes]:
    return [json.dumps(row).encode() + b"\n" for row in rows]


def data_dir(root: Path) -> Path:
    """A data dir in the hub's layout: GSM8K train (12 problems) and test (4), and MATH-500 test (4)."""
    (root / "gsm8k").mkdir(parents=True)
    (root / "math500").mkdir()
    (root / "gsm8k" / "train.jsonl").write_bytes(b"".join(lines(ROWS[:12])))
    (root / "gsm8k" / "test.jsonl").write_bytes(b"".join(lines(ROWS[12:])))
    math = [{"problem": f"What is ${i} + {i}$?", "answer": str(2 * i), "level": 1} for i in range(4)]
    (root / "math500" / "test.jsonl").write_bytes(b"".join(lines(math)))
    return root


def prepared_config(root: Path) -> config.Config:
    return validation.validate({**tiny_config("model", base={}), "data_dir": str(root),
                            "tasks": {"gsm8k": {"train_size": 8, "test_size": 2}, "math": {"test_size": 2}}})


def stale_outputs(out: Path) -> Path:
    """An output dir holding what an earlier run left: a rerun must not leave it looking prepared."""
    out.mkdir(parents=True)
    for name in OUTPUTS:
        (out / name).write_text("{}\n")
    return out


def test_a_valid_local_data_dir_is_prepared(tmp_path):
    out = stale_outputs(tmp_path / "out")
    manifest = data.prepare(prepared_config(data_dir(tmp_path / "data")), "gsm8k", out)
    assert (manifest["train"]["kind"], manifest["train"]["size"], manifest["test"]["size"]) == ("local", 8, 2)
    assert len(data.read_split(out / "train.jsonl")) == 8 and json.loads((out / "manifest.json").read_text())


BROKEN = {  # file, line number and its new bytes (no number: the whole file's), the message after "file:line: "
    "a record missing a field": ("gsm8k/test.jsonl", 3, b'{"question": "How many?"}\n',
                                 "missing field 'answer' (required: question, answer)"),
    "a field of another type": ("gsm8k/train.jsonl", 2, b'{"question": "How many?", "answer": 7}\n',
                                "field 'answer' is a number, not a string"),
    "a MATH-500 record missing its problem": ("math500/test.jsonl", 2, b'{"answer": "4"}\n',
                                              "missing field 'problem' (required: problem, answer)"),
    "a record that is not an object": ("gsm8k/test.jsonl", 1, b'["How many?", "#### 4"]\n',
                                       "a record must be a JSON object, not an array"),
    "a line that is not JSON": ("gsm8k/train.jsonl", 12, b'{"question": "How many?", "ans',
                                "not valid JSON: Unterminated string starting at column 27"),
    "a line that is not UTF-8": ("gsm8k/test.jsonl", 2, b'{"question": "Caf\xe9?", "answer": "#### 1"}\n',
                                 "not UTF-8 (byte 18 of the line)"),
    "JSON nested too deeply": ("gsm8k/train.jsonl", 5, b"[" * 100_000 + b"\n", "JSON nested too deeply to read"),
    "an empty split": ("gsm8k/train.jsonl", None, b"", "no records"),
    "a split of blank lines": ("gsm8k/test.jsonl", None, b"\n  \n\t\n", "no records"),
}


@pytest.mark.parametrize("relative, number, text, message", BROKEN.values(), ids=BROKEN)
def test_a_broken_data_file_is_one_line_naming_file_and_line_and_leaves_no_output(tmp_path, relative, number, text,
                                                                                 message):
    path = data_dir(tmp_path / "data") / relative
    if number is None:
        path.write_bytes(text)
    else:
        broken = path.read_bytes().splitlines(keepends=True)
        broken[number - 1] = text
        path.write_bytes(b"".join(broken))
    task = relative.split("/")[0].replace("math500", "math")
    out = stale_outputs(tmp_path / "results" / "data" / task)
    with pytest.raises(NogradError) as error:
        data.prepare(prepared_config(tmp_path / "data"), task, out)
    where = f"{path}:{number}" if number else str(path)
    assert str(error.value).startswith(f"task {task}: {where}: {message}"), str(error.value)
    assert len(str(error.value).splitlines()) == 1
    assert not [name for name in OUTPUTS if (out / name).exists()], "a failed preparation left outputs"


def test_a_100_mb_line_is_refused_unread(tmp_path):
    """Read whole, the line would take 100 MB, and json.loads several times that; the reader
    stops at MAX_LINE_BYTES."""
    root = data_dir(tmp_path / "data")
    path = root / "gsm8k" / "train.jsonl"
    with open(path, "wb") as file:
        file.write(lines(ROWS[:1])[0] + b'{"question": "')
        for _ in range(100):
            file.write(b"x" * 2**20)
        file.write(b'", "answer": "#### 1"}\n' + b"".join(lines(ROWS[1:12])))
    out = stale_outputs(tmp_path / "results" / "data" / "gsm8k")
    tracemalloc.start()
    try:
        with pytest.raises(NogradError) as error:
            data.prepare(prepared_config(root), "gsm8k", out)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        path.unlink()
    assert str(error.value) == f"task gsm8k: {path}:2: line longer than 16 MiB"
    # readline(limit) holds the chunks it read and their join: twice the limit, not the line's 100 MiB.
    assert peak < 3 * MAX_LINE_BYTES, f"{peak / 2**20:.0f} MiB allocated to refuse the line"
    assert not [name for name in OUTPUTS if (out / name).exists()]


@pytest.mark.parametrize("damage, message", [
    (lambda text: text[:-20], ":8: not valid JSON: Unterminated string"),
    (lambda text: text.replace(text.splitlines()[1], text.splitlines()[1].replace('"question":', '"q":')),
     ":2: missing field 'question' (required: id, question, answer)"),
], ids=["truncated", "missing field"])
def test_a_damaged_prepared_split_is_one_line_naming_file_and_line(tmp_path, damage, message):
    out = tmp_path / "results" / "data" / "gsm8k"
    data.prepare(prepared_config(data_dir(tmp_path / "data")), "gsm8k", out)
    split = out / "train.jsonl"
    split.write_text(damage(split.read_text()))
    with pytest.raises(NogradError) as error:
        data.read_split(split)
    assert str(error.value).startswith(f"{split}{message}") and len(str(error.value).splitlines()) == 1


JSON_LINES = st.recursive(
    st.none() | st.booleans() | st.integers() | finite() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["question", "answer", "x"]), inner,
                                                                max_size=3),
    max_leaves=6,
).map(lambda value: json.dumps(value).encode())


@settings(FUZZ, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=st.integers(1, 3), after=st.integers(0, 2),
       line=st.one_of(JSON_LINES, st.binary(max_size=40).map(lambda b: b.replace(b"\n", b""))))
def test_any_line_is_read_as_a_record_or_refused_naming_it(tmp_path, before, after, line):
    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(b"".join([*lines(ROWS[:before]), line + b"\n", *lines(ROWS[:after])]))
    try:
        rows = read_jsonl(path, ("question", "answer"))
    except MalformedData as error:
        assert str(error).startswith(f"{path}:{before + 1}: ") and len(str(error).splitlines()) == 1, str(error)
    else:
        if line.strip():
            record = rows[before]
            assert record == json.loads(line) and isinstance(record["question"], str) and isinstance(
                record["answer"], str)
        assert len(rows) == before + after + bool(line.strip())


def test_a_method_or_task_named_with_nothing_after_it_takes_its_defaults():
    """`mezo:` alone in YAML reads as null: the method at its paper's defaults, as `mezo: {}`."""
    raw = with_value(("methods", "mezo"), None)
    cfg = validation.validate(with_value(("tasks", "gsm8k"), None, raw))
    assert cfg.methods["mezo"] == METHODS["mezo"].config() and cfg.tasks["gsm8k"] == config.TaskConfig()
