"""The plug-in contract (core/contract.py) against everything on either side of it: the
harness's `Run` provides every member with the contract's signature and type, and makes artifacts
with the fields `Artifact` declares; the test doubles that stand in for it offer nothing outside
it; methods/*.py use exactly its members of the run; README's list is its member list."""

import ast
import dataclasses
import importlib
import inspect
import itertools
import re
import types
import typing
from pathlib import Path

import numpy as np
import pytest

import methods
from core import contract
from core.outputs import read_json
from synthetic import SyntheticRun
from test_sazo import QuadraticRun

REPO = Path(__file__).resolve().parents[1]
ATTRIBUTES = set(contract.Run.__annotations__)
MEMBERS = ATTRIBUTES | {name for name in vars(contract.Run) if not name.startswith("_")}
"""The contract's members: its attributes and its methods."""


def signature(function, annotated: bool) -> inspect.Signature:
    sig = inspect.signature(function)
    if annotated:
        return sig
    return sig.replace(parameters=[p.replace(annotation=p.empty) for p in sig.parameters.values()],
                       return_annotation=sig.empty)


def compare(implementation: object, annotated: bool = True) -> tuple[set[str], set[str], dict[str, tuple[str, str]]]:
    """What `implementation` (an instance) lacks of the contract, the public members it offers beyond
    it, and the methods both have with another signature: {name: (contract's, its)}. Signatures
    are compared by parameter names, kinds and defaults, and by annotations when `annotated`."""
    offered = {name for name in dir(implementation) if not name.startswith("_")}
    differ = {}
    for name in sorted((MEMBERS - ATTRIBUTES) & offered):
        ours = signature(getattr(contract.Run, name), annotated)
        theirs = signature(getattr(type(implementation), name), annotated)
        if ours != theirs:
            differ[name] = (str(ours), str(theirs))
    return MEMBERS - offered, offered - MEMBERS, differ


def type_checking_names() -> dict:
    """contract.py's namespace with its type-checking-only imports made: what its annotations name."""
    tree = ast.parse(Path(contract.__file__).read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    names = dict(vars(contract))
    for node in block.body:
        for alias in node.names:
            if isinstance(node, ast.ImportFrom):
                names[alias.asname or alias.name] = getattr(importlib.import_module(node.module), alias.name)
            else:
                names[alias.asname or alias.name] = importlib.import_module(alias.name)
    return names


@pytest.fixture
def harness_run(workdir, monkeypatch):
    """The run the harness hands a method (training the base model, whose train is wrapped to keep
    it), and the artifact.json that training wrote."""
    base = methods.get_method("base")
    captured = []

    def train(config, run):
        captured.append(run)
        return base.train(config, run)

    monkeypatch.setitem(methods.METHODS, "base", dataclasses.replace(base, train=train))
    artifact = read_json(workdir.train("results/train/base/gsm8k/seed0/artifact.json"))
    return captured[0], artifact


@pytest.mark.parametrize("workdir", [("base", {})], indirect=True)
def test_the_harness_run_provides_every_member_of_the_contract_with_its_signature_and_type(harness_run):
    run, _ = harness_run
    missing, _, differ = compare(run)
    assert not missing and not differ
    names = type_checking_names()
    hints = typing.get_type_hints(contract.Run, globalns=names)
    for name in ATTRIBUTES:
        origin = typing.get_origin(hints[name])
        assert isinstance(getattr(run, name), hints[name] if origin in (None, types.UnionType) else origin), name
    for name in MEMBERS - ATTRIBUTES:  # every annotation of a method resolves
        typing.get_type_hints(getattr(contract.Run, name), globalns=names)
    typing.get_type_hints(contract.Artifact, globalns=names)


@pytest.mark.parametrize("workdir", [("base", {})], indirect=True)
def test_the_artifacts_the_run_makes_have_the_fields_artifact_declares(harness_run):
    run, written = harness_run
    seeds = run.seeds_artifact([(1, 0.5)], "shared")
    made = [written, run.base_artifact(), run.save_model(), seeds, run.ensemble_artifact([seeds, seeds])]
    for artifact in made:
        assert contract.Artifact.__required_keys__ <= set(artifact) <= set(contract.Artifact.__annotations__), artifact


@pytest.mark.parametrize("double, instruments", [
    (lambda: SyntheticRun(thresholds=np.zeros(4)),
     {"base", "direction", "thresholds", "history", "rollouts", "scores", "displacement", "rewards"}),
    (lambda: QuadraticRun(0), {"a", "b", "calls", "history", "losses", "gradient_norms"}),
], ids=["SyntheticRun", "QuadraticRun"])
def test_each_test_double_offers_only_members_of_the_contract_with_its_signatures(double, instruments):
    """Beside its instruments (what the tests read back, never a method), a double offers only
    members of the contract: a method that works on a double works on the harness's run."""
    _, beyond, differ = compare(double(), annotated=False)
    assert beyond == instruments and not differ


def test_methods_use_exactly_the_members_of_the_contract():
    """Every `run.<name>` and `self.run.<name>` in methods/*.py is a member of the contract, and
    every member is used by some method (the contract holds nothing no method needs)."""
    used: dict[str, set[str]] = {}
    for path in sorted(Path(methods.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and (
                    isinstance(node.value, ast.Name) and node.value.id == "run"
                    or isinstance(node.value, ast.Attribute) and node.value.attr == "run"):
                used.setdefault(node.attr, set()).add(path.name)
    assert {name: files for name, files in used.items() if name not in MEMBERS} == {}, "used outside the contract"
    assert MEMBERS - set(used) == set(), "in the contract, used by no method"


def test_every_member_of_the_contract_is_documented():
    tree = ast.parse(Path(contract.__file__).read_text())
    body = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Run").body
    documented = {node.target.id for node, after in itertools.pairwise(body)
                  if isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr)
                  and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)}
    documented |= {node.name for node in body if isinstance(node, ast.FunctionDef) and ast.get_docstring(node)}
    assert MEMBERS - documented == set()


def test_the_readme_lists_the_members_of_the_contract():
    section = (REPO / "README.md").read_text().split("## Adding a method", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^- `run\.(\w+)", section, re.MULTILINE)
    assert sorted(listed) == sorted(MEMBERS)
