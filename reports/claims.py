"""Claim checks: does each seed paper's headline claim hold, at the size it states, at the scale of this run?

Each claim is one declarative entry in CLAIMS: the paper, its figure (from
../shared/reference/METHODS.md), the comparison it needs (reports/measures.py) and the rule that
turns the comparison into a verdict. `check_all` is the one function that applies them; no verdict
is set by hand. The verdicts, and when each is given, are those of reports/verdicts.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from reports.intervals import Estimate
from reports.measures import ClusterSpeedup, PairedDifference, QueriesToLoss, RecoveredGain, RetainedGain, SavingRatio
from reports.scores import PASS
from reports.verdicts import (
    INCONCLUSIVE,
    NOT_SUPPORTED,
    SUPPORTED,
    Evidence,
    SignTest,
    Threshold,
    Unavailable,
    holm,
    plural,
    resolution,
)

RETAINED = (
    "non-inferiority on the share of GRPO's gain over the base model kept: the margin (method − base) − f (GRPO − "
    "base), f = report.retained_share (0.8 by default), greedy accuracy; supported when it is shown above 0 (the "
    "method keeps more than f of GRPO's gain), not supported when it is shown at or below 0, inconclusive "
    "otherwise; GRPO's own gain over the base model must be shown above 0 first. A method equal to the base model "
    "has a margin of −f times GRPO's gain, so it cannot match a GRPO that moved. The equivalence reading beside it "
    "(TOST at ±{delta:g} pp, the 90% interval of method − GRPO) is shown, not judged")
PARITY = Threshold(0.0, 0.0, RETAINED.format(delta=1))
"""Parity with GRPO, judged as retained share."""
EQUIVALENCE = 0.01
"""Delta of the parity claims' TOST reading: ESSAM's paper reports ESSAM 78.27%, GRPO 78.34% and PPO 77.72% on
GSM8K and calls them on par: the three lie within 0.62 points, rounded up to 1. ESSA's paper gives no parity figure
(only gains over GRPO), so its row takes the same."""
FGRPO_GAIN = 0.062
"""F-GRPO's reported gain in math pass@256 over GRPO (64.1 → 70.3)."""
CORP_EFFECT = 0.0405
"""CoRP's recovery claim in the margin's units: full recovery of the paper's 8.1-point gain over the base model
lies 4.05 points above half recovery."""


def gain_rule(effect: float, what: str) -> Threshold:
    """A gain of stated size: supported when shown above 0 with its interval still reaching half the
    paper's effect; not supported when shown wholly below half of it (no gain included)."""
    half = effect / 2
    return Threshold(
        0.0, half, f"{what}: supported when it is shown above 0 and its interval reaches at least half the paper's "
                   f"effect ({100 * half:.2f} pp of {100 * effect:.2f}); not supported when it is shown below half "
                   f"the paper's effect (which includes no gain at all); inconclusive otherwise", effect=half)


@dataclass(frozen=True)
class Claim:
    key: str
    paper: str
    """The method whose paper makes the claim (its citation in 'How to cite')."""
    statement: str
    paper_figure: str
    comparison: object
    rule: Threshold | None
    """None where no run of this suite can test the claim (the comparison says why)."""


