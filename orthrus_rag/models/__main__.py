"""`python -m orthrus_rag.models`: resolve, load and run each shipped model once; the install check. An optional
model that is not installed is listed with its install command and does not fail the check."""
from __future__ import annotations

import sys
import time

import torch

from orthrus_rag.models import SHIPPED, ModelNotFoundError, load_embedder, load_generator, resolve_model_path
from orthrus_rag.models.registry import installed


def check(name: str, kind: str) -> str:
    start = time.perf_counter()
    path = resolve_model_path(name)
    if kind == "generator":
        model, tokenizer = load_generator(name)
        with torch.no_grad():
            model(**tokenizer("Hello", return_tensors="pt"))
    else:
        model = load_embedder(name)
        model.encode(["Hello"])
    params = sum(p.numel() for p in model.parameters())
    dtype = next(model.parameters()).dtype
    return f"{name:28} {kind:9} {params / 1e6:7.1f}M  {str(dtype):15} {time.perf_counter() - start:6.1f}s  {path}"


def main() -> int:
    print(f"{'model':28} {'kind':9} {'params':>8}  {'dtype':15} {'load':>7}  folder")
    failed = 0
    for name, model in SHIPPED.items():
        if model.optional and not installed(model):
            print(f"{name:28} optional, not installed: {model.install}", flush=True)
            continue
        try:
            print(check(name, model.kind), flush=True)
        except ModelNotFoundError as err:
            print(f"{name:28} MISSING: {err}", flush=True)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
