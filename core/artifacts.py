"""The one artifact type the evaluator accepts, whatever a method produced.

`artifact.json` has a `kind`:
- `model`: a directory `from_pretrained` loads (merged weights, or the base model itself);
- `adapter`: a PEFT adapter directory on top of `base`;
- `seeds`: the base model plus sum_j coef_j * noise(seed_j) (`terms`, noise `mode`);
- `ensemble`: `members`, each an artifact of the kinds above, answering by majority vote.
`members` yields the models to query for one answer, one at a time, so an ensemble of K
seed-list members costs one model in memory and K inference passes per answer.

Its fields are typed by `core.contract.Artifact`, defined beside the run a method gets so that
naming a method's return type imports none of the loading code here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import torch

from core import meters, models
from core.contract import Artifact
from core.errors import NogradError
from core.outputs import atomic_dir
from core.perturb import combine_, noise_device


def inference_passes(artifact: Artifact) -> int:
    return len(artifact["members"]) if artifact["kind"] == "ensemble" else 1


def load(spec: Artifact, dtype: str = "float32", device: str = "auto"):
    """(model, tokenizer) of a single-model artifact; `base` is the path of the starting model."""
    kind = spec["kind"]
    if kind == "model":
        return models.load(spec["path"], dtype, device)
    model, tokenizer = models.load(spec["base"], dtype, device)
    if kind == "adapter":
        from peft import PeftModel

        return PeftModel.from_pretrained(model, spec["path"]).merge_and_unload(), tokenizer
    if kind == "seeds":
        # Rebuilt from the numbers it was trained with: on the CPU, or on the GPU model that drew
        # them (`perturb.noise_device`; artifacts that do not say were drawn on the CPU).
        drawn, here = spec.get("noise_device", "cpu"), noise_device(model.device)
        if drawn not in (here, "cpu"):
            raise NogradError(f"a model stored as seeds drew its noise on {drawn}; rebuilt on {here} the same seeds "
                              f"give other weights: evaluate it on a {drawn}")
        # A plain list, not `trainable`: one transient fp32 copy of a tensor at a time, no master
        # kept for the evaluation; below fp32 each weight becomes the cast of fp32(base) + sum.
        where = model.device
        combine_(list(model.to(drawn if drawn == "cpu" else where).parameters()),
                 [tuple(term) for term in spec["terms"]], spec.get("mode", "iid"))
        return model.to(where), tokenizer
    raise ValueError(f"unknown artifact kind {kind!r}")


def specs(artifact: Artifact) -> list[Artifact]:
    """The single-model artifacts an artifact answers with: its members, or itself."""
    members = artifact["members"] if artifact["kind"] == "ensemble" else [artifact]
    return [{"base": artifact.get("base"), **spec} for spec in members]


def each_member(artifact: Artifact, meter: meters.Meters, dtype: str = "float32",
                device: str = "auto") -> Iterator[tuple]:
    """(model, tokenizer) for each member in turn, metered; one member in memory at a time."""
    for spec in specs(artifact):
        model, tokenizer = load(spec, dtype, device)
        meter.attach(model)
        yield model, tokenizer
        meter.detach()


def served(spec: Artifact, directory: Path, dtype: str = "float32") -> str:
    """A directory holding a single-model artifact's weights, for an engine that loads weights
    from disk (vLLM): a model's own path; else the model `load` builds, written to `directory`
    once (an adapter merged into its base, a seed list applied)."""
    if spec["kind"] == "model":
        return spec["path"]
    if not (directory / "config.json").exists():
        model, tokenizer = load(spec, dtype, "cpu" if spec.get("noise_device", "cpu") == "cpu" else "auto")
        with atomic_dir(directory) as tmp:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
        del model
        if torch.cuda.is_available():
            torch.cuda.empty_cache()  # the engine that serves it takes its share of what is free
    return str(directory)
