"""Gold-passage recall of one-step retrieval (the question as the query) for each retrieval mode, rows merged into
one JSON file across runs (docs/experiments.md: Hybrid retrieval, with the command; config:
conf/retrieval_recall.yaml; `distractors` in use: docs/embedding-adapter.md).

`distractors=N` searches a smaller corpus instead of the whole one: the questions' gold passages and N others drawn
at random (seed 0), written beside `out`. It is cheaper where embedding the whole corpus takes too long; recall on it
is higher than on the whole corpus, so compare rows within one corpus only (rows of another corpus are dropped).
"""
from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any, Sequence

from hydra.utils import to_absolute_path
from omegaconf import DictConfig

from orthrus_rag.launch import launch
from orthrus_rag.retrieval import RETRIEVAL_MODES, RetrievalSettings, SearchIndexes, make_retriever
from orthrus_rag.settings import UserError
from orthrus_rag.stack import StackPlan

from .datasets import DatasetSpec, read_questions
from .markdown import markdown_table
from .metrics import all_gold, mean_of, passage_recall
from .run_info import environment

APP = "retrieval_recall"


async def score_mode(retriever, questions: list, ks: list[int]) -> tuple[dict, float]:
    """Recall at each k and all-gold at the largest, retrieving max(ks) passages once per question."""
    found = await asyncio.gather(*(retriever.retrieve(q.question, max(ks)) for q in questions))
    recall = {f"@{k}": mean_of([passage_recall(q.gold_titles, p[:k]) for q, p in zip(questions, found)]) for k in ks}
    return recall, mean_of([all_gold(q.gold_titles, p) for q, p in zip(questions, found)])


async def score_all(cfg: DictConfig, plan: StackPlan, engine, questions: list) -> list[dict[str, Any]]:
    """A row per retrieval mode: recall at each k, all gold found at the largest k, and its wall time."""
    cut = plan.embedding.passage_max_tokens
    name = plan.index.embedder_name + (f", passages cut at {cut} tokens" if cut else "")
    loaded, fusion = (await plan.build(engine)).indexes, plan.index.retrieval
    labels = {"dense": f"dense ({name})", "bm25": "bm25",
              "hybrid": f"bm25 + {name} (rrf_k={fusion.rrf_k:g}, candidates={fusion.candidates})"}
    rows = []
    for mode in cfg.modes:
        start = time.perf_counter()
        settings = RetrievalSettings(mode, fusion.rrf_k, fusion.candidates)
        retriever = make_retriever(engine, SearchIndexes(loaded.dense, loaded.bm25, settings), plan.embedding)
        recall, gold = await score_mode(retriever, questions, list(cfg.ks))
        rows.append({"label": labels[mode], "mode": mode, "embedder": None if mode == "bm25" else name,
                     "recall": recall, "all_gold": gold, "n": len(questions),
                     "seconds": round(time.perf_counter() - start, 2)})
    return rows


def check_modes(modes: Sequence[str], ks: Sequence[int]) -> None:
    unknown = [m for m in modes if m not in RETRIEVAL_MODES]
    if unknown or not modes:
        raise UserError(f"modes must be a non-empty list of {', '.join(RETRIEVAL_MODES)}; got {list(modes)}")
    if not ks or any(not isinstance(k, int) or k < 1 for k in ks):
        raise UserError(f"ks must be a non-empty list of integers >= 1; got {list(ks)}")


def sample_corpus(corpus: Path, questions: list, distractors: int, out: Path) -> Path:
    """The passages whose titles are gold for `questions`, plus `distractors` others (seeded), as a jsonl file."""
    rows = [json.loads(line) for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    gold = {t.strip() for q in questions for t in q.gold_titles}
    kept = [r for r in rows if r["title"].strip() in gold]
    others = [r for r in rows if r["title"].strip() not in gold]
    kept += random.Random(0).sample(others, min(distractors, len(others)))
    out.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
    return out


def run_recall(cfg: DictConfig) -> dict[str, Any]:
    check_modes(list(cfg.modes), list(cfg.ks))
    data = DatasetSpec.from_config(cfg.dataset)
    questions = read_questions(data)
    cfg.index.retrieval = "hybrid" if len(set(cfg.modes)) > 1 else cfg.modes[0]  # the indexes the modes need
    out = Path(to_absolute_path(cfg.out))
    corpus = data.corpus
    if cfg.get("distractors") is not None:
        corpus = sample_corpus(data.corpus, questions, int(cfg.distractors), out.with_suffix(".corpus.jsonl"))
    plan = StackPlan.from_config(cfg, corpus, pipelines={}, with_index=True)
    engine = plan.start_engine() if plan.index.retrieval.uses_dense else None  # BM25 alone needs none
    try:
        rows = asyncio.run(score_all(cfg, plan, engine, questions))
    finally:
        if engine is not None:
            engine.shutdown()
    facts = {"dataset": data.name, "split": data.split, "limit": data.limit, "n": len(questions),
             "corpus": str(corpus), "num_passages": len(plan.index.passages), "ks": list(cfg.ks)}
    return write_results(out, facts, rows)


def write_results(path: Path, facts: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge `rows` into the JSON at `path` (rows of another dataset or split are dropped) and print the table."""
    results = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    if {k: results.get(k) for k in facts} != facts:
        results = {}
    results.update(facts, environment=environment())
    results.setdefault("rows", {}).update({row["label"]: row for row in rows})
    path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(recall_table(results))
    print(f"\nwritten to {path}")
    return results


def recall_table(results: dict[str, Any]) -> str:
    ks = results["ks"]
    head = ["retrieval", *(f"recall@{k}" for k in ks), f"all-gold@{max(ks)}"]
    rows = [[row["label"], *(f"{row['recall'][f'@{k}']:.3f}" for k in ks), f"{row['all_gold']:.3f}"]
            for row in results["rows"].values()]
    return markdown_table(head, rows)


def main() -> None:
    launch(APP, "retrieval_recall", run_recall)


if __name__ == "__main__":
    main()
