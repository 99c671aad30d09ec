"""What the Hydra apps share: the config folder with each pipeline's defaults registered from its class, launching
an app, and one-line exits for user mistakes (`UserError`). The stack an app runs is planned and built by
`orthrus_rag.stack.StackPlan`."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any, Callable, NoReturn, TypeVar

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig

from orthrus_rag.settings import UserError

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
T = TypeVar("T")


def register_pipeline_defaults() -> None:
    """Each pipeline's settings with its class's defaults as the config `pipeline/<name>_defaults`, which
    conf/pipeline/<name>.yaml starts from: the class is their one source. Values are typed `Any` here; the
    pipeline's own check (`check_settings`) names a wrong one."""
    from pipelines import PIPELINES

    for name, cls in PIPELINES.items():
        settings = [(f.name, Any, dataclasses.field(default=f.default)) for f in dataclasses.fields(cls)
                    if f.init and f.name not in ("retriever", "reasoner")]
        node = dataclasses.make_dataclass(f"{cls.__name__}Settings", [("name", Any, name), *settings])
        ConfigStore.instance().store(group="pipeline", name=f"{name}_defaults", node=node)


register_pipeline_defaults()


def fail(app: str, error: BaseException) -> NoReturn:
    print(f"{app}: error: {error}", file=sys.stderr)
    raise SystemExit(2)


def check_conf_dir(config_name: str) -> None:
    if not (CONF_DIR / f"{config_name}.yaml").is_file():
        raise SystemExit(f"config folder {CONF_DIR} with {config_name}.yaml not found: install orthrus-rag from "
                         "its repository (pip install -e .)")


def guarded(app: str, task: Callable[[DictConfig], T]) -> Callable[[DictConfig], T]:
    """`task` with UserError turned into a one-line message and exit status 2."""

    def run(cfg: DictConfig) -> T:
        try:
            return task(cfg)
        except UserError as error:
            fail(app, error)

    run.__name__ = task.__name__
    return run


def launch(app: str, config_name: str, task: Callable[[DictConfig], T]) -> None:
    """Run `task` as a Hydra app over `conf/<config_name>.yaml`, user errors as one-line messages."""
    check_conf_dir(config_name)
    hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name=config_name)(guarded(app, task))()
