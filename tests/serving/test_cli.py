"""The Hydra config maps onto EngineConfig and ServerSettings; the real RAG answers through the engine."""
from __future__ import annotations

import dataclasses

import pytest
from hydra import compose, initialize_config_dir

from orthrus_rag.launch import CONF_DIR
from orthrus_rag.engine import EngineConfig
from orthrus_rag.serving.cli import server_settings, stack_plan
from orthrus_rag.serving.errors import RagInputError
from orthrus_rag.serving.rag_service import build_rag, pipeline_groups
from orthrus_rag.serving.settings import ServerSettings, served_name
from orthrus_rag.settings import UserError
from tests.serving.conftest import rag_plan


def config(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="serve", overrides=list(overrides))


def engine_config(cfg) -> EngineConfig:
    return stack_plan(cfg, server_settings(cfg)).engine


def test_the_server_group_starts_from_the_settings_defaults_alone():
    from omegaconf import OmegaConf

    composed = OmegaConf.to_container(config().server, resolve=True)
    del composed["rag"]["pipelines"]  # conf/serve.yaml fills them from the pipeline group
    assert composed == ServerSettings().model_dump(exclude={"embedding": True, "rag": {"pipelines": True}})
    yaml = (CONF_DIR / "server" / "default.yaml").read_text(encoding="utf-8")
    assert [line for line in yaml.splitlines() if line and not line.startswith(("#", "defaults:", "  - "))] == []


def test_defaults_bind_loopback_and_map_runtime_one_to_one(monkeypatch):
    monkeypatch.delenv("ORTHRUS_RAG_API_KEY", raising=False)
    cfg = config("runtime.max_waiting=7", "server.port=9001")
    engine = engine_config(cfg)
    assert {f.name for f in dataclasses.fields(EngineConfig)} == set(cfg.runtime) | {"generator", "embedder"}
    assert (engine.generator, engine.embedder, engine.max_waiting) == ("smollm2-135m-instruct", "all-minilm-l6-v2", 7)
    settings = server_settings(cfg)
    assert (settings.host, settings.port, settings.api_key) == ("127.0.0.1", 9001, None)
    assert settings.embedding.pooling == "mean" and settings.rag.pipeline in settings.rag.pipelines


def test_backbone_embedder_and_env_api_key(monkeypatch):
    monkeypatch.setenv("ORTHRUS_RAG_API_KEY", "k")
    cfg = config("embedder=backbone")
    assert engine_config(cfg).embedder is None
    settings = server_settings(cfg)
    assert settings.embedding.model == "backbone" and settings.api_key == "k"


def test_served_names():
    assert served_name("smollm2-135m-instruct") == "smollm2-135m-instruct"
    assert served_name("/models/Llama-3-8B-Instruct") == "Llama-3-8B-Instruct"
    assert served_name(None) is None


async def test_real_rag_answers_with_passages_and_trace(engine, tmp_path):
    plan = rag_plan(engine.config, tmp_path / "index", {"standard_rag": {"k": 3, "max_tokens": 4, "num_demos": 0}})
    rag = await build_rag(engine, plan, "standard_rag")
    result = await rag("Which river flows through the capital?", None)
    assert isinstance(result.prediction, str) and len(result.passages) == 3
    assert [event.kind for event in result.trace] == ["retrieve", "reason"]
    with pytest.raises(RagInputError):
        await rag("q", "ircot")


def test_rag_serves_the_pipeline_group_entries_as_the_experiments_run_them():
    from orthrus_rag.pipelines import PIPELINES

    cfg = config("server.rag.pipelines.ircot.k=8", "+pipeline@server.rag.pipelines.k15=standard_rag_k15")
    rag = server_settings(cfg).rag
    assert set(rag.pipelines) == {"no_retrieval", "standard_rag", "ircot", "iter_retgen", "k15"}
    ircot = PIPELINES["ircot"](None, None, **{k: v for k, v in rag.pipelines["ircot"].items() if k != "name"})
    assert (ircot.k, ircot.demo_turns, ircot.passage_order) == (8, True, "best_last")
    assert rag.pipelines["k15"]["name"] == "standard_rag" and rag.pipelines["k15"]["k"] == 15


def test_server_settings_of_the_wrong_type_are_one_line_errors(monkeypatch, capsys, tmp_path):
    """Each is refused before anything loads: the generator at /nowhere would fail otherwise."""
    from orthrus_rag.serving.cli import main

    not_questions = tmp_path / "passages.jsonl"
    not_questions.write_text('{"id": "p1", "title": "T", "text": "a passage"}\n', encoding="utf-8")
    for override, key in (("server.port=abc", "server.port"), ("server.rag.pipelines.ircot.k=abc", "pipeline.k"),
                          ("server.log_level=verbose", "server.log_level"),
                          ("server.rag.pipeline=nope", "server.rag.pipeline"),
                          ("server.ui.dataset=/nowhere/questions.jsonl", "server.ui.dataset"),
                          (f"server.ui.dataset={not_questions}", "server.ui.dataset"),
                          ("embedder.pooling=max", "embedder.pooling")):
        monkeypatch.setattr("sys.argv", ["orthrus-rag-serve", override, "model.name=/nowhere"])
        with pytest.raises(SystemExit) as exit_info:
            main()
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.startswith(f"orthrus-rag-serve: error: {key}")
        assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("override,key", [("server.log_level=INFO", "server.log_level"),
                                          ("server.rag.pipeline=self_ask", "server.rag.pipeline"),
                                          ("embedder.normalize=maybe", "embedder.normalize")])
def test_each_group_names_its_own_key(override, key):
    with pytest.raises(UserError) as error:
        server_settings(config(override))
    assert str(error.value).startswith(f"{key}: "), error.value


def test_the_default_pipeline_may_be_any_when_the_pipelines_are_not_listed():
    settings = ServerSettings.from_config({"rag": {"pipeline": "ircot"}})
    assert pipeline_groups(settings.rag) == {"ircot": {"name": "ircot"}}


def test_a_remote_model_serves_rag_on_one_replica_only():
    cfg = config("model.endpoint=http://127.0.0.1:8000/v1")
    assert stack_plan(cfg, server_settings(cfg)).remote
    for override, why in (("server.rag.enabled=false", "enable RAG or unset them"),
                          ("server.replicas=2", "set server.replicas=1")):
        cfg = config("model.endpoint=http://127.0.0.1:8000/v1", override)
        with pytest.raises(UserError, match=why):
            stack_plan(cfg, server_settings(cfg))
