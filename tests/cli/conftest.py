"""Helpers to run the Hydra apps in-process, on the tiny random models."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import pytest


@pytest.fixture
def tiny_models(tiny_llama_dir: Path, tiny_encoder_dir: Path, tmp_path: Path) -> list[str]:
    """Overrides that run an app on the tiny models, in float32, with the index in a temporary folder."""
    return [f"model.name={tiny_llama_dir}", f"embedder.name={tiny_encoder_dir}", "runtime.dtype=float32",
            f"index.folder={tmp_path / 'index'}"]


@pytest.fixture
def run_app(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Call an app's `main()` as if from the command line with these arguments."""

    def run(main: Callable[[], None], app: str, *args: str) -> None:
        monkeypatch.setattr(sys, "argv", [app, *args])
        main()

    return run
