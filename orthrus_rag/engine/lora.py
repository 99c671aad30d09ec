"""An embedding adapter on the shared backbone: a PEFT LoRA folder applied to the embedding rows only.

The packed batch puts backbone embedding rows last, so they form one contiguous segment [start, T). Each target
Linear of the generator is wrapped: generation rows go through the base weights alone, embedding rows get the
LoRA update `scale * B(A(x))` added, all within the same forward pass. (peft's own per-request routing works per
sample, not per token of one packed row.)
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn

from orthrus_rag.engine.errors import InvalidRequestError
from orthrus_rag.models import resolve_adapter_path


@dataclass
class AdapterRows:
    """Where the adapter applies in the current forward pass; None = nowhere."""

    start: int | None = None


class RowLoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, lora_a: torch.Tensor, lora_b: torch.Tensor, scale: float, rows: AdapterRows):
        super().__init__()
        self.base, self.rows, self.scale = base, rows, scale
        self.lora_a = nn.Parameter(lora_a.to(base.weight.device, base.weight.dtype), requires_grad=False)
        self.lora_b = nn.Parameter(lora_b.to(base.weight.device, base.weight.dtype), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base(x)
        start = self.rows.start
        if start is not None and start < x.shape[-2]:
            delta = (x[..., start:, :] @ self.lora_a.T) @ self.lora_b.T
            y[..., start:, :] += self.scale * delta
        return y


def check_adapter_config(config: dict, folder: str | Path) -> None:
    """Refuse a PEFT config this module cannot apply exactly: another PEFT type, or LoRA options beyond one rank
    and alpha on Linear layers (per-module ranks, DoRA, biases, extra trained modules)."""
    unsupported = [key for key, plain in (("use_dora", False), ("rank_pattern", {}), ("alpha_pattern", {}),
                                          ("bias", "none"), ("lora_bias", False), ("modules_to_save", None),
                                          ("fan_in_fan_out", False)) if config.get(key, plain) not in (plain, None)]
    if config.get("peft_type", "LORA") != "LORA" or unsupported:
        what = f"peft_type={config.get('peft_type')}" if not unsupported else ", ".join(
            f"{key}={config[key]!r}" for key in unsupported)
        raise InvalidRequestError(f"embedding adapter {folder}: only plain LoRA on Linear layers is applied "
                                  f"(one rank and alpha, no DoRA, biases or extra modules); it sets {what}",
                                  "embedding_adapter")


def attach_embedding_adapter(model: nn.Module, folder: str | Path) -> AdapterRows:
    """Wrap the adapter's target modules in `model`; returns the handle that selects the rows per step."""
    folder = resolve_adapter_path(folder)
    config_file, weights_file = folder / "adapter_config.json", folder / "adapter_model.safetensors"
    if not config_file.exists() or not weights_file.exists():
        raise FileNotFoundError(f"{folder} is not a PEFT LoRA folder: it needs adapter_config.json and "
                                "adapter_model.safetensors (save one with peft's save_pretrained, or give a shipped "
                                "adapter's name)")
    config = json.loads(config_file.read_text())
    check_adapter_config(config, folder)
    rank, alpha = config["r"], config.get("lora_alpha", config["r"])
    scale = alpha / (rank ** 0.5) if config.get("use_rslora") else alpha / rank
    rows = AdapterRows()
    weights = load_file(str(weights_file))
    if any(".lora_embedding_" in k for k in weights):
        raise InvalidRequestError(f"embedding adapter {folder}: LoRA on embedding layers is not applied; target "
                                  "Linear layers only", "embedding_adapter")
    for name in sorted({k.rsplit(".lora_", 1)[0] for k in weights if ".lora_A." in k}):
        path = name.removeprefix("base_model.model.")
        model.set_submodule(path, RowLoRALinear(model.get_submodule(path), weights[f"{name}.lora_A.weight"],
                                                weights[f"{name}.lora_B.weight"], scale, rows))
    return rows
