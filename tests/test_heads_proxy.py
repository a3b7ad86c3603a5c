"""Proxy heads on a tiny random BERT (built from a config here) with the embedded MiniLM tokenizer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from lengthpred.heads import HeadInputError, build_head, load_head
from lengthpred.heads.proxy import listmle_loss

pytestmark = pytest.mark.numeric  # torch heads: `make test-portable` reruns these under every CPU kernel

PROXY_HEADS = ["proxy_reg", "proxy_cls", "proxy_rank"]


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory) -> str:
    from transformers import AutoTokenizer, BertConfig, BertModel

    from lengthpred.models.specs import embedded_proxy_dir

    d = tmp_path_factory.mktemp("tiny_bert")
    tok = AutoTokenizer.from_pretrained(str(embedded_proxy_dir()))
    tok.save_pretrained(str(d))
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    BertModel(cfg).save_pretrained(str(d))
    return str(d)


def texts_and_lengths(n: int, seed: int = 0) -> tuple[list[str], np.ndarray]:
    """Two kinds of request with clearly different lengths: the signal a proxy must pick up."""
    rng = np.random.default_rng(seed)
    words = ["cats", "rivers", "stars", "trains", "maps"]
    long = rng.random(n) < 0.5
    texts = [
        ("write a long detailed essay about " if lg else "answer yes or no: ")
        + " ".join(rng.choice(words, 3))
        for lg in long
    ]
    y = np.where(long, 300.0, 12.0) + rng.integers(0, 10, n)
    return texts, y


def make(name: str, encoder: str, **kw):
    return build_head(
        name,
        encoder=encoder,
        max_seq_len=24,
        epochs=4,
        lr=2e-3,
        batch_size=8,
        progress=False,
        n_threads=1,
        **kw,
    )


@pytest.mark.parametrize("name", PROXY_HEADS)
def test_proxy_learns_roundtrips_and_refits_identically(name, tiny_encoder, tmp_path):
    texts, y = texts_and_lengths(60)
    head = make(name, tiny_encoder)
    pred = head.fit(texts[:40], y[:40]).predict(texts[40:])
    assert pred.shape == (20,) and np.all(np.isfinite(pred)) and np.all(pred >= 0)
    assert spearmanr(pred, y[40:]).statistic > 0.5
    assert head.n_parameters == sum(
        p.numel() for p in head.encoder_.parameters()
    ) + head.out_.weight.numel() + (head.out_.bias.numel())
    loaded = load_head(head.save(tmp_path / name))
    np.testing.assert_allclose(loaded.predict(texts[40:]), pred, rtol=1e-6)
    np.testing.assert_allclose(
        make(name, tiny_encoder).fit(texts[:40], y[:40]).predict(texts[40:]), pred, rtol=1e-6
    )


def test_proxy_rejects_arrays_and_negative_lengths(tiny_encoder):
    with pytest.raises(HeadInputError, match="prompt strings"):
        make("proxy_reg", tiny_encoder).fit(np.zeros((4, 3)), np.ones(4))
    with pytest.raises(HeadInputError, match=">= 0"):
        make("proxy_reg", tiny_encoder).fit(["a", "b"], np.array([1.0, -2.0]))


def test_listmle_prefers_the_true_order():
    y = torch.tensor([5.0, 1.0, 3.0])
    right = listmle_loss(torch.tensor([2.0, 0.0, 1.0]), y)
    wrong = listmle_loss(torch.tensor([0.0, 2.0, 1.0]), y)
    assert right < wrong
    # with 2 items the loss is softplus(s_short - s_long)
    assert torch.isclose(
        listmle_loss(torch.tensor([0.3, 1.0]), torch.tensor([9.0, 1.0])),
        torch.nn.functional.softplus(torch.tensor(0.7)),
    )


@pytest.mark.parametrize("name", PROXY_HEADS)
def test_proxy_points_median_and_mean(name, tiny_encoder, tmp_path):
    """reg: expm1(ẑ) and the smeared mean; cls: its bucket distribution's median and expectation; rank: the
    quantile map as its median and no mean (a ranking score has no calibrated mean)."""
    from lengthpred.distributions import Histogram
    from lengthpred.heads.base import NoPointError

    texts, y = texts_and_lengths(40)
    head = make(name, tiny_encoder).fit(texts[:30], y[:30])
    p = head.predict_points(texts[30:])
    np.testing.assert_allclose(p.pred, head.predict(texts[30:]))
    assert np.isfinite(p.median).all()
    if name == "proxy_rank":
        assert p.mean is None
        with pytest.raises(NoPointError, match="no calibrated mean"):
            head.predict_mean(texts[30:])
        np.testing.assert_allclose(p.median, p.pred)
        return
    if name == "proxy_reg":
        np.testing.assert_allclose(p.mean, p.pred)
        np.testing.assert_allclose(p.mean + 1, head.smearing_ * (p.median + 1))
    else:
        probs = torch.softmax(torch.from_numpy(head._outputs(texts[30:])), dim=1).numpy()
        np.testing.assert_allclose(p.median, Histogram(head.bucket_edges_, probs).quantile([0.5])[:, 0])
        np.testing.assert_allclose(p.mean, probs @ head.bucket_means_)
    loaded = load_head(head.save(tmp_path / name))
    np.testing.assert_allclose(loaded.predict_points(texts[30:]).mean, p.mean, rtol=1e-6)


def test_proxy_cls_chooses_its_within_bucket_reading_on_validation(tiny_encoder, tmp_path):
    """`within_bin="validation"`: the bucket reading with the lower MAE of the median on the val texts, kept by
    a save; the uniform reading until then. Training is the same either way."""
    from lengthpred.distributions import Histogram

    texts, y = texts_and_lengths(40)
    head = make("proxy_cls", tiny_encoder, within_bin="validation").fit(texts[:30], y[:30])
    assert head.within_bin_ == "uniform"
    head.tune_on_validation(texts[30:], y[30:])
    probs = torch.softmax(torch.from_numpy(head._outputs(texts[30:])), dim=1).numpy()
    mae = {w: np.abs(Histogram(head.bucket_edges_, probs, k).quantile([0.5])[:, 0] - y[30:]).mean()
           for w, k in (("uniform", head._uniform_knots()), ("training", head.shaped_knots_))}
    assert head.within_bin_mae_ == pytest.approx(mae)
    assert head.within_bin_ == ("training" if mae["training"] < mae["uniform"] else "uniform")
    loaded = load_head(head.save(tmp_path / "cls"))
    assert loaded.within_bin_ == head.within_bin_
    np.testing.assert_allclose(loaded.predict_points(texts[30:]).median, head.predict_points(texts[30:]).median,
                               rtol=1e-5)
