"""config/paper.yaml means the papers' code: where the suite offers a choice the papers' code made
one way (noise across tensors, what a member is scored on, the reward's format term), paper.yaml
makes it that way, as ../shared/reference/METHODS.md records it; the other way stays available
as an ablation."""

import dataclasses
import typing

import pytest

from core import config
from jobs import validation

PAPER_CHOICES = [
    # (method, key, the paper's code, where METHODS.md says so)
    ("mezo", "noise", "iid", "3.1 step 2: MeZO draws z tensor by tensor from one generator, i.i.d. across tensors"),
    ("sazo", "noise", "iid", "3.2 step 2: SAZO's step is MeZO's (a reconstruction; MeZO's noise)"),
    ("randopt", "noise", "shared", "0: RandOpt, CoRP, ESSAM and Qiu et al. re-seed every tensor with the same seed"),
    ("corp", "noise", "shared", "0: as above"),
    ("essam", "noise", "shared", "0: as above"),
    ("essam_f", "noise", "shared", "0 and 5: ESSAM-F is a diff of the ESSAM code"),
    ("randopt", "score", "correctness", "4.1 step 3: a member's reward is the mean correctness on the support set"),
    ("corp", "score", "correctness", "4.2 Stage 0 and 2: mean correctness; fixes and regressions per example, 0/1"),
]
FORMAT_WEIGHT = 0.1
"""METHODS.md 5: ESSAM's reward is correctness + 0.1 x format reward, the harness's reward.format_weight term."""

PAPER = validation.load(config.REPO / "config" / "paper.yaml")


@pytest.mark.parametrize("method, key, paper, source", PAPER_CHOICES, ids=[f"{m}.{k}" for m, k, *_ in PAPER_CHOICES])
def test_paper_yaml_makes_the_paper_code_choice_and_keeps_the_other_as_an_ablation(method, key, paper, source):
    assert getattr(PAPER.methods[method], key) == paper, f"METHODS.md {source}"
    choices = typing.get_args(typing.get_type_hints(type(PAPER.methods[method]))[key])
    assert paper in choices and len(choices) > 1
    for other in set(choices) - {paper}:
        ablation = dataclasses.replace(PAPER,
                                       methods={method: dataclasses.replace(PAPER.methods[method], **{key: other})})
        assert getattr(validation.validate(config.to_dict(ablation)).methods[method], key) == other


def test_paper_yaml_reward_has_essam_format_term():
    assert PAPER.reward.format_weight == FORMAT_WEIGHT
