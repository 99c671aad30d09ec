"""Batches of training pairs: random, or built around BM25 hard negatives (docs/embedding-adapter.md).

In-batch negatives drawn at random are easy: 32 passages about unrelated things. In a `bm25_batches` group every
passage is a hard negative for the seed's query and a training pair of its own, so the hard negatives cost no extra
tokens (the way DPR used BM25 negatives, without a second passage a pair).
"""
from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterator

from orthrus_rag.rag.types import Passage
from orthrus_rag.training.pairs import Pair

BATCHINGS = ("random", "bm25")


def relevant_passages(pairs: list[Pair]) -> dict[str, set[str]]:
    """Each query text's relevant passages (a question with two gold passages has both): never its negatives."""
    relevant: dict[str, set[str]] = defaultdict(set)
    for pair in pairs:
        relevant[pair.query].add(pair.passage_id)
    return dict(relevant)


def random_batches(pairs: list[Pair], size: int, seed: int) -> Iterator[list[Pair]]:
    """Endless seeded epochs of full batches."""
    rng = random.Random(seed)
    while True:
        order = list(pairs)
        rng.shuffle(order)
        for start in range(0, len(order) - size + 1, size):
            yield order[start:start + size]


def bm25_neighbours(pairs: list[Pair], depth: int) -> dict[str, list[str]]:
    """For each distinct query, the ids of the `depth` passages BM25 scores highest for it among the pairs' passages,
    best first, with the query's relevant passages left out."""
    from orthrus_rag.indexes.bm25_index import BM25Index

    texts = {p.passage_id: p.passage for p in pairs}
    ids = list(texts)
    index = BM25Index.build([Passage(text=texts[i], title="", id=i) for i in ids])
    relevant = relevant_passages(pairs)
    neighbours = {}
    for query, positives in relevant.items():
        hits = index.search_text(query, depth + len(positives))
        neighbours[query] = [h.id for h in hits if h.id not in positives][:depth]
    return neighbours


def bm25_batches(pairs: list[Pair], size: int, group_size: int, seed: int, depth: int = 32) -> Iterator[list[Pair]]:
    """Endless seeded batches of `size` pairs made of groups of `group_size`: a seed pair (each pair seeds once an
    epoch, in a shuffled order) and one pair for each of its query's best BM25 hits that is not yet in the batch and
    not relevant to any query in it. A group BM25 cannot fill stays smaller; the next seeds fill the batch. Raises
    ValueError when a whole pass over the pairs fills no batch (too few distinct passages for `size`)."""
    rng = random.Random(seed)
    neighbours = bm25_neighbours(pairs, depth)
    relevant = relevant_passages(pairs)
    by_passage: dict[str, list[Pair]] = defaultdict(list)
    for pair in pairs:
        by_passage[pair.passage_id].append(pair)
    while True:
        seeds = list(pairs)
        rng.shuffle(seeds)
        batch: list[Pair] = []
        filled = False
        for seed_pair in seeds:
            if not _fits(seed_pair, batch, relevant):
                continue
            group = [seed_pair]
            for pid in neighbours[seed_pair.query]:
                if len(group) == group_size:
                    break
                candidate = rng.choice(by_passage[pid])
                if _fits(candidate, batch + group, relevant):
                    group.append(candidate)
            batch += group
            while len(batch) >= size:
                filled = True
                yield batch[:size]
                batch = batch[size:]
        if not filled:
            raise ValueError(f"bm25 batching: a pass over the {len(pairs)} training pairs "
                             f"({len({p.passage_id for p in pairs})} distinct passages) fills no batch of {size} pairs "
                             "whose passages are distinct and not relevant to each other's queries; lower "
                             "train.batch_size or use train.batching=random")


def _fits(pair: Pair, batch: list[Pair], relevant: dict[str, set[str]]) -> bool:
    """`pair` may join `batch`: its passage is new there and relevant to no query there, and no passage there is
    relevant to its query (so every negative in the batch is a true negative)."""
    return all(other.passage_id != pair.passage_id and pair.passage_id not in relevant[other.query]
               and other.passage_id not in relevant[pair.query] for other in batch)
