"""The plugin's step plan (lengthpred.vllm_plugin.policy), on request views built by hand: no vLLM needed."""

from __future__ import annotations

import math

import pytest

from lengthpred.vllm_plugin.policy import (
    DECODE,
    NEW,
    PARKED,
    PREEMPTED,
    PREFILL,
    PolicyOptions,
    RequestView,
    TokenBudget,
    key,
    kv_victims,
    plan_step,
)

SJF = PolicyOptions("sjf")


def v(rid, state, predicted=None, arrival=0.0, generated=0, yields=0, to_compute=0):
    return RequestView(rid, arrival, state, predicted, generated, yields, to_compute)


def test_prefill_first_then_decodes_by_predicted_length():
    views = [v("d_long", DECODE, 400, 0.0), v("d_short", DECODE, 20, 1.0), v("p_mid", PARKED, 100, 2.0),
             v("n1", NEW, arrival=3.0), v("n0", NEW, arrival=2.5)]
    plan = plan_step(views, slots=3, opts=SJF, now=10.0)
    # two new arrivals take two slots (their prediction comes from that prefill), the shortest decode the third
    assert plan.waiting[:2] == ["n0", "n1"]
    assert plan.run == ["d_short"]
    assert sorted(plan.park) == ["d_long", "p_mid"]
    assert plan.yielded == ["d_long"]  # p_mid was parked already: not a new yield


def test_a_request_mid_prefill_keeps_its_slot_and_decodes_fill_the_rest_in_key_order():
    views = [v("pre", PREFILL), v("a", DECODE, 300), v("b", PARKED, 10), v("c", DECODE, 50)]
    plan = plan_step(views, slots=3, opts=SJF, now=0.0)
    assert plan.run == ["b", "c", "pre"]  # decodes lead vLLM's running list: their one token comes before a chunk
    assert plan.park == ["a"]
    assert plan.waiting == []


def test_every_request_keeps_one_place():
    views = [v("pre", PREFILL), v("a", DECODE, 300), v("b", PARKED, 10), v("c", DECODE, 50), v("n", NEW, arrival=1),
             v("r", PREEMPTED, 5)]
    plan = plan_step(views, slots=2, opts=SJF, now=0.0)
    placed = plan.run + plan.park + plan.waiting
    assert sorted(placed) == sorted(x.rid for x in views)
    assert len(placed) == len(set(placed))


def test_a_preempted_request_with_a_small_key_is_admitted_through_the_waiting_queue():
    views = [v("a", DECODE, 300), v("r", PREEMPTED, 5), v("n", NEW, arrival=9.0)]
    plan = plan_step(views, slots=2, opts=SJF, now=10.0)
    assert plan.run == []  # one slot to the new prefill, one to the preempted request (admitted from waiting)
    assert plan.waiting == ["n", "r"]
    assert plan.park == ["a"]


def test_max_prefill_slots_keeps_room_for_decodes():
    views = [v("d", DECODE, 300)] + [v(f"n{i}", NEW, arrival=float(i)) for i in range(4)]
    plan = plan_step(views, slots=4, opts=PolicyOptions("sjf", max_prefill_slots=2), now=0.0)
    assert plan.run == ["d"]
    assert plan.waiting[:2] == ["n0", "n1"]


def test_srpt_ranks_by_what_is_left():
    views = [v("a", DECODE, 100, generated=90), v("b", DECODE, 50, generated=0)]
    assert plan_step(views, 1, PolicyOptions("srpt"), 0.0).run == ["a"]  # 10 left against 50
    assert plan_step(views, 1, SJF, 0.0).run == ["b"]  # 50 predicted against 100


def test_aging_lifts_a_long_request_that_waited():
    opts = PolicyOptions("sjf", aging_weight=300.0)
    long_old, short_new = v("long", PARKED, 400, arrival=0.0), v("short", DECODE, 100, arrival=599.0)
    # 400 - 300·600/400 = -50 against 100 - 300·1/100 = 97
    assert key(long_old, opts, 600.0) == pytest.approx(-50.0)
    assert plan_step([long_old, short_new], 1, opts, 600.0).run == ["long"]
    assert plan_step([long_old, short_new], 1, SJF, 600.0).run == ["short"]


def test_a_deadline_puts_overdue_requests_first_oldest_first_even_before_later_prefills():
    opts = PolicyOptions("sjf", deadline_s=30.0)
    old_long, older_long = v("old", PARKED, 400, arrival=65.0), v("older", PARKED, 450, arrival=64.5)
    short = v("short", DECODE, 10, arrival=95.0)
    assert key(old_long, opts, 94.0) == 400  # 29 s old: still ranked by its prediction
    assert key(old_long, opts, 95.0) == -math.inf  # 30 s: overdue, never passed over again
    assert plan_step([old_long, older_long, short], 1, opts, 94.0).run == ["short"]
    assert plan_step([old_long, older_long, short], 1, opts, 95.0).run == ["older"]  # both due: the older first
    assert plan_step([old_long, older_long, short], 2, opts, 95.0).run == ["older", "old"]
    # new arrivals are prefilled first, but not ahead of an overdue request that came before them
    late_new, early_new = v("n_late", NEW, arrival=94.0), v("n_early", NEW, arrival=50.0)
    plan = plan_step([old_long, late_new], 1, opts, 95.0)
    assert (plan.run, plan.waiting) == (["old"], ["n_late"])
    plan = plan_step([old_long, early_new], 1, opts, 95.0)
    assert (plan.run, plan.waiting, plan.park) == ([], ["n_early"], ["old"])
    plan = plan_step([old_long, late_new], 1, SJF, 95.0)  # without a deadline the new prefill goes first
    assert (plan.run, plan.waiting) == ([], ["n_late"])


