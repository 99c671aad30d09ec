"""Training batches: random epochs, and BM25 groups whose hard negatives are never relevant to a query of the batch."""
from itertools import islice

import pytest

from orthrus_rag.training import Pair
from orthrus_rag.training.batching import bm25_batches, bm25_neighbours, random_batches, relevant_passages

FIRST = ["John", "Mary", "Peter", "Anna", "Karl", "Lena"]
LAST = ["Smith", "Brown", "Weber", "Rossi"]


def people() -> list[Pair]:
    """24 people sharing first and last names (each other's hard negatives), and two questions, one with two gold
    passages."""
    pairs = [Pair(f"{f} {l}", f"Title: {f} {l}\n{f} {l} was a painter born in town {i}.", f"{f}-{l}", "title")
             for i, (f, l) in enumerate((f, l) for f in FIRST for l in LAST)]
    pairs += [Pair("Was John Smith older than Mary Brown?", p.passage, p.passage_id, "question")
              for p in pairs if p.query in ("John Smith", "Mary Brown")]
    pairs += [Pair("Where was Karl Weber born?", p.passage, p.passage_id, "question")
              for p in pairs if p.query == "Karl Weber"]
    return pairs


def test_random_batches_are_full_seeded_epochs():
    pairs = people()
    first = list(islice(random_batches(pairs, 9, seed=1), 3))
    assert all(len(b) == 9 for b in first) and len({p for b in first for p in b}) == 27 == len(pairs)
    assert first == list(islice(random_batches(pairs, 9, seed=1), 3))


def test_bm25_neighbours_rank_shared_names_and_skip_relevant_passages():
    neighbours = bm25_neighbours(people(), depth=5)
    assert set(neighbours["John Smith"][:2]) <= {f"John-{l}" for l in LAST} | {f"{f}-Smith" for f in FIRST}
    assert "John-Smith" not in neighbours["John Smith"]
    two_gold = neighbours["Was John Smith older than Mary Brown?"]
    assert "John-Smith" not in two_gold and "Mary-Brown" not in two_gold


def test_bm25_batches_start_groups_with_the_seed_and_its_best_hits():
    pairs = people()
    neighbours = bm25_neighbours(pairs, depth=32)
    relevant = relevant_passages(pairs)
    for batch in islice(bm25_batches(pairs, size=8, group_size=4, seed=0), 20):
        assert len(batch) == 8
        for i, a in enumerate(batch):  # no negative in the batch is relevant to a query there
            assert all(b.passage_id not in relevant[a.query] for j, b in enumerate(batch) if j != i)
    first = next(bm25_batches(pairs, size=8, group_size=4, seed=0))
    assert first[1].passage_id == neighbours[first[0].query][0]  # the seed's best non-relevant BM25 hit comes next


def test_bm25_batches_refuse_pairs_that_cannot_fill_a_batch():
    pairs = [Pair(f"question {i}", f"Title: topic {i}\ntext {i}", f"p{i}", "question") for i in range(20)] * 2
    with pytest.raises(ValueError, match="20 distinct passages.*lower train.batch_size or use train.batching=random"):
        next(bm25_batches(pairs, size=32, group_size=8, seed=0))
    assert len(next(bm25_batches(pairs, size=16, group_size=8, seed=0))) == 16
