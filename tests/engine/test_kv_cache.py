import pytest
import torch

from orthrus_rag.engine import kv_cache
from orthrus_rag.engine.attention import BACKENDS, Geometry
from orthrus_rag.engine.kv_cache import CPU_KV_BLOCKS, bytes_per_block, pool_size
from tests.engine.conftest import run_all


def test_bytes_per_block_counts_k_and_v_of_every_layer():
    # SmolLM2-135M: 30 layers, 3 KV heads of 64; float32 cache, 16-token blocks
    assert bytes_per_block(30, 16, 3, 64, torch.float32) == 2 * 30 * 16 * 3 * 64 * 4
    assert bytes_per_block(30, 16, 3, 64, torch.bfloat16) == 2 * 30 * 16 * 3 * 64 * 2


def test_unset_pool_on_cpu_has_the_cpu_default():
    assert pool_size(torch.device("cpu"), 1000, 0.8, 10, most=10**9) == CPU_KV_BLOCKS


def test_unset_pool_on_cuda_takes_its_share_of_free_and_cached_memory(monkeypatch):
    monkeypatch.setattr(kv_cache.torch.cuda, "mem_get_info", lambda device: (9_000_000, 20_000_000))
    monkeypatch.setattr(kv_cache.torch.cuda, "memory_reserved", lambda device: 3_000_000)
    monkeypatch.setattr(kv_cache.torch.cuda, "memory_allocated", lambda device: 2_000_000)
    assert pool_size(torch.device("cuda"), 1000, 0.8, 10, most=10**9) == 8000 - 10
    assert pool_size(torch.device("cuda"), 1000, 0.8, 10, most=500) == 500  # no more than full sequences need
    with pytest.raises(RuntimeError, match="num_kv_blocks"):
        pool_size(torch.device("cuda"), 1000, 0.0001, 10, most=10**9)


def test_engine_sizes_an_unset_pool_and_admits_by_the_resolved_size(make_engine):
    engine = make_engine(num_kv_blocks=None)
    runner, config = engine.runner, engine.config
    if runner.device.type == "cpu":
        assert engine.blocks.num_blocks == CPU_KV_BLOCKS
    else:  # a share of the device's memory, and never more than max_num_seqs full-length sequences hold
        assert 0 < engine.blocks.num_blocks <= config.max_num_seqs * -(-runner.max_model_len // config.block_size)
    assert engine.blocks.num_blocks == engine.get_stats()["kv_blocks_total"]


def test_step_times_are_read_after_the_device_is_synchronised(make_engine, monkeypatch):
    from orthrus_rag.engine import SamplingParams

    engine = make_engine()
    calls = []
    monkeypatch.setattr(engine.runner, "synchronize", lambda: calls.append("sync"))
    engine.add_request("g", [5, 6, 7], SamplingParams(max_tokens=2))
    engine.step()
    assert calls == ["sync", "sync"]  # after the embedder's share (none here) and after the generator's forward
    run_all(engine)


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_every_cache_gives_back_the_rows_written_to_it(name):
    backend_class = BACKENDS[name]
    geometry = Geometry(torch.device("cpu"), torch.float32, 16, 4, 2, 32)
    if backend_class.unsupported(geometry):
        pytest.skip(backend_class.unsupported(geometry))
    cache = backend_class(geometry).make_cache(2, 8 * 16)
    slots = torch.tensor([3, 17, 18, 40, 127])
    k, v = torch.randn(5, 2, 32), torch.randn(5, 2, 32)
    cache.write(1, slots, k, v)
    k_read, v_read = cache.read(1, slots)
    torch.testing.assert_close(k_read, k)
    torch.testing.assert_close(v_read, v)
