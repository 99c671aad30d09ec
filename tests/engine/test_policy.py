"""Composition policies on hand-built queue views."""
import math

import pytest

from orthrus_rag.engine import EngineConfig
from orthrus_rag.engine.policy import AdaptivePolicy, AlternatingPolicy, FCFSPolicy, LinearCost, QueueView, \
    WeightedPolicy


def view(gen_head=None, emb_head=None, pending_gen=0.0, pending_emb=0.0, placed=0, decodes=None):
    return QueueView({"generate": gen_head, "embed": emb_head}, {"generate": pending_gen, "embed": pending_emb},
                     {"generate": 0, "embed": 0}, placed, placed if decodes is None else decodes)


def test_fcfs_takes_the_oldest_head():
    assert FCFSPolicy().choose(view(gen_head=5, emb_head=3)) == "embed"
    assert FCFSPolicy().choose(view(gen_head=2, emb_head=3)) == "generate"
    assert FCFSPolicy().choose(view()) is None


def test_weighted_round_robin_follows_weights_smoothly():
    policy = WeightedPolicy({"embed": 1, "generate": 3})
    picks = [policy.choose(view(gen_head=0, emb_head=1)) for _ in range(8)]
    assert picks.count("generate") == 6 and picks.count("embed") == 2
    assert picks[:4].count("embed") == 1  # interleaved, not bunched


def test_weighted_falls_back_to_the_only_waiting_queue():
    assert WeightedPolicy({"embed": 0, "generate": 1}).choose(view(emb_head=1)) == "embed"


def test_alternating_never_mixes():
    policy = AlternatingPolicy()
    kinds = []
    for _ in range(4):
        policy.begin_step(view(gen_head=0, emb_head=1))
        kinds.append(policy.kind)
        other = "embed" if policy.kind == "generate" else "generate"
        assert policy.allows(policy.kind) and not policy.allows(other)
    assert kinds == ["generate", "embed", "generate", "embed"]


def test_linear_cost_recovers_line():
    cost = LinearCost()
    for tokens in [10, 50, 100, 200, 30]:
        cost.add(tokens, 0.02 + 0.001 * tokens)
    assert math.isclose(cost.slope, 0.001, rel_tol=1e-6) and math.isclose(cost.intercept, 0.02, rel_tol=1e-6)


def test_adaptive_cap_and_shares_follow_the_formula():
    policy = AdaptivePolicy(step_time_target_s=0.1, min_new_tokens=16, embed_min_share=0.5, step_tokens=512)
    for tokens in [10, 100, 200]:
        policy.observe(tokens, 0.01 + 0.0005 * tokens, 0, 0.0)
    v = view(gen_head=0, emb_head=1, pending_gen=300.0, pending_emb=100.0, placed=40)
    policy.plan(v)
    cap = (0.1 - 0.01 - 0.0005 * 40) / 0.0005  # = 140 new tokens
    assert math.isclose(policy.cap, cap, rel_tol=1e-6)
    assert math.isclose(policy.quota["embed"], cap * 0.5, rel_tol=1e-6)  # backlog share 0.25, floor 0.5
    assert policy.choose(v) == "embed"
    v.new_tokens["embed"] = policy.quota["embed"]
    assert policy.choose(v) == "generate"
    v.new_tokens["generate"] = policy.quota["generate"]
    assert policy.choose(v) is None and policy.room(v) <= 0


def test_adaptive_keeps_a_floor_when_decodes_fill_the_target():
    policy = AdaptivePolicy(step_time_target_s=0.05, min_new_tokens=16, embed_min_share=0.5, step_tokens=512)
    policy.fixed_ratio = 2.0
    for tokens in [10, 100]:
        policy.observe(tokens, 0.01 * tokens, 0, 0.0)
    v = view(gen_head=0, pending_gen=100.0, placed=500)
    policy.plan(v)
    assert policy.cap == 16 and policy.embed_ratio == 2.0


def test_adaptive_embed_share_follows_backlog_above_the_floor():
    policy = AdaptivePolicy(step_time_target_s=None, min_new_tokens=16, embed_min_share=0.5, step_tokens=100)
    policy.plan(view(gen_head=0, emb_head=1, pending_gen=100.0, pending_emb=300.0))
    assert policy.quota == {"embed": 75.0, "generate": 25.0}
    policy.plan(view(gen_head=0, pending_gen=100.0))
    assert policy.quota == {"embed": 0.0, "generate": 100.0}


def test_adaptive_fills_the_budget_without_decodes_or_without_a_target():
    timed = AdaptivePolicy(step_time_target_s=0.1, min_new_tokens=16, embed_min_share=0.5, step_tokens=256)
    untimed = AdaptivePolicy(step_time_target_s=None, min_new_tokens=16, embed_min_share=0.5, step_tokens=256)
    for policy in (timed, untimed):
        for tokens in [10, 100, 200]:
            policy.observe(tokens, 0.01 + 0.0005 * tokens, 0, 0.0)
    timed.plan(view(gen_head=0, pending_gen=900.0, placed=40, decodes=0))  # running chunks only: nothing to protect
    assert timed.cap == 256
    timed.plan(view(gen_head=0, pending_gen=900.0, placed=40, decodes=8))
    assert math.isclose(timed.cap, (0.1 - 0.01 - 0.0005 * 40) / 0.0005)
    untimed.plan(view(gen_head=0, emb_head=1, pending_gen=300.0, pending_emb=100.0, placed=40, decodes=8))
    assert untimed.cap == 256 and untimed.quota == {"embed": 128.0, "generate": 128.0}


@pytest.mark.parametrize("name", ["adaptive", "fcfs", "weighted", "alternating"])
def test_embedder_token_cost_prices_an_embedder_token_under_every_policy(name):
    from orthrus_rag.engine.policy import make_policy

    measured, fixed = make_policy(EngineConfig(policy=name)), make_policy(EngineConfig(policy=name,
                                                                                       embedder_token_cost=0.25))
    for policy in (measured, fixed):
        for tokens in (100, 200):  # the embedder costs a tenth of the generator per token
            policy.observe(tokens, 0.01 * tokens, tokens, 0.001 * tokens)
    assert fixed.embed_ratio == 0.25
    assert math.isclose(measured.embed_ratio, 0.1 if name == "adaptive" else 1.0)  # null: adaptive measures
