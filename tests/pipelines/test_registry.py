import pytest

from orthrus_rag.rag.testing import ScriptedReasoner, ScriptedRetriever
from orthrus_rag.pipelines import PIPELINES, build_pipeline


@pytest.mark.parametrize("name", ["no_retrieval", "standard_rag", "ircot", "iter_retgen", "self_ask"])
async def test_every_pipeline_builds_and_answers(name):
    pipeline = build_pipeline(name, ScriptedRetriever(), ScriptedReasoner(lambda _: "So the answer is: yes."))
    assert isinstance(pipeline, PIPELINES[name])
    answers = await pipeline.run(["q1", "q2"], progress=False)
    assert [a.prediction for a in answers] == ["yes", "yes"]


def test_settings_are_passed_and_reported():
    pipeline = build_pipeline("ircot", ScriptedRetriever(), ScriptedReasoner([]), k=3, answer_from="chain")
    assert pipeline.settings()["k"] == 3 and pipeline.settings()["answer_from"] == "chain"


def test_unknown_names_and_settings_are_clear_errors():
    with pytest.raises(KeyError, match="known"):
        build_pipeline("nope", None, ScriptedReasoner([]))
    with pytest.raises(TypeError, match="no setting"):
        build_pipeline("standard_rag", None, ScriptedReasoner([]), top_k=3)


def pipeline_group(option: str) -> dict:
    """conf/pipeline/<option>.yaml as Hydra composes it (its defaults list applied)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from orthrus_rag.launch import CONF_DIR

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        return OmegaConf.to_container(compose("config", overrides=[f"pipeline={option}"]).pipeline)


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_conf_file_holds_the_class_defaults(name):
    """The reported settings have one source: each class's defaults equal its conf/pipeline file, key for key."""
    from dataclasses import MISSING, fields

    defaults = {f.name: f.default for f in fields(PIPELINES[name]) if f.default is not MISSING}
    assert pipeline_group(name) == {"name": name, **defaults}


def test_conf_variants_are_checked_settings():
    from orthrus_rag.launch import CONF_DIR

    for path in sorted((CONF_DIR / "pipeline").glob("*.yaml")):
        group = pipeline_group(path.stem)
        pipeline = build_pipeline(group.pop("name"), None, ScriptedReasoner([]), **group)
        assert pipeline.settings() == {k: v for k, v in group.items()} | {"demos": pipeline.demos}


def test_wrong_setting_types_are_errors_naming_the_key():
    from orthrus_rag.settings import SettingError

    with pytest.raises(SettingError, match=r"pipeline\.k: expected an integer, got 'abc'"):
        build_pipeline("standard_rag", None, ScriptedReasoner([]), k="abc")
    with pytest.raises(SettingError, match=r"pipeline\.demo_turns: expected true or false"):
        build_pipeline("ircot", None, ScriptedReasoner([]), demo_turns="yes")
