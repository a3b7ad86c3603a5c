"""The serving model fine-tuned as its own predictor (head `lora`) on the tiny random-weight model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lengthpred.heads import HEADS, LoraHead, load_head
from lengthpred.heads.base import HeadInputError
from lengthpred.heads.linear import LinearHead
from lengthpred.heads.lora import FROZEN
from lengthpred.models.partial import last_real, right_pad, run_layers, states
from lengthpred.prompting import encode_prompt

LAYER = 3  # of the tiny model's 4


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, tiny_model, tokenizer):
    d = tmp_path_factory.mktemp("tiny_lm")
    tiny_model.save_pretrained(str(d))
    tokenizer.save_pretrained(str(d))
    return str(d)


def chats(n: int, seed: int = 0) -> tuple[list[list[dict]], np.ndarray]:
    rng = np.random.default_rng(seed)
    words = ["list", "explain", "write", "sum", "story", "code", "short", "long", "poem", "why"]
    X, y = [], []
    for i in range(n):
        k = int(rng.integers(2, 12))
        turn = [{"role": "user", "content": " ".join(rng.choice(words, size=k)) + f" {i}"}]
        if i % 5 == 0:  # a few multi-turn chats: the template must see every turn
            turn = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}, *turn]
        X.append(turn)
        y.append(float(10 * k + rng.integers(0, 20)))
    return X, np.asarray(y)


def small(**kw) -> LoraHead:
    return LoraHead(**({"layer": LAYER, "lora_layers": 2, "rank": 2, "epochs": 1, "batch_size": 4,
                        "progress": False} | kw))


def test_layers_in_parts_equal_the_full_forward_on_right_padded_batches(tiny_model, tokenizer, one_torch_thread):
    X, _ = chats(5)
    rows = [encode_prompt(tokenizer, m) for m in X]
    ids, mask = right_pad(rows, tokenizer.pad_token_id)
    dec = tiny_model.model
    with torch.no_grad():
        for i, r in enumerate(rows):  # one prompt alone, unpadded: HF's own hidden_states
            full = tiny_model(torch.tensor([r]), output_hidden_states=True).hidden_states
            for L in (2, 4):  # 4 = the last: HF returns it after the final norm
                a = states(dec, ids, mask, 0, L)[i, len(r) - 1]
                torch.testing.assert_close(a, full[L][0, -1], rtol=1e-4, atol=1e-5)
            h1 = states(dec, ids, mask, 0, 1)
            two = last_real(run_layers(dec, h1, mask, 1, 3), mask)[i]
            torch.testing.assert_close(two, full[3][0, -1], rtol=1e-4, atol=1e-5)


def test_before_training_moves_it_the_head_is_the_ridge_readout_of_the_same_state(tiny_dir, tiny_model, tokenizer,
                                                                                  one_torch_thread):
    X, y = chats(40)
    head = small(model=tiny_dir, lr=1e-12).fit(X, y)  # LoRA's B starts at 0: the adapter adds nothing yet
    with torch.no_grad():
        F = np.stack([tiny_model(torch.tensor([encode_prompt(tokenizer, m)]), output_hidden_states=True)
                      .hidden_states[LAYER][0, -1].double().numpy() for m in X])  # hs.L3.last
    readout = LinearHead(alpha=head.warm_alpha_).fit(F, y)
    np.testing.assert_allclose(head.predict_points(X).median, readout.predict_points(F).median, rtol=2e-3)


def test_fit_predict_save_load_and_refit_are_reproducible(tiny_dir, tmp_path, one_torch_thread):
    X, y = chats(30)
    FROZEN.clear()
    a = small(model=tiny_dir, lr=1e-2, random_state=3).fit(X, y)
    pts = a.predict_points(X[:7])
    assert pts.pred.shape == (7,) and np.all(pts.pred >= 0) and pts.median is not None and pts.mean is not None
    b = small(model=tiny_dir, lr=1e-2, random_state=3).fit(X, y)  # fit resets: the same model again
    np.testing.assert_allclose(a.predict(X), b.predict(X), rtol=1e-5)
    # only the adapter (2 layers × 7 projections), the output layer and the standardisation are learned
    assert 0 < a.n_parameters < 20_000
    back = load_head(a.save(tmp_path / "h"))
    assert isinstance(back, LoraHead)
    np.testing.assert_allclose(back.predict(X), a.predict(X), rtol=1e-5)
    trained = [v for k, v in a.encoder_.state_dict().items() if "lora_B" in k]
    assert trained and any(float(v.abs().sum()) > 0 for v in trained)  # the adapter moved


def test_rank_objective_maps_scores_to_tokens(tiny_dir, one_torch_thread):
    X, y = chats(30)
    head = small(model=tiny_dir, objective="rank", group_size=5).fit(X, y)
    p = head.predict_points(X)
    assert p.mean is None and p.pred.min() >= y.min() and p.pred.max() <= y.max()


@pytest.mark.parametrize(("kw", "match"), [
    ({"target_modules": ["q_proj", "nope"]}, r"target_modules \['nope'\].*have \["),
    ({"rank": 0}, "rank=0"),
    ({"rank": 65}, "rank=65: use 1 to the hidden size 64"),
    ({"lora_layers": 5}, "lora_layers=5"),
    ({"layer": 9}, "layer=9"),
])
def test_bad_setups_are_one_line_before_any_work(tiny_dir, kw, match):
    head = small(model=tiny_dir, **kw)
    with pytest.raises(HeadInputError, match=match) as e:
        head.check_config()
    assert "\n" not in str(e.value)
    with pytest.raises(HeadInputError, match=match):
        head.fit([[{"role": "user", "content": "x"}]], [1.0])


def test_the_search_checks_every_candidate_before_fitting_any(tiny_dir, monkeypatch):
    from lengthpred.heads import HeadSettings, LabeledSet, run_training
    from lengthpred.heads.base import HeadInput

    X, y = chats(12)
    data = LabeledSet(HeadInput(ids=[str(i) for i in range(12)], messages=X), y)
    fitted = []
    monkeypatch.setattr(LoraHead, "fit", lambda self, *a, **k: fitted.append(1) or self)
    settings = HeadSettings(params={"model": tiny_dir, "layer": LAYER, "lora_layers": 2, "progress": False},
                            select={"rank": [2, 99]})
    with pytest.raises(HeadInputError, match="rank=99"):
        run_training("lora", settings, data, data, data)
    assert fitted == []


def test_registered_and_takes_chats_only():
    assert HEADS.get("lora") is LoraHead and LoraHead.input_kind == "messages"
    with pytest.raises(HeadInputError, match="one chat per prompt"):
        LoraHead()._inputs(["a plain string"])
