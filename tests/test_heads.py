"""Every numpy head: fits, predicts tokens, beats the constant where it should, saves/loads exactly."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import spearmanr

from lengthpred.errors import ConfigError
from lengthpred.heads import HEADS, BaseHead, HeadInput, HeadInputError, build_head, load_head

pytestmark = pytest.mark.numeric  # torch heads: `make test-portable` reruns these under every CPU kernel

# Heads on features, with settings that train in well under a second on the data below.
FEATURE_HEADS = {
    "linear": {},
    "egtp": dict(lr=3e-3, epochs=40, n_threads=1),
    "estp": dict(lr=3e-3, epochs=40, n_threads=1),
    "probe": dict(lr=3e-3, epochs=40, n_threads=1),
}
NUMPY_HEADS = ["constant", "prompt_len", "domain_median", *FEATURE_HEADS]


def planted(n: int = 240, d: int = 16, seed: int = 0) -> tuple[HeadInput, np.ndarray]:
    """log-length linear in 4 of d features, plus noise; domains and prompt lengths attached."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    w = np.zeros(d)
    w[:4] = [0.6, -0.4, 0.3, 0.2]
    y = np.round(np.expm1(4.5 + X @ w + 0.15 * rng.normal(size=n)))
    domains = list(np.where(X[:, 0] > 0, "math", "chat"))
    inp = HeadInput(
        ids=[f"{i:016x}" for i in range(n)],
        features=X,
        domains=domains,
        n_prompt_tokens=rng.integers(5, 500, size=n).astype(float),
    )
    return inp, y


def head_for(name: str) -> BaseHead:
    return build_head(name, **FEATURE_HEADS.get(name, {}))


def split(inp: HeadInput, y: np.ndarray, n_train: int = 180):
    def part(s: slice) -> tuple[object, np.ndarray]:
        sub = HeadInput(
            ids=inp.ids[s],
            features=inp.features[s],
            domains=inp.domains[s],
            n_prompt_tokens=inp.n_prompt_tokens[s],
        )
        return sub, y[s]

    return part(slice(0, n_train)), part(slice(n_train, None))


def test_registry_lists_every_head_and_rejects_unknown():
    assert set(HEADS.names()) == {*NUMPY_HEADS, "estp_learned", "proxy_reg", "proxy_cls", "proxy_rank", "lora",
                                  "quantile_linear", "censored_lognormal", "concat"}
    with pytest.raises(ConfigError, match="valid: .*linear"):
        HEADS.get("lienar")


@pytest.mark.parametrize("name", NUMPY_HEADS)
def test_fits_predicts_tokens_and_roundtrips(name, tmp_path):
    (tr, ytr), (te, _) = split(*planted())
    head = head_for(name)
    x_tr, x_te = tr.x_for(head.input_kind), te.x_for(head.input_kind)
    assert head.fit(x_tr, ytr) is head
    pred = head.predict(x_te)
    assert pred.shape == (len(te),) and np.all(np.isfinite(pred)) and np.all(pred >= 0)
    assert head.n_parameters >= 1
    loaded = load_head(head.save(tmp_path / name))
    assert type(loaded) is type(head) and loaded.get_params() == head.get_params()
    np.testing.assert_array_equal(loaded.predict(x_te), pred)
    assert loaded.n_parameters == head.n_parameters


@pytest.mark.parametrize("name", list(FEATURE_HEADS))
def test_feature_head_beats_constant_on_planted_signal(name):
    (tr, ytr), (te, yte) = split(*planted())
    pred = head_for(name).fit(tr.features, ytr).predict(te.features)
    rho = spearmanr(pred, yte).statistic
    mae_const = np.abs(np.median(ytr) - yte).mean()
    assert rho > 0.6, f"{name}: spearman {rho:.2f}"
    assert np.abs(pred - yte).mean() < mae_const


def test_baselines_use_their_signal():
    (tr, ytr), (te, yte) = split(*planted())
    dom = build_head("domain_median").fit(tr.x_for("domains"), ytr)
    assert (
        spearmanr(dom.predict(te.x_for("domains")), yte).statistic > 0.4
    )  # domain = sign of a signal feature
    assert set(np.unique(dom.predict(np.array([["unseen"]], dtype=object)))) == {dom.global_median_}
    const = build_head("constant").fit(tr.x_for("n_prompt_tokens"), ytr)
    assert np.all(const.predict(te.x_for("n_prompt_tokens")) == np.median(ytr))


@pytest.mark.parametrize("name", NUMPY_HEADS)
def test_fit_twice_gives_the_same_model(name):
    (tr, ytr), (te, _) = split(*planted())
    head = head_for(name)
    x_tr, x_te = tr.x_for(head.input_kind), te.x_for(head.input_kind)
    first = head.fit(x_tr, ytr).predict(x_te)
    head.fit(x_tr[:50], ytr[:50])  # something else in between: fit must reset it
    np.testing.assert_array_equal(head.fit(x_tr, ytr).predict(x_te), first)


@pytest.mark.parametrize("name", ["egtp", "probe"])
def test_partial_fit_continues_and_validates_feature_count(name):
    (tr, ytr), _ = split(*planted())
    head = head_for(name)
    head.partial_fit(tr.features[:90], ytr[:90])
    assert head.n_epochs_ == 1 and head.n_features_in_ == tr.features.shape[1]
    before = head.predict(tr.features[:5])
    head.partial_fit(tr.features[90:], ytr[90:])
    assert head.n_epochs_ == 2
    assert not np.array_equal(head.predict(tr.features[:5]), before)
    with pytest.raises(ValueError, match="features"):
        head.partial_fit(tr.features[:, :5], ytr)


def test_linear_selects_alpha_and_exposes_readout():
    (tr, ytr), (te, _) = split(*planted())
    head = build_head("linear").fit(tr.features, ytr)
    assert head.alpha_ in head.alphas and head.coef_.shape == (16,)
    # the readout in the standardised, log1p space reproduces predict(), smeared to a mean (S > 1)
    z = (te.features - head.scaler_.mean_) / head.scaler_.scale_
    assert head.smearing_ > 1.0
    np.testing.assert_allclose(
        head.smearing_ * np.exp(z @ head.coef_ + head.intercept_) - 1, head.predict(te.features), rtol=1e-6
    )
    median = build_head("linear", back_transform="median").fit(tr.features, ytr)
    assert median.smearing_ == 1.0
    np.testing.assert_allclose(np.expm1(z @ median.coef_ + median.intercept_), median.predict(te.features))
    raw = build_head("linear", target="raw", alpha=1.0).fit(tr.features, ytr)
    np.testing.assert_allclose(raw.predict(te.features), z @ raw.coef_ + raw.intercept_, rtol=1e-6)


def test_heads_reject_bad_X_and_y():
    (tr, ytr), _ = split(*planted())
    with pytest.raises(HeadInputError, match="rows"):
        build_head("linear").fit(tr.features, ytr[:-1])
    with pytest.raises(HeadInputError, match="log1p"):
        build_head("linear").fit(tr.features, -ytr)
    bad = tr.features.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        build_head("egtp").fit(bad, ytr)
    with pytest.raises(ValueError):
        build_head("probe", n_bins=1).fit(tr.features, ytr)  # invalid hyperparameter, before any work
    with pytest.raises(ConfigError, match="valid keys"):
        build_head("linear", alpah=3.0)
    with pytest.raises(Exception, match="not fitted"):
        build_head("egtp").predict(tr.features)


def test_load_rejects_a_folder_without_a_head(tmp_path):
    with pytest.raises(Exception, match="no saved head"):
        load_head(tmp_path)