def test_an_overdue_request_goes_before_every_new_prefill_that_arrived_after_it_not_only_the_oldest():
    opts = PolicyOptions("sjf", deadline_s=30.0)
    overdue_parked = v("x", PARKED, 400, arrival=60.0)
    early, late = v("n50", NEW, arrival=50.0), v("n99", NEW, arrival=99.0)
    plan = plan_step([overdue_parked, early, late], 2, opts, 100.0)
    assert (plan.run, plan.waiting, plan.park) == (["x"], ["n50", "n99"], [])  # n50 first, then x, n99 waits
    plan = plan_step([overdue_parked, early, late], 3, opts, 100.0)
    assert (plan.run, plan.waiting) == (["x"], ["n50", "n99"])  # room for all three


def test_an_overdue_preempted_request_leads_the_waiting_queue():
    opts = PolicyOptions("sjf", deadline_s=30.0)
    views = [v("r", PREEMPTED, 400, arrival=10.0), v("n", NEW, arrival=90.0), v("d", DECODE, 5, arrival=80.0)]
    plan = plan_step(views, 2, opts, 100.0)
    assert plan.waiting == ["r", "n"]  # vLLM admits from the head: should its token budget run short, r still runs
    assert plan.park == ["d"]


def test_unpredicted_and_capped_requests_never_yield():
    opts = PolicyOptions("sjf", max_yields=2)
    assert key(v("x", DECODE, None), opts, 0.0) == -math.inf
    assert key(v("y", DECODE, 500, yields=2), opts, 0.0) == -math.inf
    assert key(v("y", PARKED, 500, yields=2), opts, 0.0) == 500  # it waits its turn, then it is pinned
    plan = plan_step([v("y", DECODE, 500, yields=2), v("z", PARKED, 1)], 1, opts, 0.0)
    assert plan.run == ["y"]


def test_kv_victims_free_the_largest_keys_first():
    parked = [(v("a", PARKED, 10), 3), (v("b", PARKED, 500), 2), (v("c", PARKED, 200), 4)]
    assert kv_victims(parked, 1, SJF, 0.0) == ["b"]
    assert kv_victims(parked, 3, SJF, 0.0) == ["b", "c"]
    assert kv_victims(parked, 100, SJF, 0.0) == ["b", "c", "a"]
    assert kv_victims(parked, 0, SJF, 0.0) == []


def test_no_slot_is_kept_for_a_new_request_the_step_has_no_tokens_left_to_admit():
    # a running prefill's next chunk spends the step's 32 tokens: vLLM would admit no new request, so the slot a
    # new one would have taken goes to the parked decode instead of staying empty
    views = [v("pre", PREFILL, to_compute=200), v("d", PARKED, 300), v("n", NEW, arrival=1.0, to_compute=40)]
    assert plan_step(views, 2, SJF, 0.0).run == ["pre"]  # no budget given: the slot is kept for n
    plan = plan_step(views, 2, SJF, 0.0, TokenBudget(32))
    assert (plan.run, plan.park, plan.waiting) == (["d", "pre"], [], ["n"])
    # with tokens left, n is prefilled as before (its first chunk is enough: chunked prefill)
    plan = plan_step(views, 2, SJF, 0.0, TokenBudget(32, chunk_cap=16))
    assert (plan.run, plan.park, plan.waiting) == (["pre"], ["d"], ["n"])


def test_without_chunked_prefill_admission_stops_at_the_first_prompt_that_does_not_fit_whole():
    views = [v("d1", DECODE, 300), v("d2", DECODE, 20), v("big", NEW, arrival=1.0, to_compute=100),
             v("small", NEW, arrival=2.0, to_compute=10)]
    whole = TokenBudget(64, chunked=False)
    plan = plan_step(views, 3, SJF, 0.0, whole)  # big does not fit whole beside a decode: vLLM stops there
    assert (plan.run, plan.waiting) == (["d2", "d1"], ["big", "small"])
    plan = plan_step(views, 3, SJF, 0.0, TokenBudget(64))  # chunked: big's first chunk is admitted, then no tokens
    assert (plan.run, plan.park, plan.waiting) == (["d2", "d1"], [], ["big", "small"])
    plan = plan_step(views, 3, SJF, 0.0, TokenBudget(200, chunked=False))  # both fit: two slots to new prefills
    assert (plan.run, plan.park, plan.waiting) == (["d2"], ["d1"], ["big", "small"])


def test_a_decode_that_makes_room_for_a_new_request_spends_no_token_of_the_step():
    # two slots, two tokens: one decode and one chunk of the new prompt fit, as vLLM would schedule them
    views = [v("d1", DECODE, 300), v("d2", DECODE, 20), v("n", NEW, arrival=1.0, to_compute=10)]
    plan = plan_step(views, 2, SJF, 0.0, TokenBudget(2))
    assert (plan.run, plan.park, plan.waiting) == (["d2"], ["d1"], ["n"])


def test_a_preempted_request_the_step_cannot_recompute_gives_its_slot_to_a_parked_decode():
    views = [v("d", PARKED, 300), v("r", PREEMPTED, 5, to_compute=100), v("n", NEW, arrival=1.0, to_compute=10)]
    plan = plan_step(views, 2, SJF, 0.0)  # slots alone: r (the smaller key) is admitted after n, d parks
    assert (plan.run, plan.park, plan.waiting) == ([], ["d"], ["n", "r"])
    plan = plan_step(views, 2, SJF, 0.0, TokenBudget(8))  # n's first chunk spends the 8 tokens: r would not get in
    assert (plan.run, plan.park, plan.waiting) == (["d"], [], ["n", "r"])
    assert TokenBudget(100).chunk(0) == 1  # a request always takes at least one token