CLAIMS: tuple[Claim, ...] = (
    Claim(
        "essa_parity", "essa", "ESSA matches GRPO on math",
        "matches GRPO; up to +21.9 pp MATH500 accuracy (Qwen2.5-7B); +14.8% PRM800K/MATH500, +12.6% GSM8K "
        "(Qwen2.5-Math-7B)",
        RetainedGain("essa", "math", EQUIVALENCE, control="sft"), PARITY),
    Claim(
        "essa_scaling", "essa", "ESSA's speed-up over GRPO grows with cluster size",
        "reaches a fixed MATH500 accuracy 2x faster than GRPO on 16 GPUs, 6x faster on 128 (Qwen2.5-32B, PRM800K)",
        ClusterSpeedup("essa", "grpo", "math", (16, 128)), None),
    Claim(
        "fgrpo_passk", "fgrpo", "F-GRPO raises pass@256 over GRPO",
        "math pass@256 64.1 → 70.3 (+6.2 pp), pass@1 37.3 → 38.6; Qwen2.5-7B, group size 8",
        PairedDifference("fgrpo", "grpo", "math", PASS),
        gain_rule(FGRPO_GAIN, "the paired difference F-GRPO − GRPO in pass@n, GRPO shown off the base model")),
    Claim(
        "sazo_queries", "sazo", "SAZO reaches MeZO's training loss in fewer queries",
        "up to 6x fewer queries to the same training loss as uniform zeroth-order sampling (abstract only; "
        "SAZO here is a reconstruction)",
        QueriesToLoss("sazo", "mezo"),
        Threshold(1.5, 1.0, "on the held-out loss curves: the target is MeZO's loss at step 0 minus 90% of its "
                            "decrease from step 0 to its last point; by the sign test over paired runs, supported "
                            "when SAZO reaches it with more than 1.5x fewer queries than MeZO in more runs than chance "
                            "gives (a clear margin; the paper's 6x is its best case), not supported when it needs at "
                            "least as many (or never gets there) in more runs than chance gives; inconclusive "
                            "otherwise, or where MeZO's loss does not decrease beyond noise. All of 3 paired runs "
                            "decide nothing (p = 0.125): at least 6 are needed")),
    Claim(
        "corp_recovery", "corp", "CoRP's single model recovers over half of RandOpt's vote gain with a tenth of the "
                                 "perturbations",
        "recovers more than half of the 50-member majority vote's gain with 500 vs 5000 perturbations; +8.1 points "
        "over the base model on average (5 models x 5 tasks)",
        RecoveredGain("corp", "randopt", "base"),
        gain_rule(CORP_EFFECT, "preconditions: CoRP's first stage draws at most a tenth of RandOpt's population (the "
                               "paper's 500 vs 5,000; all stages and forward passes are shown beside it) and "
                               "RandOpt's vote gains over the base model (interval above 0); then the margin CoRP − "
                               "base − ½(RandOpt − base), greedy, whose paper size is 4.05 pp (full recovery of "
                               "8.1 points over half recovery)")),
    Claim(
        "essam_parity", "essam", "ESSAM matches GRPO on GSM8K",
        "GSM8K accuracy averaged over models: ESSAM 78.27%, GRPO 78.34% (PPO 77.72%)",
        RetainedGain("essam", "gsm8k", EQUIVALENCE), PARITY),
    Claim(
        "essam_memory", "essam", "ESSAM needs about 10x less memory than GRPO (18x less than PPO)",
        "GPU memory 10x lower than GRPO and 18x lower than PPO on average (PPO on an 8B model: 314.44 GiB); PPO is "
        "not in this suite, so the 18x is not tested",
        SavingRatio("essam", "grpo", "gsm8k"),
        Threshold(5.0, 1.0, "by the t-test of the per-seed log ratio of peak training memory, GRPO's over ESSAM's: "
                            "supported when it is shown above 5x (half the paper's 10x); not supported when it is "
                            "shown at or below 1x (no saving); inconclusive in between, where fixed costs (runtime, "
                            "activations) can hide a saving at small scale. ESSAM's figure includes its fp32 master "
                            "copy of a low-precision model's weights, shown apart")),
)


def rule_text(claim: Claim) -> str:
    """The rule a claim's verdict follows, in words: its threshold, or why no run can test it."""
    return claim.rule.statement if claim.rule is not None else claim.comparison.statement


def check(claim: Claim, evidence: Evidence) -> dict:
    """The row of one claim judged alone (a family of one; see `check_all`)."""
    return check_all(evidence, (claim,))[0]


