"""The stack plan's embedder settings: the adapter reaches the engine, and prefixes, pooling and adapter reach the
index manifest and the retriever; the plan checks everything and loads nothing."""
from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from orthrus_rag.launch import CONF_DIR
from orthrus_rag.rag.types import Passage
from orthrus_rag.settings import UserError
from orthrus_rag.index_plan import default_index_folder
from orthrus_rag.stack import StackPlan


def config(embedder: str, **overrides):
    cfg = OmegaConf.create({"model": {"name": "smollm2-135m-instruct"},
                            "embedder": OmegaConf.load(CONF_DIR / "embedder" / f"{embedder}.yaml"),
                            "runtime": {}})  # EngineConfig's defaults
    for key, value in overrides.items():
        OmegaConf.update(cfg, key, value)
    return cfg


def plan(cfg, **kwargs) -> StackPlan:
    return StackPlan.from_config(cfg, pipelines={}, **kwargs)


def engine_config(cfg):
    return plan(cfg).engine


def embedding(cfg):
    return plan(cfg).embedding


def embedder_name(cfg) -> str:
    return plan(cfg, with_index=True).index.embedder_name


def test_backbone_uses_the_shipped_adapter_with_its_prefix():
    cfg = config("backbone")
    assert engine_config(cfg).embedding_adapter.endswith("orthrus_rag/models/adapters/smollm2-135m-2wiki")
    params = embedding(cfg)
    assert params.params.model == "backbone" and params.query_prefix == "query: " and params.passage_prefix == ""
    assert params.passage_max_tokens == 64 and params.for_passages().truncate == 64 and params.params.truncate is None
    assert params.adapter.startswith("smollm2-135m-2wiki@") and len(params.adapter.split("@")[1]) == 12
    assert embedder_name(cfg) == "smollm2-135m-instruct:backbone+smollm2-135m-2wiki"


def test_raw_backbone_and_minilm_have_no_adapter():
    for cfg in (config("backbone_raw"), config("backbone", **{"embedder.adapter": None}), config("minilm")):
        assert engine_config(cfg).embedding_adapter is None and embedding(cfg).adapter is None
    assert embedder_name(config("backbone_raw")) == "smollm2-135m-instruct:backbone"
    assert embedding(config("backbone_raw")).query_prefix == ""


@pytest.mark.parametrize("value", [0, -3, True, 2.5, "64"])
def test_bad_passage_max_tokens_is_a_user_error(value):
    with pytest.raises(UserError, match="embedder.passage_max_tokens must be null"):
        embedding(config("backbone", **{"embedder.passage_max_tokens": value}))


def test_a_bad_max_isa_is_a_user_error_before_anything_loads(monkeypatch):
    from orthrus_rag.models import device

    monkeypatch.setenv(device.MAX_ISA_ENV, "avx9")
    device.cpu_flags.cache_clear()
    try:
        with pytest.raises(UserError, match="ORTHRUS_CPU_MAX_ISA must be avx2 or unset, got 'avx9'"):
            engine_config(config("minilm", **{"runtime.dtype": "float32"}))
    finally:
        monkeypatch.delenv(device.MAX_ISA_ENV)
        device.cpu_flags.cache_clear()


def test_the_recipe_and_the_cache_folder_name_the_dtype_embedded_in(tmp_path):
    from orthrus_rag.models.device import cpu_has_bf16

    auto = "bfloat16" if cpu_has_bf16() else "float32"  # runtime.dtype auto, resolved once, for engine and index
    assert embedding(config("minilm")).recipe()["dtype"] == auto == engine_config(config("minilm")).dtype
    assert embedding(config("backbone", **{"runtime.dtype": "fp32"})).recipe()["dtype"] == "float32"
    with pytest.raises(UserError, match="runtime.dtype: dtype must be one of auto"):
        embedding(config("minilm", **{"runtime.dtype": "int4"}))
    corpus, passages = tmp_path / "c.jsonl", [Passage(text="t", title="", id="1")]
    folders = {default_index_folder(corpus, passages, "m:backbone", dtype) for dtype in ("float32", "bfloat16")}
    assert len(folders) == 2 and all(f.name.startswith("c-") for f in folders)
    assert default_index_folder(corpus, passages, "m:backbone").name.endswith("m_backbone")


def test_runtime_embedding_adapter_wins(lora_dir):
    cfg = config("backbone", **{"runtime.embedding_adapter": str(lora_dir)})
    assert engine_config(cfg).embedding_adapter == str(lora_dir)
    assert embedding(cfg).adapter.startswith(f"{lora_dir.name}@")


def test_adapter_mistakes_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="no PEFT LoRA folder"):
        engine_config(config("backbone", **{"embedder.adapter": str(tmp_path)}))
    with pytest.raises(UserError, match="trained for 'smollm2-135m-instruct'.*backbone_raw"):
        engine_config(config("backbone", **{"model.name": "some/other-model"}))
    (tmp_path / "adapter_config.json").write_text('{"peft_type": "LORA", "r": 4, "use_dora": true}')
    with pytest.raises(UserError, match="only plain LoRA.*use_dora=True"):
        engine_config(config("backbone", **{"embedder.adapter": str(tmp_path)}))


