"""Gold-passage recall of one-step dense retrieval (the question as the query, no generation) for the configured
embedder: embeds the corpus through the engine (or finds its cached index), searches each question, and writes
`retrieval.json` (recall@k, all-gold at the largest k) into the Hydra run dir. Same config as `orthrus-rag`;
`+distractors=N` searches a smaller corpus instead: the questions' gold passages and N other passages drawn at
random (seed 0), written to the run dir (cheaper where embedding the whole corpus takes too long; recall on it is
higher than on the whole corpus, so compare embedders within one corpus only).

    python -m eval.embedding_recall dataset=2wiki dataset.split=test dataset.limit=200 embedder=backbone
    python -m eval.embedding_recall dataset=2wiki dataset.split=test dataset.limit=200 +distractors=1000
"""
from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from eval.experiment import DatasetSpec, read_questions
from eval.metrics import all_gold, passage_recall
from eval.run_info import cpu_model
from orthrus_rag.cli.common import launch
from orthrus_rag.rag import DenseRetriever
from orthrus_rag.stack import (IndexSpec, embedder_name, engine_config, index_source, load_index, pooling_params,
                               start_engine, typed)

APP = "embedding-recall"
KS = (5, 15)


def mean(values: list[float | None]) -> float:
    present = [v for v in values if v is not None]
    return round(sum(present) / len(present), 4) if present else 0.0


async def score(cfg: DictConfig, engine, source, questions: list) -> dict:
    pooling = pooling_params(cfg)
    start = time.perf_counter()
    index = await load_index(engine, source, pooling)
    index_seconds = time.perf_counter() - start
    retriever = DenseRetriever(engine, index, pooling)
    found = await asyncio.gather(*(retriever.retrieve(q.question, max(KS)) for q in questions))
    recall = {f"recall@{k}": mean([passage_recall(q.gold_titles, hits[:k]) for q, hits in zip(questions, found)])
              for k in KS}
    return {"embedder": embedder_name(cfg), "embedding": pooling.recipe(), "n": len(questions), **recall,
            f"all_gold@{max(KS)}": mean([all_gold(q.gold_titles, hits) for q, hits in zip(questions, found)]),
            "index_seconds": round(index_seconds, 1), "seconds": round(time.perf_counter() - start, 1),
            "cpu": cpu_model()}


def sample_corpus(corpus: Path, questions: list, distractors: int, out: Path) -> Path:
    """The passages whose titles are gold for `questions`, plus `distractors` others (seeded), as a jsonl file."""
    rows = [json.loads(line) for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    gold = {t.strip() for q in questions for t in q.gold_titles}
    kept = [r for r in rows if r["title"].strip() in gold]
    others = [r for r in rows if r["title"].strip() not in gold]
    kept += random.Random(0).sample(others, min(distractors, len(others)))
    out.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
    return out


def run(cfg: DictConfig) -> dict:
    spec = DatasetSpec.from_config(cfg.dataset)
    questions = read_questions(spec)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    corpus = spec.corpus
    if cfg.get("distractors") is not None:
        corpus = sample_corpus(spec.corpus, questions, int(cfg.distractors), run_dir / "corpus_sample.jsonl")
    source = index_source(typed(IndexSpec, cfg.index, "index"), corpus, embedder_name(cfg))
    engine = start_engine(engine_config(cfg))
    try:
        result = {"dataset": spec.name, "split": spec.split, "limit": spec.limit, "corpus": str(corpus),
                  "passages": len(source.passages),
                  **asyncio.run(score(cfg, engine, source, questions))}
    finally:
        engine.shutdown()
    out = run_dir / "retrieval.json"
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result))
    return result


def main() -> None:
    launch(APP, "config", run)


if __name__ == "__main__":
    main()
