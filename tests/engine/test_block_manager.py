"""Block manager invariants under random operation sequences (property-based)."""
from hypothesis import given, settings
from hypothesis import strategies as st

from orthrus_rag.engine.block_manager import BlockManager
from orthrus_rag.engine.request import RequestTimings
from orthrus_rag.engine.sequence import Sequence

NUM_BLOCKS, BLOCK = 12, 4


def new_seq(i: int, tokens: list[int]) -> Sequence:
    return Sequence(f"s{i}", "generate", tokens, RequestTimings(0.0), i)


def check_invariants(bm: BlockManager, live: list[Sequence]) -> None:
    holders = [0] * bm.num_blocks
    for seq in live:
        assert len(set(seq.block_table)) == len(seq.block_table)
        for b in seq.block_table:
            holders[b] += 1
    assert holders == bm.ref_counts  # ref counts equal the number of tables holding a block
    assert set(bm.free) == {b for b in range(bm.num_blocks) if bm.ref_counts[b] == 0}
    for h, b in bm.cached.items():
        assert bm.block_hash[b] == h
    assert sum(h is not None for h in bm.block_hash) == len(bm.cached)


ops = st.lists(st.tuples(st.sampled_from(["add", "grow", "free"]), st.integers(0, 50),
                         st.lists(st.integers(0, 3), min_size=1, max_size=20)), max_size=60)


@settings(max_examples=150, deadline=None)
@given(ops)
def test_invariants_hold(operations):
    bm = BlockManager(NUM_BLOCKS, BLOCK, enable_prefix_caching=True)
    live: list[Sequence] = []
    for i, (op, pick, tokens) in enumerate(operations):
        if op == "add":
            seq = new_seq(i, tokens)
            seq.num_computed = bm.acquire_prefix(seq)
            assert seq.num_computed < seq.num_tokens  # at least one token left to run
            if bm.allocate(seq, seq.num_remaining):
                seq.num_computed = seq.num_tokens
                bm.commit(seq)
                live.append(seq)
            else:
                bm.free_sequence(seq)
        elif op == "grow" and live:
            seq = live[pick % len(live)]
            before = list(seq.block_table)
            if bm.allocate(seq, len(tokens)):
                seq.output_ids.extend(tokens)
                seq.num_computed = seq.num_tokens
                bm.commit(seq)
            else:
                assert seq.block_table == before  # a failed allocation changes nothing
        elif op == "free" and live:
            bm.free_sequence(live.pop(pick % len(live)))
        check_invariants(bm, live)
    for seq in live:
        bm.free_sequence(seq)
    assert bm.num_free == NUM_BLOCKS


def test_prefix_hit_shares_blocks_and_lru_evicts_oldest():
    bm = BlockManager(4, 2)
    a = new_seq(0, [1, 2, 3, 4, 5])
    assert bm.allocate(a, 5)
    a.num_computed = 5
    bm.commit(a)
    b = new_seq(1, [1, 2, 3, 4, 9])
    b.num_computed = bm.acquire_prefix(b)
    assert b.block_table == a.block_table[:2] and b.num_computed == 4
    assert bm.ref_counts[a.block_table[0]] == 2
    bm.free_sequence(b)
    bm.free_sequence(a)
    c = new_seq(2, [1, 2, 3, 4, 7])
    c.num_computed = bm.acquire_prefix(c)  # still cached after both were freed
    assert c.num_computed == 4
    bm.free_sequence(c)
    d = new_seq(3, [8] * 8)
    assert bm.allocate(d, 8)  # takes every block: cached ones are evicted
    assert not bm.cached


def test_prefixes_with_equal_python_hashes_never_share_blocks():
    assert hash((None, (-1, -1))) == hash((None, (-2, -2)))  # CPython: hash(-1) == hash(-2)
    bm = BlockManager(8, 2)
    a = new_seq(0, [-1, -1, 3])
    assert bm.allocate(a, 3)
    a.num_computed = 3
    bm.commit(a)
    b = new_seq(1, [-2, -2, 3])
    assert bm.acquire_prefix(b) == 0 and not b.block_table


def test_a_growing_sequence_takes_the_next_block_when_it_is_free():
    """Attention reads a table of consecutive blocks as one run: growth takes the block after the last one when it
    is free and names no cached prefix; otherwise the least recently freed block, as before."""
    def seq(name: str, n: int, arrival: int) -> Sequence:
        return Sequence(name, "generate", [arrival + 1] * n, RequestTimings(0.0), arrival)

    bm = BlockManager(num_blocks=8, block_size=2)
    a, b, c = seq("a", 2, 0), seq("b", 2, 1), seq("c", 2, 2)
    for s in (a, b, c):
        assert bm.allocate(s, 2)
    assert (a.block_table, b.block_table, c.block_table) == ([0], [1], [2])
    bm.free_sequence(b)  # free list, LRU first: 3 4 5 6 7 1
    a.num_computed = 2
    assert bm.allocate(a, 2) and a.block_table == [0, 1]  # the next block, not the LRU one (3)
    c.num_computed = 2
    bm.commit(c)  # block 2 now names a cached prefix
    bm.free_sequence(c)
    a.num_computed = 4
    assert bm.allocate(a, 2) and a.block_table == [0, 1, 3]  # 2 is cached: kept for a prefix hit, LRU instead
