"""The rag report on a small synthetic result: metrics by hand, bench.json, the Markdown table, the plots."""
import json

import pytest

from orthrus_rag.eval.bench.rag import Call
from orthrus_rag.eval.bench.rag_metrics import call_stats, goodput, latency_stats, rag_ratios, time_share, timeline
from orthrus_rag.eval.bench.report import format_rag_table, main, merge_benches, write_rag_reports


def test_latency_stats_by_hand():
    s = latency_stats([4.0, 1.0, 3.0, 2.0, 10.0])
    assert s["p50_s"] == 3.0 and s["mean_s"] == 4.0
    assert s["p90_s"] == pytest.approx(4 + 6 * 0.6)   # rank 3.6 between 4 and 10
    assert s["p99_s"] == pytest.approx(4 + 6 * 0.96)  # rank 3.96
    assert latency_stats([])["p99_s"] is None


def test_call_stats_by_hand():
    calls = [Call("embed", 0.0, d) for d in (0.4, 0.1, 0.3, 0.2, 1.0)] + [
        Call("generate", 1.0, 3.0, ttft_s=0.5, tpot_s=0.1, completion_tokens=4),
        Call("generate", 2.0, 3.0, ttft_s=0.3, tpot_s=0.3, completion_tokens=2)]
    stats = call_stats(calls)
    assert stats["embed"] == {"n": 5, "p50_s": 0.3, "p90_s": pytest.approx(0.76), "p99_s": pytest.approx(0.976),
                              "mean_s": pytest.approx(0.4)}  # sorted 0.1 .. 1.0: p90 at rank 3.6, p99 at 3.96
    assert stats["embed"] == {"n": 5, **latency_stats([0.4, 0.1, 0.3, 0.2, 1.0])}
    gen = stats["generate"]
    assert (gen["n"], gen["p50_s"], gen["mean_s"], gen["completion_tokens"]) == (2, 1.5, 1.5, 6)
    assert gen["ttft_p50_s"] == pytest.approx(0.4) and gen["tpot_mean_s"] == pytest.approx(0.2)
    assert call_stats([])["embed"] == {"n": 0, "p50_s": None, "p90_s": None, "p99_s": None, "mean_s": None}


def test_goodput_by_hand():
    assert goodput([1.0, 2.0, 5.0, 9.0], wall_s=10.0, slo_s=5.0) == {"slo_s": 5.0, "fraction": 0.75, "qps": 0.3}


def test_time_share_and_timeline():
    engine = {"generator_s": 3.0, "embedder_s": 1.0, "steps": 4, "mixed_steps": 1,
              "tokens": {"decode": 8, "prefill": 40, "embed": 12}}
    share = time_share(engine, wall_s=10.0)
    assert (share["generator"], share["embedder"], share["idle"]) == (0.3, 0.1, pytest.approx(0.6))
    assert share["tokens_per_step"] == {"decode": 2.0, "prefill": 10.0, "embed": 3.0}
    iso = time_share({"embed": dict(engine, generator_s=0.0), "generate": engine}, wall_s=10.0)
    assert iso["embed"]["idle"] == pytest.approx(0.9) and iso["generate"]["idle"] == pytest.approx(0.6)
    assert time_share({"generate_s": 2.0, "embed_s": 1.0}, 4.0) == {"generate": 0.5, "embed": 0.25, "idle": 0.25}
    zero = {"steps": 0, "generator_s": 0.0, "embedder_s": 0.0, "tokens": {"decode": 0, "prefill": 0, "embed": 0}}
    rows = timeline([(0.0, zero), (0.5, engine)])
    assert rows == [{"t": 0.5, "dt": 0.5, "steps": 4, "busy_s": 4.0, "decode": 8, "prefill": 40, "embed": 12,
                     "in_flight": 0}]
    assert timeline([(0.0, {"embed": zero}), (1.0, {"embed": zero})]) == []  # isolated: no single engine


def mode(name: str, latencies: list[float], wall: float, predictions: list[str], acc: float) -> dict:
    stats = latency_stats(latencies)
    return {"mode": name, "n": len(latencies), "wall_s": wall, "qps": len(latencies) / wall, **stats,
            "goodput": goodput(latencies, wall, 5.0), "acc": acc, "em": acc / 2, "f1": acc, "recall": 0.5,
            "all_gold": 0.2, "calls": {"embed": {"n": 4, "p50_s": 0.05, "p99_s": 0.1, "mean_s": 0.06},
                                       "generate": {"n": 4, "p50_s": 1.0, "p99_s": 2.0, "mean_s": 1.1,
                                                    "ttft_p50_s": 0.2, "ttft_p99_s": 0.4, "tpot_p50_s": 0.05,
                                                    "tpot_mean_s": 0.06, "completion_tokens": 40}},
            "time_share": time_share({"generator_s": 3.0, "embedder_s": 1.0, "steps": 4,
                                      "tokens": {"decode": 8, "prefill": 40, "embed": 12}}, wall),
            "engine": {}, "latencies_s": latencies, "predictions": predictions,
            "timeline": [{"t": 0.25 * (i + 1), "dt": 0.25, "steps": 2, "busy_s": 0.2, "decode": 4, "prefill": i,
                          "embed": 3} for i in range(8)] if name == "hetero" else []}


