"""ESTP's learned fusion head: it learns which per-token score carries the signal, equals the fixed
mix at its initial weight, persists without pickle, and trains from train.py on token-level features."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import spearmanr

from lengthpred.errors import DataError
from lengthpred.heads import ESTPLearnedHead, HeadInputError, load_head
from tests.test_heads_training import trace_run  # noqa: F401  (the fixture)
from tests.tolerances import assert_close_f32

pytestmark = pytest.mark.numeric

FAST = dict(epochs=30, lr=3e-3, hidden=16)


def keyed(seed: int, key: str, n: int = 120, d: int = 8) -> tuple[list[np.ndarray], np.ndarray]:
    """The length is written into the state of the token with the highest entropy or attention;
    every other token is noise, so only a pooling that follows `key` recovers it."""
    rng = np.random.default_rng(seed)
    X, y = [], []
    for _ in range(n):
        t = int(rng.integers(8, 30))
        h = rng.normal(size=(t, d)) * 2
        ent, att = rng.random(t), rng.random(t)
        s = rng.random()
        h[(att if key == "attn" else ent).argmax(), :] = 6 * s
        X.append(np.c_[h, ent, att].astype(np.float32))
        y.append(200 * s)
    return X, np.array(y)


@pytest.mark.parametrize("key", ["attn", "entropy"])
def test_learned_alpha_moves_to_the_informative_score_and_beats_the_fixed_mix(key):
    X, y = keyed(0, key)
    Xt, yt = keyed(1, key)
    learned = ESTPLearnedHead(**FAST).fit(X, y)
    fixed = ESTPLearnedHead(**FAST, fusion_lr=0.0).fit(X, y)
    assert fixed.alpha_ == pytest.approx(0.5) and fixed.temperature_ == pytest.approx(1.0)
    assert (learned.alpha_ < 0.3) if key == "attn" else (learned.alpha_ > 0.7)
    rho = spearmanr(learned.predict(Xt), yt).statistic
    assert rho > spearmanr(fixed.predict(Xt), yt).statistic + 0.1


@pytest.mark.parametrize("key", ["attn", "entropy"])
def test_running_standardisation_follows_the_learned_fusion(key):
    """The demo's flat predictions: standardising the pooled vector once, at α = 0.5 and β = 1, leaves the
    MLP an offset input once α and β move. The running scale keeps it standard and the fit sharp."""
    X, y = keyed(0, key)
    Xt, yt = keyed(1, key)
    tracked = ESTPLearnedHead(**FAST).fit(X, y)
    frozen = ESTPLearnedHead(**FAST, scale_momentum=0.0).fit(X, y)  # this head before the fix
    xin, old = _mlp_input(tracked, X), _mlp_input(frozen, X)
    assert np.abs(xin.mean(0)).mean() < min(0.2, np.abs(old.mean(0)).mean()) and abs(xin.std(0).mean() - 1) < 0.1
    assert tracked.temperature_ > 5 > frozen.temperature_  # the sharper pooling the frozen scale could not follow
    pred = tracked.predict(Xt)
    assert pred.std() > 0.5 * yt.std()  # not flat
    assert np.abs(pred - yt).mean() < 0.7 * np.abs(np.median(y) - yt).mean()  # beats a constant
    assert spearmanr(pred, yt).statistic > spearmanr(frozen.predict(Xt), yt).statistic + 0.1


def _mlp_input(head: ESTPLearnedHead, X: list[np.ndarray]) -> np.ndarray:
    import torch

    from lengthpred.heads.fusion import _Tokens

    data = _Tokens(X, fuse_on=head.fuse_on)
    with torch.no_grad():
        pooled = head.module_.pool(*data.batch(list(range(len(data)))))
    return ((pooled - head.module_.x_mean) / head.module_.x_scale).numpy()


def test_initial_pooling_is_the_stored_fused_pool(tiny_model, tokenizer, tmp_path):
    """α = 0.5, β = 1 on the stored token inputs (content span, z(H) and z(log A)) is the stored fused_mix0.5."""
    import torch

    from lengthpred.features import FeatureSettings, extract_features, load_features
    from lengthpred.heads.fusion import _Tokens
    from tests.test_features import PROMPTS

    s = FeatureSettings(layers=(2,), token_layers=(2,), pools=("entropy",), fused=("mix0.5",), dtype="float32")
    fs = load_features(extract_features(s, tiny_model, tokenizer, PROMPTS, out_dir=tmp_path, progress=False))
    X = fs.token_inputs(2)
    head = ESTPLearnedHead(epochs=1, fusion_lr=0.0, learn_temperature=False).fit(X, np.arange(len(X)) * 10.0)
    data = _Tokens(X, fuse_on=head.fuse_on)
    with torch.no_grad():
        pooled = head.module_.pool(*data.batch(list(range(len(X))))).numpy()
    assert_close_f32(pooled, fs.get("hs.L2.fused_mix0.5"), tiny_model.config.vocab_size, both_float32=True)


def test_initial_pooling_is_the_stored_convex_mix():
    X, y = keyed(0, "attn", n=10)
    head = ESTPLearnedHead(epochs=1, alpha_init=0.3, fusion_lr=0.0, learn_temperature=False, fuse_on="z").fit(X, y)

    def z(v):
        return (v - v.mean()) / (v.std() + 1e-6)

    import torch

    for x in X[:3]:
        h, ent, att = x[:, :-2].astype(np.float64), x[:, -2], x[:, -1]
        w = np.exp(0.3 * z(ent) + 0.7 * z(att))
        want = (w / w.sum()) @ h
        t = torch.from_numpy(x)
        got = head.module_.pool(t[None, :, :-2], torch.from_numpy(z(ent))[None].float(),
                                torch.from_numpy(z(att))[None].float(), torch.ones(1, len(x), dtype=torch.bool))
        assert_close_f32(got[0].detach().numpy(), want, len(x))  # float32 softmax and pool over the tokens


def test_save_load_partial_fit_and_bad_inputs(tmp_path):
    X, y = keyed(0, "attn", n=40)
    head = ESTPLearnedHead(epochs=3, hidden=8).fit(X, y)
    head.save(tmp_path / "h")
    back = load_head(tmp_path / "h")
    assert isinstance(back, ESTPLearnedHead) and back.alpha_ == pytest.approx(head.alpha_)
    np.testing.assert_array_equal(back.predict(X), head.predict(X))
    doc = json.loads((tmp_path / "h" / "head.json").read_text())
    assert doc["meta"]["alpha"] == pytest.approx(head.alpha_) and doc["meta"]["fuse_on"] == "log"
    np.testing.assert_array_equal(back.x_mean_, back.module_.x_mean.numpy())  # the running scale as trained
    del doc["meta"]["fuse_on"], doc["params"]["fuse_on"]  # a head saved before the option fused z-scores
    (tmp_path / "h" / "head.json").write_text(json.dumps(doc))
    assert load_head(tmp_path / "h").fuse_on == "z"
    back.partial_fit(X[:8], y[:8])
    assert back.n_epochs_ == 4 and not np.array_equal(back.predict(X), head.predict(X))
    assert ESTPLearnedHead(epochs=1).partial_fit(X, y).n_epochs_ == 1
    with pytest.raises(HeadInputError, match="sequence of"):
        head.predict(np.zeros((3, 10), dtype=np.float32))
    with pytest.raises(HeadInputError, match="features"):
        head.predict([np.zeros((4, 5), dtype=np.float32)])
    bad = [x.copy() for x in X[:2]]
    bad[1][0, 0] = np.nan
    with pytest.raises(HeadInputError, match="NaN"):
        head.predict(bad)


def test_train_stage_on_token_level_features(trace_run):  # noqa: F811
    from lengthpred.stages.train import train_from_config

    tokens = ["features.pools=[last,entropy,attn]", "features.fused=[mix0.5]", "features.token_layers=[2]",
              "head.layer=2", "head.params.epochs=2"]
    cfg = trace_run("estp_learned", *tokens)
    m = train_from_config(cfg, cfg.paths.output_dir)
    assert m["head"] == "estp_learned" and m["n_test"] > 0 and m["n_parameters"] > 0
    assert 0 < load_head(f"{cfg.paths.output_dir}/head").alpha_ < 1

    missing = trace_run("estp_learned", "head.layer=2")  # features.token_layers is empty there
    with pytest.raises(DataError, match="token_layers"):
        train_from_config(missing, missing.paths.output_dir)
