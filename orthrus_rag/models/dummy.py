"""Dummy models: the shapes of real models with random weights, for speed measurements without downloads (the
shipped shapes and the SmolLM2 tokenizer they share: docs/benchmarks.md).

`dummy:<shape>` names a config folder `orthrus_rag/models/configs/<shape>/`. Generators (`config.json`) are built in
memory; embedders (`modules.json`: sentence-transformers loads a folder, and an encoder is small) and LoRA adapters
(`adapter_config.json`, shaped from the model `base_model_name_or_path` names) get random weights written once into
the cache. `load_format=dummy` also applies to any local folder: its config, random weights, its own tokenizer if any.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import torch

from orthrus_rag.files import build_folder_once, cache_dir

Resolve = Callable[[str], Path]  # a model name or folder -> its local folder (registry.resolve_model_path)

PREFIX = "dummy:"
LOAD_FORMATS = ("auto", "dummy")
CONFIGS = Path(__file__).resolve().parent / "configs"
TOKENIZER = CONFIGS / "tokenizer"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".onnx", ".gguf", ".h5", ".msgpack")
SEED = 0


class DummyModelError(ValueError):
    """An unknown dummy shape or a config that cannot be built with random weights."""


def is_dummy(name: str | os.PathLike, load_format: str = "auto") -> bool:
    """Whether `name` loads with random weights: a `dummy:` name, or any model under load_format=dummy."""
    if load_format not in LOAD_FORMATS:
        raise ValueError(f"load_format must be one of {', '.join(LOAD_FORMATS)}; got {load_format!r}")
    return load_format == "dummy" or str(name).lower().startswith(PREFIX)


def shapes() -> list[str]:
    """The shipped dummy shapes (use them as `dummy:<shape>`)."""
    return sorted(p.name for p in CONFIGS.iterdir() if p.is_dir() and p != TOKENIZER)


def kind(folder: Path) -> str:
    """generator, embedder or adapter, from the files a config folder holds."""
    if (folder / "adapter_config.json").is_file():
        return "adapter"
    if (folder / "modules.json").is_file():
        return "embedder"
    if (folder / "config.json").is_file():
        return "generator"
    raise DummyModelError(f"{folder} holds no config.json, modules.json or adapter_config.json")


def resolve_dummy(name: str, resolve: Resolve) -> Path:
    """The folder of `dummy:<shape>`, written into the cache on first use (configs, tokenizer, small weights);
    `resolve` finds the folder of a model a dummy adapter names as its base."""
    shape = name[len(PREFIX):] if name.lower().startswith(PREFIX) else name
    if shape.lower() not in shapes():
        raise DummyModelError(f"no dummy shape {shape!r}; shipped shapes: {', '.join(PREFIX + s for s in shapes())}")
    return materialize(CONFIGS / shape.lower(), shape.lower(), resolve)


def dummy_embedder_folder(name: str | os.PathLike, resolve: Resolve) -> Path:
    """The folder of a dummy embedder: `dummy:<shape>`, or a random-weights copy of any sentence-transformers
    folder (a shipped name or a path, found by `resolve`) in the cache."""
    if str(name).lower().startswith(PREFIX):
        return resolve_dummy(str(name), resolve)
    source = resolve(name)
    if kind(source) != "embedder":
        raise DummyModelError(f"{source} is no sentence-transformers folder (no modules.json)")
    return materialize(source, source.name, resolve)


def materialize(source: Path, name: str, resolve: Resolve) -> Path:
    """A cache folder `<name>-<digest of source>` holding `source`'s files without weights, the SmolLM2 tokenizer
    where `source` has none, and random weights for embedders and adapters; written once (safe when processes race)."""

    def fill(target: Path) -> None:
        shutil.copytree(source, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns(
            *(f"*{suffix}" for suffix in WEIGHT_SUFFIXES), "onnx", "openvino", ".git"))
        what = kind(target)
        if what == "adapter":
            _write_lora(target, resolve)
        else:
            module = target / _transformer_path(target) if what == "embedder" else target
            if not _has_tokenizer(module):
                shutil.copytree(TOKENIZER, module, dirs_exist_ok=True)
            if what == "embedder":
                _write_encoder(module)
        (target / ".complete").touch()

    return build_folder_once(cache_dir() / "dummy" / f"{name}-{_digest(source)}", fill, ".complete")


def _has_tokenizer(folder: Path) -> bool:
    return any((folder / f).is_file() for f in ("tokenizer.json", "tokenizer.model", "vocab.txt", "vocab.json"))


def _digest(folder: Path) -> str:
    """A short hash of the files under `folder` (weights aside) and of the tokenizer: a changed config gets a new
    cache folder."""
    digest = hashlib.sha256()
    for root in (folder, TOKENIZER):
        for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.name.endswith(WEIGHT_SUFFIXES)):
            digest.update(path.relative_to(root).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


# ---- building random weights ------------------------------------------------------------------------------------
def random_model(config, auto_class, dtype: torch.dtype, device: torch.device | str):
    """A transformers model of `config` with its own random initialisation, allocated directly on `device` in
    `dtype` (nothing built elsewhere first); the same weights for the same config, seed and device."""
    device = torch.device(device)
    devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(SEED)
        with torch.device(device):
            model = auto_class.from_config(config, dtype=dtype)
    return model.eval()


def dummy_generator(folder: Path, dtype: torch.dtype, device: torch.device | str):
    """A causal LM of `folder`'s config with random weights on `device`, and the folder's tokenizer (else SmolLM2's)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder if _has_tokenizer(folder) else TOKENIZER)
    check_vocab(config, tokenizer, folder)
    return random_model(config, AutoModelForCausalLM, dtype, device), tokenizer


def check_vocab(config, tokenizer, folder: Path) -> None:
    vocab = config.get_text_config().vocab_size
    if len(tokenizer) > vocab:
        raise DummyModelError(f"{folder}: the tokenizer has {len(tokenizer)} tokens but the model's vocab_size is "
                              f"{vocab}; set vocab_size >= {len(tokenizer)} in its config.json")


def _transformer_path(folder: Path) -> str:
    modules = json.loads((folder / "modules.json").read_text())
    paths = [m.get("path", "") for m in modules if m.get("type", "").endswith("Transformer")]
    if not paths:
        raise DummyModelError(f"{folder}/modules.json has no Transformer module")
    return paths[0]


def _write_encoder(module: Path) -> None:
    """Random weights for the sentence-transformers Transformer module in `module` (float32 safetensors)."""
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    config = AutoConfig.from_pretrained(module)
    check_vocab(config, AutoTokenizer.from_pretrained(module), module)
    random_model(config, AutoModel, torch.float32, "cpu").save_pretrained(module)


def _write_lora(folder: Path, resolve: Resolve) -> None:
    """Random LoRA A and B matrices (peft's key names) for every target Linear of the base model's shape."""
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM

    adapter = json.loads((folder / "adapter_config.json").read_text())
    base = AutoConfig.from_pretrained(resolve(adapter["base_model_name_or_path"]))
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(base)
    generator = torch.Generator().manual_seed(SEED)
    rank, targets, weights = adapter["r"], set(adapter["target_modules"]), {}
    for name, module in skeleton.named_modules():
        if isinstance(module, torch.nn.Linear) and name.rsplit(".", 1)[-1] in targets:
            for part, shape in (("lora_A", (rank, module.in_features)), ("lora_B", (module.out_features, rank))):
                normal = torch.randn(shape, generator=generator) * 0.02
                weights[f"base_model.model.{name}.{part}.weight"] = normal.to(torch.bfloat16)
    save_file(weights, str(folder / "adapter_model.safetensors"))
