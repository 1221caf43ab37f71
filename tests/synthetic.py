"""Rewards known in closed form: `SyntheticRun`, a stand-in for `jobs.train.TrainingRun` for testing
population methods (RandOpt, CoRP) without a language model, and `Target`, a task the tiny
random model can learn and whose reward tells one completion from another."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from core.outputs import write_json
from core.perturb import perturbed, trainable
from evals.tasks import Problem, Task
from jobs.train import TrainingRun

SOLUTION = "a" * 12  # 'a' is 97: every character odd


class Target(Task):
    """The share of a completion's characters whose code point is odd. The tiny random model
    greedily writes newlines (code point 10), so the base model scores 0, while any change of its
    argmax is a coin flip per character: a reward that moves with every completion."""

    name = "target"

    def user_message(self, problem: Problem) -> str:
        return problem.question

    def extract(self, completion: str) -> str | None:
        return completion or None

    def is_correct(self, problem: Problem, completion: str) -> float:
        return sum(ord(c) % 2 for c in completion) / len(completion) if completion else 0.0

    def has_format(self, completion: str) -> bool:
        return False


def write_target_data(data_dir: Path, train: int = 16, test: int = 4) -> Path:
    """`Target`'s splits and manifest in `data_dir`, as `nograd prepare-data` writes a task's."""
    data_dir.mkdir(parents=True)
    for split, count in (("train", train), ("test", test)):
        problems = [Problem(id=f"target/{split}/{i}", question=f"Write the letter {i}.", answer="", solution=SOLUTION)
                    for i in range(count)]
        (data_dir / f"{split}.jsonl").write_text("".join(p.to_json() + "\n" for p in problems))
    source = {"kind": "local", "name": "synthetic", "version": "", "note": "", "size": 0, "hash": ""}
    write_json(data_dir / "manifest.json", {"task": "target", "train": source, "test": source})
    return data_dir


class SyntheticRun:
    """Problem j (an integer) is solved when the parameters have moved along a hidden unit
    direction u by more than its threshold tau_j: reward_j(theta) = 1[<theta - theta_0, u> > tau_j].

    `rollout` returns these 0/1 rewards for the current parameters and keeps, in `scores`, what
    each call asked for (`score`: reward or correctness); `score_population` rolls out each member
    so, in place, as the harness does in one process; `train`, `rng`, `state`, `steps`, `log`
    and the artifact helpers behave as the real run's (no checkpoints, no `evaluate` in `steps`)."""

    method = "synthetic"
    population_workers = 1

    def __init__(self, thresholds, seed: int = 0):
        generator = torch.Generator().manual_seed(seed)
        self.model = torch.nn.Linear(64, 32)  # two tensors, so iid noise differs between them
        with torch.no_grad():
            for param in self.model.parameters():
                param.copy_(torch.randn(param.shape, generator=generator))
        self.base = [p.detach().clone() for p in self.model.parameters()]
        direction = torch.randn(sum(p.numel() for p in self.base), generator=generator, dtype=torch.float64)
        self.direction = direction / direction.norm()
        self.thresholds = np.asarray(thresholds, dtype=np.float64)
        self.train = list(range(len(self.thresholds)))
        self.task = SimpleNamespace(name="synthetic")
        self.rng = np.random.default_rng(seed)
        self.state: dict = {}
        self.history: list[dict] = []
        self.rollouts = 0
        self.scores: list[str] = []
        self._step = 0

    seeds_artifact = staticmethod(TrainingRun.seeds_artifact)
    ensemble_artifact = staticmethod(TrainingRun.ensemble_artifact)

    def displacement(self) -> torch.Tensor:
        """theta - theta_0, flattened in `trainable` order, in float64."""
        return torch.cat([(p.detach() - b).double().reshape(-1) for p, b in zip(self.model.parameters(), self.base)])

    def rewards(self, problems) -> np.ndarray:
        along = float(self.displacement() @ self.direction)
        return np.array([float(along > self.thresholds[j]) for j in problems])

    def rollout(self, problems, n: int = 1, temperature: float = 0.0, top_p: float = 1.0, score: str = "reward"):
        self.rollouts += 1
        self.scores.append(score)
        return None, np.repeat(self.rewards(problems)[:, None], n, axis=1)

    def score_population(self, members, problems, score: str = "reward", noise: str = "iid") -> np.ndarray:
        rewards = []
        for terms in members:
            with perturbed(trainable(self.model), terms, noise):
                rewards.append(self.rollout(problems, score=score)[1][:, 0])
        return np.array(rewards).reshape(len(members), len(problems))

    def steps(self, total: int, evaluate=None, eval_every: int = 0):
        for step in range(total):
            self._step = step
            yield step

    def log(self, logged_elsewhere: dict[str, float] | None = None, **metrics: float) -> None:
        metrics = {**metrics, **(logged_elsewhere or {})}
        self.history.append({"step": self._step, **{k: float(v) for k, v in metrics.items()}})