def synthetic_bench() -> dict:
    sweep = []
    for rate, scale in ((0.5, 1.0), (1.0, 2.0)):
        modes = {"hetero": mode("hetero", [1.0 * scale, 2.0 * scale, 3.0 * scale], 10.0, ["a", "b", "c"], 1 / 3),
                 "isolated": mode("isolated", [2.0 * scale, 4.0 * scale, 8.0 * scale], 12.0, ["a", "b", "x"], 1 / 3)}
        sweep.append({"load": f"rate {rate:g}/s", "rate": rate, "modes": modes, "ratios": rag_ratios(modes)})
    head = sweep[1]
    return {"workload": "rag", "modes": head["modes"], "ratios": head["ratios"],
            "headline": {"p99": head["load"], "qps": head["load"]}, "sweep": sweep,
            "config": {"pipeline": {"name": "ircot"}, "questions": 3, "workload": {"slo_s": 5.0}}}


def test_ratios_by_hand():
    r = synthetic_bench()["sweep"][0]["ratios"]
    hetero_p99, isolated_p99 = 2 + 0.98, 4 + 4 * 0.98
    assert r["p99_reduction_vs_isolated"] == pytest.approx(1 - hetero_p99 / isolated_p99)
    assert r["qps_hetero/isolated"] == pytest.approx(1.2)
    assert r["same_predictions_isolated"] == pytest.approx(2 / 3)
    assert r["p99_reduction_vs_hf"] is None and r["qps_hetero/hf"] is None


def test_report_files_and_table(tmp_path):
    bench = synthetic_bench()
    paths = write_rag_reports(bench, tmp_path)
    assert set(paths) == {"bench", "table", "latency_cdf", "p99_vs_rate", "step_composition"}
    for name in ("latency_cdf", "p99_vs_rate", "step_composition"):
        assert paths[name].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads(paths["bench"].read_text())["ratios"] == pytest.approx(bench["ratios"])
    table = paths["table"].read_text()
    assert table == format_rag_table(bench)
    assert "## rate 0.5/s" in table and "## rate 1/s" in table
    rows = [line for line in table.splitlines() if line.startswith("| hetero") or line.startswith("| isolated")]
    assert len(rows) == 4
    cells = [c.strip() for c in rows[2].strip("|").split("|")]  # hetero at rate 1/s
    assert cells[:8] == ["hetero", "3", "0.300", "4.00", "5.60", "5.96", "4.00", "67%"]  # 6 s > slo 5 s
    assert cells[-3:] == ["0.333", "0.167", "0.333"]
    assert f"p99 reduction vs isolated {100 * (1 - 5.96 / 15.84):.0f}%" in table


def test_merge_and_cli(tmp_path):
    bench = synthetic_bench()
    parts = []
    for i, entry in enumerate(bench["sweep"]):
        part = dict(bench, sweep=[entry], headline={"p99": entry["load"], "qps": entry["load"]})
        path = tmp_path / f"b{i}.json"
        path.write_text(json.dumps(part))
        parts.append(path)
    merged = merge_benches([json.loads(p.read_text()) for p in reversed(parts)])
    assert [e["rate"] for e in merged["sweep"]] == [0.5, 1.0] and merged["headline"]["p99"] == "rate 1/s"
    assert "latencies_s" not in merged["modes"]["hetero"]
    main([str(p) for p in parts] + ["--out", str(tmp_path / "out")])
    assert (tmp_path / "out" / "p99_vs_rate.png").is_file() and (tmp_path / "out" / "bench.md").is_file()
    with pytest.raises(ValueError, match="rag"):
        merge_benches([{"workload": "mixed"}])


def test_merge_joins_runs_of_one_load_by_mode():
    bench = synthetic_bench()
    parts = [dict(bench, sweep=[dict(e, modes={m: e["modes"][m]}) for e in bench["sweep"]]) for m in bench["modes"]]
    merged = merge_benches(parts)
    assert [e["rate"] for e in merged["sweep"]] == [e["rate"] for e in bench["sweep"]]
    for joined, whole in zip(merged["sweep"], bench["sweep"]):
        assert list(joined["modes"]) == list(whole["modes"]) and joined["ratios"] == pytest.approx(whole["ratios"])
    assert format_rag_table(merged).count("| hetero") == len(bench["sweep"])


def test_step_spans_fold_long_steps():
    from orthrus_rag.eval.bench.report import step_spans

    def row(t, steps, busy, decode=0, in_flight=1):
        return {"t": t, "dt": 0.25, "steps": steps, "busy_s": busy, "decode": decode, "prefill": 0, "embed": 0,
                "in_flight": in_flight}

    rows = [row(0.25, 2, 0.2, 4), row(0.5, 0, 0.0), row(0.75, 0, 0.0), row(1.0, 1, 0.7, 1, 0),
            row(1.25, 0, 0.0, 0, 0), row(1.5, 1, 0.1, 2), row(1.75, 0, 0.0)]
    spans = step_spans(rows)
    assert [(s["t"], s["dt"], s["steps"], s["busy_s"], s["decode"]) for s in spans] == [
        (0.25, 0.25, 2, 0.2, 4), (1.0, 0.75, 1, 0.7, 1), (1.25, 0.25, 0, 0.0, 0), (1.5, 0.25, 1, 0.1, 2),
        (1.75, 0.25, 0, 0.0, 0)]
