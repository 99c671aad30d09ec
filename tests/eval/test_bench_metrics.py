import pytest

from orthrus_rag.eval.bench.metrics import BASELINES, Call, counter_delta, latency_stats, percentile, ratios, summarize


@pytest.mark.parametrize("values, q, expected", [
    ([1, 2, 3, 4], 50, 2.5),          # rank 1.5: halfway between 2 and 3
    ([1, 2, 3, 4], 99, 3.97),         # rank 2.97
    ([1, 2, 3, 4], 0, 1.0),
    ([1, 2, 3, 4], 100, 4.0),
    ([10, 0, 5], 50, 5.0),            # sorted first
    ([7], 99, 7.0),
    (list(range(101)), 99, 99.0),
])
def test_percentile_by_hand(values, q, expected):
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_empty_is_none():
    assert percentile([], 50) is None


def test_summarize_by_hand():
    records = [Call("embed", 0.0, 1.0), Call("embed", 1.0, 4.0), Call("generate", 0.0, 2.0),
               Call("generate", 0.0, 6.0)]
    r = summarize("hetero", records, wall_s=8.0)
    assert (r["requests"], r["rps"], r["embed_rps"], r["gen_rps"]) == (4, 0.5, 0.25, 0.25)
    assert r["p50_s"] == {"embed": 2.0, "generate": 4.0}
    assert r["p99_s"]["embed"] == pytest.approx(1 + 2 * 0.99)
    assert r["mean_s"] == {"embed": 2.0, "generate": 4.0}


def test_summarize_missing_kind():
    r = summarize("hf", [Call("generate", 0.0, 1.0)], wall_s=2.0)
    assert r["p50_s"]["embed"] is None and r["embed_rps"] == 0.0 and r["gen_rps"] == 0.5


def test_ratios_by_hand():
    modes = {m: summarize(m, [Call("embed", 0, 1)] * n, wall_s=1.0)
             for m, n in [("hetero", 6), ("isolated", 2), ("alternating", 4)]}
    others = {f"hetero/{b}": None for b in BASELINES if b not in ("isolated", "alternating")}
    assert others and ratios(modes) == {"hetero/isolated": 3.0, "hetero/alternating": 1.5, **others}
    assert ratios({"isolated": modes["isolated"]}) == {f"hetero/{b}": None for b in BASELINES}


def test_counter_delta_subtracts_counters_keeps_gauges():
    before = {"steps": 10, "tokens": {"decode": 5, "embed": 1}, "generator_s": 1.5, "waiting": {"embed": 0},
              "policy": "adaptive", "kv_blocks_used": 0}
    after = {"steps": 14, "tokens": {"decode": 9, "embed": 4}, "generator_s": 2.0, "waiting": {"embed": 0},
             "policy": "adaptive", "kv_blocks_used": 3}
    assert counter_delta(after, before) == {"steps": 4, "tokens": {"decode": 4, "embed": 3}, "generator_s": 0.5,
                                            "waiting": {"embed": 0}, "policy": "adaptive", "kv_blocks_used": 3}


def test_latency_stats_percentiles():
    summary = latency_stats([float(i) for i in range(1, 101)])
    assert summary["mean_s"] == pytest.approx(50.5)
    assert summary["p50_s"] == pytest.approx(50.5) and summary["p99_s"] == pytest.approx(99.01)
