"""Do the report's intervals cover? Crossed seeds x problems data simulated with known truth, through
reports/intervals.py, the code every interval and verdict of the report goes through.

The model: a test problem is a draw u from the uniform distribution, and method m solves it in
training seed s with probability sigmoid(logit q_m(u) + b_ms), where q_m is the quantile function
of a Beta distribution with the method's accuracy as its mean and the concentration that gives the
stated flip rate (the chance that two seeds of one method disagree on a problem, 2 E[q (1 - q)]),
and b_ms ~ N(0, tau_m) is the training run's luck, tau_m set so that a seed's accuracy spreads by
about `spread` points around the method's. Methods compared on the same problems are coupled
through a shared latent: u_m = Phi(rho z + sqrt(1 - rho^2) w_m). The base model does not train:
one deterministic row, no seed term. The truth, E over problems and seeds, is an exact sum over
the discrete Beta table the draws come from (16,384 quantiles) and a Gauss-Hermite rule over b.

Each cell prints the share of simulated runs whose 95% interval holds the truth, for:
- mean: one method's accuracy (the accuracy table);
- difference: a method 5 points better than another, seeds independent (the paired table, the
  parity and gain claims);
- paired seeds: the same with seed k of both sharing its luck (ESSA against its SFT warm start);
- margin: (method - base) - 0.8 (GRPO - base) with the method keeping 90% of GRPO's 10-point gain
  (the non-inferiority claims), three methods, the base untrained.

    python -m benchmarks.calibration [--runs 2000] [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import time
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

from reports.intervals import crossed

GRID = 16384
"""Quantiles of each Beta distribution that the simulated problems are drawn from."""
COUPLING = 0.8
"""rho: how strongly two methods' problem difficulties go together."""
FLIP = 0.1
"""Flip rate: two seeds of one method disagree on 10% of problems."""
RETAINED = 0.8
"""The share of GRPO's gain the margin column tests against (report.retained_share's default)."""


@dataclass(frozen=True)
class Method:
    """One simulated method: its accuracy, flip rate and seed-to-seed spread (a share, 0.01 = 1 point)."""

    accuracy: float
    spread: float
    flip: float = FLIP

    def table(self) -> np.ndarray:
        """The logits of the Beta quantiles problems are drawn from."""
        mean, flip = self.accuracy, self.flip
        concentration = flip / (2 * mean * (1 - mean) - flip)
        q = stats.beta.ppf((np.arange(GRID) + 0.5) / GRID, mean * concentration, (1 - mean) * concentration)
        q = np.clip(q, 1e-9, 1 - 1e-9)
        return np.log(q) - np.log1p(-q)

    def seed_sd(self, logits: np.ndarray) -> float:
        """The logit-scale spread that moves accuracy by about `spread` (first order)."""
        p = special.expit(logits)
        return self.spread / float(np.mean(p * (1 - p))) if self.spread else 0.0

    def truth(self) -> float:
        logits = self.table()
        nodes, weights = np.polynomial.hermite_e.hermegauss(61)
        weights = weights / weights.sum()
        sd = self.seed_sd(logits)
        return float(sum(w * special.expit(logits + sd * x).mean() for x, w in zip(nodes, weights)))


def draw(rng, methods: list[Method], seeds: list[int], runs: int, problems: int,
         shared_luck: bool = False) -> list[np.ndarray]:
    """(runs x seeds x problems) 0/1 scores of each method on the same simulated problems. A method
    with 0 seeds is the untrained base: one row, no seed term. With `shared_luck`, every trained
    method's seed k has the same luck (in its own logit scale)."""
    z = rng.standard_normal((runs, 1, problems))
    luck = rng.standard_normal((runs, max(seeds), 1))
    out = []
    for method, count in zip(methods, seeds):
        logits = method.table()
        u = special.ndtr(COUPLING * z + np.sqrt(1 - COUPLING ** 2) * rng.standard_normal((runs, 1, problems)))
        base = logits[np.minimum((u * GRID).astype(int), GRID - 1)]
        rows = max(count, 1)
        b = (luck[:, :rows] if shared_luck else rng.standard_normal((runs, rows, 1))) * method.seed_sd(logits)
        if count == 0:
            b = np.zeros((runs, 1, 1))
        out.append((rng.random((runs, rows, problems)) < special.expit(base + b)).astype(float))
    return out


