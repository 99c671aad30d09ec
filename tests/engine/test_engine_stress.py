"""Random request mixes with aborts on a tiny KV pool: everything finishes or is aborted, nothing leaks."""
import random

import pytest
import torch

from orthrus_rag.engine import PoolingParams, SamplingParams
from tests.engine.conftest import assert_clean, hf_greedy, hf_pool


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_mix_with_aborts_leaves_nothing_behind(make_engine, hf_tiny, seed):
    rng = random.Random(seed)
    engine = make_engine(num_kv_blocks=20, max_num_batched_tokens=rng.choice([8, 16, 32]),
                         max_num_seqs=rng.choice([2, 4, 8]), policy=rng.choice(["adaptive", "fcfs", "weighted",
                                                                                 "alternating"]))
    submitted, aborted, finished, inputs, pools = set(), set(), {}, {}, {}
    for step in range(400):
        if len(submitted) < 30 and rng.random() < 0.3:
            rid = f"r{len(submitted)}"
            ids = [rng.randrange(100, 5000) for _ in range(rng.randint(1, 40))]
            if rng.random() < 0.5:
                params = SamplingParams(max_tokens=rng.randint(1, 12), ignore_eos=True)
            else:
                pools[rid] = rng.choice(["mean", "last", "cls"])
                params = PoolingParams(pooling=pools[rid], model="backbone")
            engine.add_request(rid, ids, params)
            inputs[rid] = ids
            submitted.add(rid)
        if engine.requests and rng.random() < 0.05:
            rid = rng.choice(sorted(engine.requests))
            assert engine.abort(rid)
            aborted.add(rid)
        for out in engine.step():
            assert out.error is None
            if out.finished:
                finished[out.request_id] = out.result
        if len(submitted) == 30 and not engine.has_unfinished():
            break
    assert set(finished) | aborted == submitted and not set(finished) & aborted
    for rid, result in finished.items():  # each equals its own unbatched transformers run
        ids = inputs[rid]
        if hasattr(result, "token_ids"):
            want = hf_greedy(hf_tiny, ids, len(result.token_ids))
            assert want and result.token_ids[:len(want)] == want
        else:
            want = hf_pool(hf_tiny, ids, pools[rid], True)
            assert (torch.from_numpy(result.embedding) - want).abs().max().item() <= 1e-5
    assert_clean(engine)
