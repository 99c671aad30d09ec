"""The Qwen leaderboard's rows (conf/experiment/leaderboard_qwen05/): each composes, pins what the SmolLM2 row of
the same name pins but the generator and its dtype, and its pipeline settings build."""
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from orthrus_rag.eval.leaderboard import BOARDS, row_names
from orthrus_rag.launch import CONF_DIR
from orthrus_rag.rag.testing import ScriptedReasoner
from orthrus_rag.pipelines import build_pipeline

NAMES = row_names(board=BOARDS["qwen05"])


def composed(row: str):
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=[f"+experiment={row}"])


def plain(value):
    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value


def test_the_qwen_rows_are_the_reported_pipelines_and_stay_off_the_smollm2_leaderboard():
    assert NAMES == ["ircot", "iter_retgen", "no_retrieval", "standard_rag", "standard_rag_k15"]
    assert set(NAMES) <= set(row_names())  # each has its SmolLM2 row; each board reads only its own folder
    assert not set(row_names()) & {"_pinned", "leaderboard_qwen05"}


@pytest.mark.parametrize("name", NAMES)
def test_a_qwen_row_pins_the_smollm2_settings_but_the_generator_and_its_dtype(name):
    qwen, smol = composed(f"leaderboard_qwen05/{name}"), composed(f"leaderboard/{name}")
    assert qwen.model.name == "qwen2.5-coder-0.5b-instruct" and smol.model.name == "smollm2-135m-instruct"
    assert (qwen.runtime.dtype, smol.runtime.dtype) == ("bfloat16", "float32")  # the dtype dev ran the choices in
    for key in ("dataset", "embedder", "index", "runtime", "metrics", "workers", "concurrency"):
        if key == "runtime":
            qwen.runtime.dtype = smol.runtime.dtype
        assert plain(qwen[key]) == plain(smol[key]), key
    assert qwen.pipeline.name == smol.pipeline.name and (qwen.dataset.split, qwen.dataset.limit) == ("test", 200)
    settings = OmegaConf.to_container(qwen.pipeline)
    pipeline = build_pipeline(settings.pop("name"), None, ScriptedReasoner([]), **settings)
    assert pipeline.settings() == settings | {"demos": pipeline.demos}