def test_index_records_the_recipe_and_is_refused_the_other_way(run_app, tiny_llama_dir, lora_dir, tmp_path,
                                                               capsys):
    from orthrus_rag.cli.index import main
    from orthrus_rag.rag import DenseRetriever
    from orthrus_rag.rag.retriever import IndexRecipeError
    from orthrus_rag.indexes import DenseIndex, load_corpus
    from orthrus_rag.demo import demo_corpus_path

    common = [f"model.name={tiny_llama_dir}", "embedder=backbone", f"embedder.adapter={lora_dir}",
              "runtime.dtype=float32", f"index.folder={tmp_path / 'index'}"]
    run_app(main, "orthrus-rag-index", *common)
    capsys.readouterr()
    recipe = json.loads((tmp_path / "index" / "manifest.json").read_text())["embedding"]
    assert recipe["pooling"] == "mean" and recipe["query_prefix"] == "query: "
    assert recipe["adapter"].startswith(f"{lora_dir.name}@") and recipe["dtype"] == "float32"
    run_app(main, "orthrus-rag-index", *common, "embedder.pooling=last")
    assert "\nindex built:" in "\n" + capsys.readouterr().out  # another recipe: rebuilt, not reused
    index = DenseIndex.load(tmp_path / "index", json.loads((tmp_path / "index" / "manifest.json").read_text())[
        "embedder"], load_corpus(demo_corpus_path()))
    cfg = config("backbone", **{"model.name": str(tiny_llama_dir), "embedder.adapter": str(lora_dir)})
    with pytest.raises(IndexRecipeError, match="pooling='last'.*pooling='mean'"):
        DenseRetriever(None, index, embedding(cfg))


def test_the_plan_checks_everything_and_plans_an_index_only_for_pipelines_that_retrieve(tmp_path):
    cfg = config("minilm")
    cfg.pipeline = {"name": "no_retrieval"}
    assert StackPlan.from_config(cfg, tmp_path / "no-such-corpus.jsonl").index is None  # the corpus is not read
    cfg.pipeline = {"name": "standard_rag", "k": 3}
    planned = StackPlan.from_config(cfg)
    assert planned.index is not None and len(planned.index.passages) > 0
    assert planned.pipelines == {"standard_rag": {"name": "standard_rag", "k": 3}}
    cfg.pipeline = {"name": "standard_rag", "kk": 3}
    with pytest.raises(UserError, match="pipeline: no setting 'kk'"):
        StackPlan.from_config(cfg)
    for key, value, message in [("runtime.policy", "nope", "runtime.policy must be one of"),
                                ("runtime.max_num_seqs", 0, "runtime.max_num_seqs must be >= 1"),
                                ("runtime.no_such_key", 1, "runtime: no setting 'no_such_key'"),
                                ("runtime.device", "gpu", "runtime.device must be auto, cpu, cuda or cuda:N"),
                                ("runtime.num_threads", 0, "runtime.num_threads must be >= 1"),
                                ("index.retrieval", "sparse", "index.retrieval: expected 'dense' or 'bm25'"),
                                ("index.batch_size", 0, "index.batch_size must be >= 1, got 0"),
                                ("index.batch_size", -4, "index.batch_size must be >= 1, got -4"),
                                ("index.device", "gpu", "index.device: expected 'auto' or 'cpu' or 'cuda', got 'gpu'"),
                                ("embedder.pooling", "foo", "embedder.pooling: pooling must be one of"),
                                ("embedder.model", "other", "embedder.model: model must be None")]:
        with pytest.raises(UserError, match=message):
            StackPlan.from_config(config("minilm", **{key: value, "pipeline": {"name": "standard_rag"}}))


def test_the_index_source_defaults_are_the_index_groups():
    from orthrus_rag.index_plan import IndexSource, IndexSpec

    source, spec = IndexSource(None, [], "e"), IndexSpec()
    assert (source.factory, source.batch_size, source.device) == (spec.factory, spec.batch_size, spec.device)


def test_server_leaderboard_and_experiments_resolve_the_same_retrieval():
    from hydra import compose, initialize_config_dir

    from orthrus_rag.serving.cli import server_settings, stack_plan

    def resolved(config_name: str, *overrides: str):
        with initialize_config_dir(str(CONF_DIR), version_base=None):
            cfg = compose(config_name, overrides=list(overrides))
        planned = stack_plan(cfg, server_settings(cfg)) if config_name == "serve" else StackPlan.from_config(cfg)
        source = planned.index
        return source.retrieval, source.factory, source.embedder_name

    leaderboard = resolved("config", "+experiment=leaderboard/standard_rag")
    assert resolved("serve") == resolved("config") == leaderboard  # the defaults are the leaderboard's
    assert leaderboard[0].mode == "hybrid"
    for overrides in (["index.retrieval=dense"], ["index.retrieval=bm25", "index.rrf_k=30"], ["embedder=backbone"]):
        assert resolved("serve", *overrides) == resolved("config", *overrides)


@pytest.mark.parametrize("key, value, message", [("model.endpoint", "localhost:8000", "model.endpoint must be an http"),
                                                 ("embedder.retries", "two", "embedder.retries: expected an integer"),
                                                 ("embedder.timeout_s", 0, "embedder.timeout_s must be > 0")])
def test_endpoint_settings_are_checked_naming_their_key(key, value, message):
    with pytest.raises(UserError, match=message):
        plan(config("minilm", **{key: value}))


def test_an_unreachable_endpoint_fails_before_any_model_loads(monkeypatch):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    stack = plan(config("minilm", **{"model.endpoint": url}))
    assert stack.remote and stack.generator_endpoint.endpoint == url and stack.embedder_endpoint.endpoint is None
    monkeypatch.setattr(StackPlan, "start_local_engine", lambda self: pytest.fail("a model was loaded"))
    with pytest.raises(UserError, match="cannot be reached.*start the server"):
        stack.start_engine()
