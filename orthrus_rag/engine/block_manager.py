"""Paged KV cache bookkeeping: a pool of fixed-size blocks, block tables, reference counts and prefix caching.

A block table is a list of block ids; token t of a sequence lives in slot `table[t // B] * B + t % B`. Prefix caching
(docs/engine.md) names and shares the full blocks of generation sequences only (`block_digest`).
"""
from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict

from orthrus_rag.engine.sequence import Sequence


def block_digest(parent: bytes | None, tokens: list[int]) -> bytes:
    """Collision-resistant name of a full block: its tokens and, through `parent`, every token before them."""
    return hashlib.sha256((parent or b"") + array("q", tokens).tobytes()).digest()


def slots(table: list[int], block_size: int, start: int, end: int) -> list[int]:
    """The cache slots of positions [start, end) of a sequence with block table `table`."""
    return [table[p // block_size] * block_size + p % block_size for p in range(start, end)]


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.ref_counts = [0] * num_blocks
        self.block_hash: list[bytes | None] = [None] * num_blocks
        self.free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(num_blocks))  # LRU first
        self.cached: dict[bytes, int] = {}  # digest -> block id
        self.hits = 0  # prefix-cache hits, in tokens: counted by the scheduler when it admits a request

    @property
    def num_free(self) -> int:
        return len(self.free)

    def allocate(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Grow the block table to hold `num_new_tokens` more tokens. False (and no change) when out of blocks."""
        needed = -(-(seq.num_computed + num_new_tokens) // self.block_size) - len(seq.block_table)  # may be <= 0
        if needed > len(self.free):
            return False
        for _ in range(needed):
            seq.block_table.append(self._take(seq.block_table[-1] + 1 if seq.block_table else None))
        return True

    def acquire_prefix(self, seq: Sequence) -> int:
        """Share the longest run of cached full blocks that starts the sequence, whose table is empty (at least one
        token stays to run); returns the number of tokens they hold."""
        if not self.enable_prefix_caching:
            return 0
        tokens = seq.token_ids[: seq.num_tokens - 1]
        parent = None
        for start in range(0, len(tokens) - self.block_size + 1, self.block_size):
            parent = block_digest(parent, tokens[start:start + self.block_size])
            block = self.cached.get(parent)
            if block is None:
                break
            if self.ref_counts[block] == 0:  # freed but still cached: in use again
                del self.free[block]
            self.ref_counts[block] += 1
            seq.block_table.append(block)
            seq.block_hashes.append(parent)
        return len(seq.block_table) * self.block_size

    def commit(self, seq: Sequence) -> None:
        """Name the sequence's newly completed full blocks so later sequences can share them; blocks from its first
        reused passage on hold KV no exact prefill gives, and stay unnamed."""
        if not self.enable_prefix_caching:
            return
        exact = seq.num_computed if seq.reused_from is None else min(seq.num_computed, seq.reused_from)
        while (len(seq.block_hashes) + 1) * self.block_size <= exact:
            i = len(seq.block_hashes)
            parent = seq.block_hashes[-1] if seq.block_hashes else None
            h = block_digest(parent, seq.tokens(i * self.block_size, (i + 1) * self.block_size))
            seq.block_hashes.append(h)
            block = seq.block_table[i]
            if h not in self.cached:
                self.cached[h] = block
                self.block_hash[block] = h

    def free_sequence(self, seq: Sequence) -> None:
        """Release a sequence's blocks, tail first (so a shared head outlives it in the LRU order)."""
        for block in reversed(seq.block_table):
            self.ref_counts[block] -= 1
            assert self.ref_counts[block] >= 0, f"block {block} freed twice"
            if self.ref_counts[block] == 0:
                self.free[block] = None
        seq.block_table, seq.block_hashes = [], []

    def _take(self, wanted: int | None = None) -> int:
        """A free block: `wanted` (the one after the table's last, so attention reads the sequence in one run) when it
        is free and names no cached prefix; else the least recently freed."""
        block = wanted if wanted in self.free and self.block_hash[wanted] is None else next(iter(self.free))
        del self.free[block]
        if self.block_hash[block] is not None:  # evicted: the prefix it held is no longer cached
            del self.cached[self.block_hash[block]]
            self.block_hash[block] = None
        self.ref_counts[block] = 1
        return block
