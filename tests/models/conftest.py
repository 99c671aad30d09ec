"""Fixtures of the model tests: the optional shipped generator (skipped where not installed, unless required)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from orthrus_rag.models import SHIPPED, resolve_model_path
from orthrus_rag.models.registry import installed

QWEN05 = "qwen2.5-coder-0.5b-instruct"


@pytest.fixture(scope="session")
def qwen05_path() -> Path:
    """The converted Qwen2.5-Coder-0.5B-Instruct folder. The model is optional (./install.sh --models qwen05): its
    tests skip where it is not installed, and fail instead when $ORTHRUS_TEST_REQUIRE_OPTIONAL is 1 (CI sets it)."""
    if not installed(SHIPPED[QWEN05]) and os.environ.get("ORTHRUS_TEST_REQUIRE_OPTIONAL") != "1":
        pytest.skip(f"optional model {QWEN05} not installed: {SHIPPED[QWEN05].install}")
    return resolve_model_path(QWEN05)