def check_all(evidence: Evidence, claims=CLAIMS) -> list[dict]:
    """Every claim's row: the paper's figure, ours with its scale, the verdict and the rule it
    followed or why the run could not tell, and the smallest effect the run could have detected.

    A claim is tested where its comparison gave a test, its preconditions hold, each compared
    method has `min_seeds` training seeds and its scores vary. The tested claims are one family:
    each has the p-value 2 min(p above the support bar, p below the refute bar), and Holm's
    step-down method takes them from the smallest p up, the i-th of m at level alpha / (m - i + 1)
    (alpha: `report.family_alpha`), stopping at the first that does not clear its level; a claim
    that clears it is not supported where its quantity is shown at or below the refute bar at that
    level, else supported. The chance that any definite verdict is wrong is then at most alpha."""
    rows, tested = [], []
    confidence = evidence.intervals.confidence
    for claim in claims:
        row = {"key": claim.key, "paper": claim.paper, "claim": claim.statement, "paper_figure": claim.paper_figure,
               "detectable": None, "p_value": None}
        try:
            finding = claim.comparison.measure(evidence)
        except Unavailable as unavailable:
            rows.append({**row, "ours": unavailable.ours, "scale": unavailable.scale, "verdict": unavailable.verdict,
                         "reason": unavailable.reason})
            continue
        if claim.rule is None:
            raise ValueError(f"claim {claim.key} has no rule, yet its comparison gave a test")
        test, rule = finding.test, claim.rule
        low, high = test.interval(confidence)
        doubts = list(finding.doubts)
        if finding.seeds < evidence.min_seeds:
            doubts.append(f"this run has {plural(finding.seeds, 'training seed')} of a compared method, and a "
                          f"definite verdict needs at least {evidence.min_seeds} of each (report.min_seeds)")
        if isinstance(test, Estimate) and test.se == 0:
            doubts.append(f"every one of its {test.problems:,} problems gives the same score in every seed: an "
                          "interval of no width is no evidence, and this many problems cannot resolve less than "
                          f"{100 * resolution(test.problems, confidence):.1f} pp")
        p = min(1.0, 2 * min(test.p_above(rule.support), test.p_below(rule.refute)))
        rows.append({**row, "ours": finding.ours, "scale": finding.scale, "interval": [float(low), float(high)],
                     "p_value": p, "doubts": doubts, "test": test, "rule": rule})
        if not doubts:
            tested.append(len(rows) - 1)
    alpha = float(evidence.setting("family_alpha"))
    family = len(tested)
    for index, (rank, level, cleared) in zip(tested, holm([rows[i]["p_value"] for i in tested], alpha)):
        row = rows[index]
        verdict = INCONCLUSIVE if not cleared else (
            NOT_SUPPORTED if 2 * row["test"].p_below(row["rule"].refute) <= level else SUPPORTED)
        step = (f"Holm's step {rank} of {family} at family-wise level {alpha:g}: p = {row['p_value']:.2g} "
                f"against {level:.2g}")
        if verdict != INCONCLUSIVE:
            row["reason"] = f"{row['rule'].statement}. {step}"
        elif row["p_value"] <= 1 - confidence:
            row["reason"] = (f"its test alone would decide it at {confidence:.0%}, but not at the family-wise level "
                             f"({step}, over every claim this run tests). Rule: {row['rule'].statement}")
        elif isinstance(row["test"], SignTest):
            row["reason"] = (f"too few paired runs lie beyond either bar for chance to be ruled out at "
                             f"{confidence:.0%} ({step}). Rule: {row['rule'].statement}")
        else:
            row["reason"] = (f"the interval lies neither wholly beyond the claim's bar nor wholly short of it "
                             f"({step}). Rule: {row['rule'].statement}")
        row["verdict"] = verdict
    for row in rows:
        if "test" not in row:
            continue
        test, rule, doubts = row.pop("test"), row.pop("rule"), row.pop("doubts")
        if isinstance(test, Estimate):
            # Never below what the problems can resolve: [0, 0] from all-zero data is not power.
            row["detectable"] = max(float(test.detectable(alpha / max(family, 1))),
                                    resolution(test.problems, confidence))
            if row.get("verdict") in (None, INCONCLUSIVE) and rule.effect and row["detectable"] > rule.effect:
                doubts = doubts + [f"the smallest effect this run could detect at 80% power is "
                                   f"{100 * row['detectable']:.1f} pp, more than the {100 * rule.effect:.1f} pp the "
                                   "claim turns on: a larger run is needed (nograd plan)"]
        if "verdict" not in row:
            row["verdict"], row["reason"] = INCONCLUSIVE, "; ".join(doubts)
        elif len(doubts) and row["verdict"] == INCONCLUSIVE:
            row["reason"] += "; " + "; ".join(doubts)
    return rows
