"""`orthrus-rag-train-adapter`: train a LoRA embedding adapter for the shared backbone (see conf/train_adapter.yaml).

    orthrus-rag-train-adapter                                  # 2Wiki titles + dev questions -> adapters/...
    orthrus-rag-train-adapter output=my-adapter train.max_steps=200 train.pooling=last
"""
from __future__ import annotations

from pathlib import Path

from hydra.utils import to_absolute_path
from omegaconf import DictConfig

from orthrus_rag.launch import launch
from orthrus_rag.models import ModelNotFoundError
from orthrus_rag.settings import UserError, plain, typed, user_errors
from orthrus_rag.training import PairSource, TrainResult, TrainSettings, train_adapter

APP = "orthrus-rag-train-adapter"


def settings_from(cfg: DictConfig) -> tuple[TrainSettings, PairSource]:
    train = {"model": cfg.model.name, "output": to_absolute_path(cfg.output), **plain(cfg.train)}
    data = plain(cfg.data)
    for key in ("corpus", "questions"):
        if data.get(key):
            data[key] = to_absolute_path(data[key])
    settings, source = typed(TrainSettings, train, "train"), typed(PairSource, data, "data")
    if not Path(source.corpus).is_file():
        raise UserError(f"data.corpus: no file {source.corpus}; give a jsonl corpus of {{id, title, text}}")
    if source.questions and not Path(source.questions).is_file():
        raise UserError(f"data.questions: no file {source.questions}; give a jsonl question file or null")
    return settings, source


def run(cfg: DictConfig) -> TrainResult:
    settings, source = settings_from(cfg)
    with user_errors(ValueError, ModelNotFoundError):  # bad settings or pairs; model.name or distill_from not found
        result = train_adapter(settings, source)
    print(f"adapter written to {result.output} after {result.steps} steps in {result.seconds:.0f} s; "
          f"final loss {result.final_loss:.4f}; held-out recall "
          f"{result.recall_before} -> {result.recall_after}")
    return result


def main() -> None:
    launch(APP, "train_adapter", run)


if __name__ == "__main__":
    main()