def coverage(rng, runs: int, problems: int, seeds: int, accuracy: float, spread: float,
             confidence: float = 0.95, batch: int = 250) -> dict[str, float]:
    """Share of `runs` simulated runs whose interval holds the truth, per comparison."""
    high = min(accuracy + 0.05, 0.9)
    base, grpo = Method(accuracy, 0.0), Method(min(accuracy + 0.1, 0.9), spread)
    ours = Method(base.accuracy + 0.9 * (grpo.accuracy - base.accuracy), spread)
    cases = {
        "mean": ([Method(accuracy, spread)], [seeds], [1.0], None, False),
        "difference": ([Method(high, spread), Method(accuracy, spread)], [seeds, seeds], [1.0, -1.0], None, False),
        "paired seeds": ([Method(high, spread), Method(accuracy, spread)], [seeds, seeds], [1.0, -1.0], [0, 0], True),
        "margin": ([ours, base, grpo], [seeds, 0, seeds], [1.0, -(1 - RETAINED), -RETAINED], None, False),
    }
    found = {}
    for name, (methods, counts, coefficients, groups, shared) in cases.items():
        truth = sum(c * m.truth() for c, m in zip(coefficients, methods))
        held = 0
        for start in range(0, runs, batch):
            terms = draw(rng, methods, counts, min(batch, runs - start), problems, shared)
            low, high_ = crossed(terms, coefficients, groups).interval(confidence)
            held += int(np.sum((low <= truth) & (truth <= high_)))
        found[name] = held / runs
    return found


CELLS = {
    "accuracy": (0.2, 0.5, 0.8),
    "problems": (200, 1319),
    "seeds": (3, 10),
    "spread": (0.0, 0.01, 0.02, 0.03),
}
QUICK = {"accuracy": (0.5,), "problems": (200, 1319), "seeds": (3,), "spread": (0.0, 0.03)}


def table(runs: int, cells: dict, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for accuracy, problems, seeds, spread in itertools.product(*cells.values()):
        rows.append({"accuracy": accuracy, "problems": problems, "seeds": seeds, "spread": spread,
                     **coverage(rng, runs, problems, seeds, accuracy, spread)})
    return rows


def markdown(rows: list[dict], runs: int) -> str:
    names = [k for k in rows[0] if k not in ("accuracy", "problems", "seeds", "spread")]
    lines = ["| accuracy | problems | seeds | seed spread (pp) | " + " | ".join(names) + " |",
             "|---|---|---|---|" + "---|" * len(names)]
    for row in rows:
        cells = [f"{row['accuracy']:.0%}", f"{row['problems']:,}", str(row["seeds"]), f"{100 * row['spread']:.0f}"]
        lines.append("| " + " | ".join(cells + [f"{100 * row[n]:.1f}%" for n in names]) + " |")
    worst = min(min(row[n] for n in names) for row in rows), max(max(row[n] for n in names) for row in rows)
    se = 100 * np.sqrt(0.95 * 0.05 / runs)
    lines.append("")
    lines.append(f"{runs:,} simulated runs a cell (Monte Carlo standard error {se:.1f} points); every cell within "
                 f"{100 * worst[0]:.1f}-{100 * worst[1]:.1f}%.")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="a few cells (about a minute)")
    args = parser.parse_args(argv)
    started = time.time()
    rows = table(args.runs, QUICK if args.quick else CELLS)
    print(markdown(rows, args.runs))
    print(f"({time.time() - started:.0f} s)")


if __name__ == "__main__":
    main()
