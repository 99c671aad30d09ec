"""Reciprocal-rank fusion on hand-computed cases."""
import pytest

from orthrus_rag.rag.retriever import reciprocal_rank_fusion
from orthrus_rag.rag.types import Passage


def ranking(*ids):
    return [Passage(i, f"T{i}", "text", score=10.0 - n) for n, i in enumerate(ids)]


def test_scores_and_order_by_hand():
    fused = reciprocal_rank_fusion([ranking("a", "b", "c"), ranking("c", "a", "d")], k=10, rrf_k=60)
    assert [p.id for p in fused] == ["a", "c", "b", "d"]
    expected = [1 / 61 + 1 / 62, 1 / 63 + 1 / 61, 1 / 62, 1 / 63]
    assert [p.score for p in fused] == pytest.approx(expected, abs=0, rel=1e-12)


def test_k_cuts_the_fused_list_and_keeps_the_first_rankings_copy():
    first, second = ranking("a", "b"), [Passage("b", "other title", "other text")]
    fused = reciprocal_rank_fusion([first, second], k=1, rrf_k=0)
    assert [(p.id, p.title, p.score) for p in fused] == [("b", "Tb", 1 / 2 + 1 / 1)]


def test_ties_broken_by_best_rank_then_ranking_order():
    # x and y: 1/61 + 1/62 each, both best at rank 1: the first ranking's rank-1 passage wins.
    assert [p.id for p in reciprocal_rank_fusion([ranking("x", "y"), ranking("y", "x")], 2)] == ["x", "y"]
    assert [p.id for p in reciprocal_rank_fusion([ranking("y", "x"), ranking("x", "y")], 2)] == ["y", "x"]
    # rrf_k = 0: p = r = 1 (rank 1 in one list each), q = 1/2, s = 1/3 + 1/6 = 1/2 (best rank 3 against 2)
    fused = reciprocal_rank_fusion([ranking("p", "q", "s"), ranking("r", "u", "v", "w", "t", "s")], 6, rrf_k=0)
    assert [p.id for p in fused] == ["p", "r", "q", "u", "s", "v"]
    assert fused[2].score == fused[3].score == fused[4].score == pytest.approx(1 / 2)


def test_empty_rankings_and_bad_constant():
    assert reciprocal_rank_fusion([[], []], 5) == []
    assert [p.id for p in reciprocal_rank_fusion([[], ranking("a")], 5)] == ["a"]
    with pytest.raises(ValueError, match="rrf_k"):
        reciprocal_rank_fusion([ranking("a")], 1, rrf_k=-1)
