"""The starting model, untrained: the reference every method is compared with."""

from dataclasses import dataclass

from methods import register


@dataclass
class BaseConfig:
    """No settings: the base model is evaluated as loaded."""


@register("base", config=BaseConfig, paper="")
def train(config: BaseConfig, run) -> dict:
    return run.base_artifact()
