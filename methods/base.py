"""The starting model, untrained: the reference every method is compared with."""

from dataclasses import dataclass

from core.contract import Artifact, QueryCounts, Run
from methods import register


@dataclass
class BaseConfig:
    """No settings: the base model is evaluated as loaded."""


@register("base", config=BaseConfig, display="Base model", order=0, outputs="model",
          queries=lambda config, train, model: QueryCounts(), workers=True)
def train(config: BaseConfig, run: Run) -> Artifact:
    return run.base_artifact()
