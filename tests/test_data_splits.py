"""Seeded, deterministic selection and splits; train/test duplicates are removed and counted."""

from __future__ import annotations

from lengthpred.data.records import make_record, prompt_id, user
from lengthpred.data.select import build_pools, select_domain
from lengthpred.data.settings import Forelen
from lengthpred.data.splits import cross_pairs, split_ids


def _recs(src: str, dom: str, n: int, text: str = "q") -> list[dict]:
    return [make_record(src, dom, user(f"{text} {i}")) for i in range(n)]


def test_prompt_id_is_stable_and_content_derived():
    msgs = [{"role": "user", "content": "hi"}]
    assert prompt_id("a", msgs) == prompt_id("a", [dict(m) for m in msgs])
    assert prompt_id("a", msgs) != prompt_id("b", msgs)
    assert make_record("a", "chat", user("  hi \n"))["id"] == prompt_id("a", msgs)


def test_selection_is_order_independent_and_seeded():
    pools = {"a": _recs("a", "chat", 30), "b": _recs("b", "chat", 5)}
    sel, _ = select_domain(pools, 12, seed=0)
    rev, _ = select_domain({k: v[::-1] for k, v in pools.items()}, 12, seed=0)
    assert [r["id"] for r in sel] == [r["id"] for r in rev]
    assert sum(r["source"] == "b" for r in sel) == 5  # round-robin takes all of the small source
    other, _ = select_domain(pools, 12, seed=1)
    assert {r["id"] for r in other} != {r["id"] for r in sel}


def test_accept_rejects_are_counted():
    pools = {"a": _recs("a", "chat", 10)}
    sel, n_rej = select_domain(pools, 5, seed=0, accept=lambda r: not r["messages"][0]["content"].endswith("3"))
    assert len(sel) == 5 and n_rej in (0, 1)
    assert all(not r["messages"][0]["content"].endswith("3") for r in sel)


def test_pools_drop_too_long_duplicates_and_empty():
    recs = _recs("a", "chat", 3) + [make_record("a", "chat", user("x" * 100)), make_record("a", "chat", user(" "))]
    dup = make_record("b", "chat", user("q 0"))
    pools, dropped = build_pools({"a": recs, "b": [dup]}, {"chat": ["a", "b"]}, max_prompt_chars=50)
    assert len(pools["chat"]["a"]) == 3 and pools["chat"]["b"] == []
    assert dropped["chat"] == {"too_long": 1, "empty_prompt": 1, "duplicate": 1}


def test_split_ids_deterministic_and_disjoint():
    ids = [f"{i:016x}" for i in range(100)]
    a = split_ids(ids, {"train": 60, "val": 20, "test": 20}, seed=3)
    assert a == split_ids(list(reversed(ids)), {"train": 60, "val": 20, "test": 20}, seed=3)
    assert a != split_ids(ids, {"train": 60, "val": 20, "test": 20}, seed=4)
    assert not set(a["train"]) & set(a["test"]) and len(a["val"]) == 20
    f = split_ids(ids, {"train": 0.6, "val": 0.2, "test": 0.2}, seed=3)
    assert [len(f[k]) for k in ("train", "val", "test")] == [60, 20, 20]


def test_cross_pairs_remove_duplicates_across_train_and_test():
    chat, math = _recs("x", "chat", 10, "c"), _recs("y", "math", 10, "m")
    same_text = make_record("z", "math", user("c 0"))  # chat's "c 0" arriving from another source
    by_id = {r["id"]: r for r in chat + math + [same_text]}
    indomain = {"chat": {"train": [r["id"] for r in chat], "val": [], "test": [r["id"] for r in chat[:2]]},
                "math": {"train": [r["id"] for r in math], "val": [], "test": [same_text["id"]]}}
    pairs, removed = cross_pairs(indomain, by_id, mix=False)
    chat_to_math = next(p for p in pairs if p["name"] == "chat->math")
    assert chat[0]["id"] not in chat_to_math["train"] and removed == 1
    assert {p["name"] for p in pairs} == {"chat->math", "math->chat"}
    assert chat_to_math["shift"]["length_wasserstein"] >= 0


def test_forelen_excludes_train_prompts():
    from lengthpred.data.splits import cot_variants, forelen

    math = _recs("gsm8k", "math", 20)
    train = {r["id"] for r in math[:15]}
    base = [r for r in math if r["id"] not in train]
    cot = cot_variants(base, 5, 0, "Think.")
    subsets = forelen(math, cot, Forelen(longseq=10, rl=10), 0, exclude=train)
    assert not (set(subsets["longseq"]) | set(subsets["rl"])) & train
    assert len(subsets["rl"]) == 5 and len(subsets["reasoning"]) == 5
    bases = {c["messages"][-1]["content"].removesuffix("\n\nThink.") for c in cot}
    assert bases == {r["messages"][-1]["content"] for r in base}
