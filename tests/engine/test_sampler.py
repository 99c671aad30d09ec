"""Batched sampling: greedy, temperature, top-k, top-p, and per-request seeds that do not depend on the batch."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from orthrus_rag.engine import SamplingParams
from orthrus_rag.engine.sampler import ARGMAX_TILE, first_argmax, make_generator, sample, sample_batch

VOCAB = 12


def logits_rows(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, VOCAB, generator=torch.Generator().manual_seed(seed)) * 2


def test_greedy_rows_are_argmax():
    logits = logits_rows(5)
    params = [SamplingParams(temperature=0.0)] * 5
    assert sample_batch(logits, params, [None] * 5) == logits.argmax(-1).tolist()


def test_greedy_ties_take_the_first_index_in_bfloat16():
    logits = (logits_rows(64) * 2).round().to(torch.bfloat16)  # rounded: most rows hold a tied maximum
    logits[:, [3, 7]] = logits.max(-1, keepdim=True).values + 1  # and every row a tie at 3 and 7
    params = [SamplingParams(temperature=0.0)] * 64
    assert sample_batch(logits, params, [None] * 64) == [3] * 64


@given(st.integers(1, 9), st.integers(1, 5 * ARGMAX_TILE + 7), st.sampled_from([torch.float32, torch.bfloat16]),
       st.integers(0, 2**16), st.booleans())
@settings(max_examples=60, deadline=None)
def test_first_argmax_equals_max_indices(rows, vocab, dtype, seed, coarse):
    """Tiled search against `max(dim)`'s first index on ties: any vocabulary (tiles whole or not), values coarse
    enough that most rows tie, rows of -inf."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=gen)
    logits = (logits.mul(2).round() if coarse else logits).to(dtype)
    logits[0] = float("-inf") if seed % 5 == 0 else logits[0]
    assert first_argmax(logits).tolist() == logits.float().max(-1).indices.tolist()


def test_seeded_row_is_independent_of_batch_composition():
    logits = logits_rows(4, seed=1)
    mine = SamplingParams(temperature=0.9, top_k=8, top_p=0.95, seed=3)
    others = [SamplingParams(temperature=0.0), SamplingParams(temperature=1.3, seed=11),
              SamplingParams(temperature=0.7, top_p=0.5)]
    alone_gen, batch_gen = make_generator(mine), make_generator(mine)
    alone, batched = [], []
    for _ in range(20):
        alone.append(sample(logits[0], mine, alone_gen))
        rows = torch.cat([logits[1:], logits[:1]])  # our row last, neighbours first
        gens = [None, make_generator(others[1]), None, batch_gen]
        batched.append(sample_batch(rows, others + [mine], gens)[-1])
    assert alone == batched
    assert len(set(alone)) > 1  # it really samples


def test_unfiltered_seeded_row_is_independent_of_filtered_neighbours():
    logits = logits_rows(2, seed=4)
    mine = SamplingParams(temperature=1.0, seed=7)  # no top-k or top-p
    neighbour = SamplingParams(temperature=1.0, top_k=3, seed=5)
    alone_gen, batch_gen, neighbour_gen = make_generator(mine), make_generator(mine), make_generator(neighbour)
    alone = [sample(logits[0], mine, alone_gen) for _ in range(20)]
    batched = [sample_batch(logits, [mine, neighbour], [batch_gen, neighbour_gen])[0] for _ in range(20)]
    assert alone == batched


def expected_probs(row: torch.Tensor, temperature: float, top_k: int, top_p: float) -> list[float]:
    """Hand-written reference: softmax(row / T), keep the k most likely, then the smallest prefix reaching p."""
    probs = [math.exp(x / temperature) for x in row.tolist()]
    order = sorted(range(len(probs)), key=lambda i: -probs[i])
    keep = order[:top_k] if top_k else order
    total = sum(probs[i] for i in keep)
    kept, mass = [], 0.0
    for i in keep:
        if mass >= top_p:
            break
        kept.append(i)
        mass += probs[i] / total
    z = sum(probs[i] for i in kept)
    return [probs[i] / z if i in kept else 0.0 for i in range(len(probs))]


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, 0, 1.0), (0.7, 5, 1.0), (1.5, 0, 0.8), (1.0, 6, 0.9)])
def test_frequencies_follow_the_filtered_distribution(temperature, top_k, top_p):
    row = logits_rows(1, seed=2)[0] / 2
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
    n, rows = 4000, 8
    torch.manual_seed(0)
    counts = [0] * VOCAB
    for _ in range(n // rows):
        for token in sample_batch(row.expand(rows, VOCAB), [params] * rows, [None] * rows):
            counts[token] += 1
    want = expected_probs(row, temperature, top_k, top_p)
    for got, p in zip(counts, want):
        if p == 0:
            assert got == 0
        else:  # within 5 standard deviations of a binomial count
            assert abs(got - n * p) <= 5 * math.sqrt(n * p * (1 - p)) + 1
