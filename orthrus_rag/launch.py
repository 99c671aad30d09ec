"""What the Hydra apps share: the config folder, with the defaults of the engine, the index and each pipeline
registered from their dataclasses, launching an app, and one-line exits for user mistakes (`UserError`). The stack
an app runs is planned and built by `orthrus_rag.stack.StackPlan`."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any, Callable, TypeVar

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig

from orthrus_rag.settings import UserError

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
T = TypeVar("T")


def settings_node(cls: type, skip: tuple[str, ...] = (), **extra: Any) -> type:
    """`cls`'s init fields (less `skip`, plus `extra` names with their values first) with its defaults, as a
    dataclass Hydra can store; values are typed `Any` there, the project's own checks name a wrong one."""
    fields = [(name, Any, dataclasses.field(default=value)) for name, value in extra.items()]
    fields += [(f.name, Any, dataclasses.field(default=f.default, default_factory=f.default_factory))
               for f in dataclasses.fields(cls) if f.init and f.name not in skip]
    return dataclasses.make_dataclass(f"{cls.__name__}Settings", fields)


def register_defaults() -> None:
    """The dataclasses' defaults as configs the YAML files start from, so each default is written once
    (docs/architecture.md#configuration)."""
    from orthrus_rag.engine import EngineConfig
    from orthrus_rag.index_plan import IndexSpec
    from orthrus_rag.pipelines import PIPELINES
    from orthrus_rag.rag.remote import EndpointSettings

    store = ConfigStore.instance()
    store.store(group="runtime", name="engine_defaults", node=settings_node(EngineConfig, ("generator", "embedder")))
    for group in ("model", "embedder"):  # untyped: each group's YAML adds its own keys
        store.store(group=group, name="endpoint_defaults", node=dataclasses.asdict(EndpointSettings()))
    store.store(group="index", name="index_defaults", node=settings_node(IndexSpec))
    for name, cls in PIPELINES.items():
        store.store(group="pipeline", name=f"{name}_defaults", node=settings_node(cls, ("retriever", "reasoner"),
                                                                                   name=name))


register_defaults()


def guarded(app: str, task: Callable[[DictConfig], T]) -> Callable[[DictConfig], T]:
    """`task` with UserError turned into a one-line message and exit status 2."""

    def run(cfg: DictConfig) -> T:
        try:
            return task(cfg)
        except UserError as error:
            print(f"{app}: error: {error}", file=sys.stderr)
            raise SystemExit(2)

    run.__name__ = task.__name__
    return run


def launch(app: str, config_name: str, task: Callable[[DictConfig], T]) -> None:
    """Run `task` as a Hydra app over `conf/<config_name>.yaml`, user errors as one-line messages."""
    if not (CONF_DIR / f"{config_name}.yaml").is_file():
        raise SystemExit(f"config folder {CONF_DIR} with {config_name}.yaml not found: install orthrus-rag from "
                         "its repository (pip install -e .)")
    hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name=config_name)(guarded(app, task))()
