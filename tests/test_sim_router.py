"""pagedlib.sim.router: replicas of the counting engine with prefix caching behind a router (ch. 13)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pagedlib.sim.router import POLICIES, ChatWorkload, Cluster, route, serve_chats

BLOCK = 16


def small(**kw):
    args = dict(num_users=6, turns=3, num_system_prompts=2, system_len=40, message_len=(3, 9),
                reply_len=(2, 7), chat_rate=5.0, think_s=0.5, seed=1)
    args.update(kw)
    return ChatWorkload.generate(**args)


def test_prompt_is_system_then_history_then_message():
    w = small()
    for u in range(len(w.chats)):
        assert w.prompt(u, 0) == list(w.system[u % 2]) + list(w.chats[u][0].message)
        for t in range(1, 3):
            before = w.prompt(u, t - 1) + list(w.chats[u][t - 1].reply)
            assert w.prompt(u, t) == before + list(w.chats[u][t].message)
    assert w.num_requests == 18


def test_every_request_gets_its_reply_and_nothing_leaks():
    w = small()
    for policy in POLICIES:
        c = Cluster(3, 512, block_size=BLOCK)
        r = c.run(w, policy)
        assert len(r.ttft_s) == w.num_requests and (r.ttft_s > 0).all()
        assert r.generated == sum(len(t.reply) for chat in w.chats for t in chat)
        for rep in c.replicas:
            assert len(rep.block_manager) == 0 and rep.block_manager.num_used_blocks == 0


def test_round_robin_takes_turns():
    r = serve_chats(small(), "round_robin", num_replicas=4, kv_slots=512, block_size=BLOCK)
    assert list(r.replica) == [i % 4 for i in range(len(r.replica))]


def test_second_turn_hits_exactly_the_full_blocks_of_the_first():
    """One replica, one chat: turn 1 left prompt + reply - 1 tokens of K/V (the last sampled token
    is never computed); its full blocks are what turn 2 finds cached."""
    w = small(num_users=1, turns=2, num_system_prompts=1)
    r = serve_chats(w, "round_robin", num_replicas=1, kv_slots=1024, block_size=BLOCK)
    first = len(w.prompt(0, 0)) + len(w.chats[0][0].reply) - 1
    assert r.hit_tokens[0] == 0
    assert r.hit_tokens[1] == first // BLOCK * BLOCK
    assert r.hit_rate == pytest.approx(r.hit_tokens[1] / r.prompt_tokens.sum())


def test_least_loaded_picks_the_emptiest():
    c = Cluster(3, 512, block_size=BLOCK)
    w = small()
    c.run(w, lambda req, reps, n: 0)                         # warm replica 0's cache
    prompt = w.prompt(0, 0)

    class Fake:                                              # only .load is read
        def __init__(self, load):
            self.load = load
    assert route("least_loaded", prompt, [Fake(2), Fake(1), Fake(1)], 0) == 1


def test_prefix_aware_follows_the_cache_until_the_load_outweighs_it():
    w = small(num_users=2, turns=2, num_system_prompts=2)
    c = Cluster(3, 2048, block_size=BLOCK)
    c.run(w, lambda req, reps, n: 2)                         # everything served on replica 2
    prompt = w.prompt(0, 1)
    cached = c.replicas[2].block_manager.num_cached_tokens(prompt)
    assert cached >= 32
    assert route("prefix_aware", prompt, c.replicas, 0, load_cost=cached - 1) == 2
    # one request queued on replica 2 now costs more than its cache saves: go to an empty one
    from pagedlib.engine.scheduler import SeqState
    c.replicas[2].scheduler.add(SeqState(seq_id="x", request_id=-1, prompt=[1, 2, 3]))
    assert route("prefix_aware", prompt, c.replicas, 0, load_cost=cached - 1) == 2   # cached - 1 < cached
    assert route("prefix_aware", prompt, c.replicas, 0, load_cost=cached + 1) == 0


def test_bad_policy_names_and_indices_are_refused():
    with pytest.raises(ValueError, match="policy must be one of"):
        serve_chats(small(), "random", kv_slots=512)
    with pytest.raises(ValueError, match="sent request 0 to replica 5"):
        serve_chats(small(), lambda req, reps, n: 5, num_replicas=2, kv_slots=512)
    with pytest.raises(ValueError, match="raise kv_slots"):
        serve_chats(small(system_len=400), "round_robin", kv_slots=64)


def test_prefix_aware_wins_on_the_chapter_workload():
    w = ChatWorkload.generate(num_users=48, turns=3, num_system_prompts=8, system_len=1024, chat_rate=2.0)
    res = {p: serve_chats(w, p, num_replicas=4, kv_slots=8192) for p in POLICIES}
    aware, rr = res["prefix_aware"], res["round_robin"]
    assert aware.hit_rate > rr.hit_rate + 0.2
    assert aware.prefill_tokens < rr.prefill_tokens
    assert aware.ttft_p(99) < rr.ttft_p(99)


def crowded(seed=1):
    """Ten chats all at once on tiny pools: requests wait and get preempted."""
    return small(seed=seed, num_users=10, system_len=40, chat_rate=1000.0, think_s=0.0)


def test_crowded_pools_preempt_and_still_do_not_leak():
    c = Cluster(3, 12 * BLOCK, block_size=BLOCK)
    r = c.run(crowded(), lambda req, reps, n: n % 2)
    assert sum(rep.scheduler.num_preemptions for rep in c.replicas) > 0
    assert r.generated == sum(len(t.reply) for chat in crowded().chats for t in chat)
    assert all(rep.block_manager.num_used_blocks == 0 for rep in c.replicas)


@settings(max_examples=40, deadline=None)
@given(choices=st.lists(st.integers(0, 2), min_size=1, max_size=40), kv_blocks=st.integers(9, 30),
       seed=st.integers(0, 3))
def test_no_block_leaks_under_random_routing(choices, kv_blocks, seed):
    """Route at random onto small pools (some runs preempt: see the test below); at every arrival
    each replica's used blocks are exactly those its block tables hold, and at the end every block
    is free again."""
    w = crowded(seed)
    c = Cluster(3, kv_blocks * BLOCK, block_size=BLOCK)

    def policy(req, replicas, n):
        for rep in replicas:
            bm = rep.block_manager
            held = set()
            for sid in bm.seq_ids:
                held.update(bm.block_table(sid))
            assert bm.num_used_blocks == len(held)
        return choices[n % len(choices)]

    r = c.run(w, policy)
    assert r.generated == sum(len(t.reply) for chat in w.chats for t in chat)
    for rep in c.replicas:
        assert len(rep.block_manager) == 0
        assert rep.block_manager.num_free_blocks == rep.block_manager.num_usable_blocks
    assert np.array_equal(r.replica, [choices[i % len(choices)] for i in range(w.num_requests)])
