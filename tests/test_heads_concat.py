"""The concatenated-layers readout: its blocks, its folded PCA + ridge map, and selection of layers and PCA
dimensions on validation (never test)."""

from __future__ import annotations

import numpy as np
import pytest

from lengthpred.heads import (
    ConcatLinearHead,
    HeadInput,
    HeadInputError,
    HeadSettings,
    LabeledSet,
    LinearHead,
    load_head,
    run_training,
)
from lengthpred.heads.concat import block_columns


def test_block_columns_pick_the_used_layers_in_layer_order():
    assert block_columns(6, [4, 8, 12], [12, 4]).tolist() == [0, 1, 4, 5]
    assert block_columns(6, [4, 8, 12], None).tolist() == list(range(6))
    assert block_columns(3, None, None).tolist() == [0, 1, 2]
    for width, layers, use, msg in [
        (7, [4, 8], None, "equal blocks"),
        (6, [4, 8, 12], [16], "subset"),
        (6, [4, 8, 12], [], "subset"),
        (6, None, [4], "set `layers`"),
        (6, [4, 4, 8], None, "distinct"),
    ]:
        with pytest.raises(HeadInputError, match=msg):
            block_columns(width, layers, use)


def _data(n: int, d: int = 12, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.round(np.expm1(4 + 0.6 * X[:, 0] - 0.3 * X[:, 3] + 0.2 * rng.normal(size=n)))
    return X, y


@pytest.mark.parametrize("n_components", [None, 12])
def test_without_truncation_it_is_the_linear_readout(n_components):
    """No PCA, or PCA keeping every dimension (a rotation ridge does not see), folds to LinearHead's map."""
    X, y = _data(80)
    mine = ConcatLinearHead(n_components=n_components, alpha=3.0).fit(X, y)
    ref = LinearHead(alpha=3.0).fit(X, y)
    np.testing.assert_allclose(mine.predict(X), ref.predict(X), rtol=1e-8)
    assert mine.smearing_ == pytest.approx(ref.smearing_) and mine.smearing_ > 1.0
    assert mine.n_parameters == ref.n_parameters == 13


def test_components_are_capped_and_saved(tmp_path):
    X, y = _data(20, d=30)
    head = ConcatLinearHead(layers=[1, 2, 3], use=[1, 3], n_components=50, alpha=1.0).fit(X, y)
    assert (
        head.n_components_ == 20 and head.n_parameters == 21
    )  # min(n_train, 20 used columns); 20 weights + bias
    back = load_head(head.save(tmp_path / "h"))
    np.testing.assert_array_equal(back.predict(X), head.predict(X))
    assert back.get_params() == head.get_params() and back.n_components_ == 20
    with pytest.raises(ValueError, match="features"):
        head.predict(X[:, :12])


def _set(F: np.ndarray, y: np.ndarray, tag: str) -> LabeledSet:
    return LabeledSet(HeadInput(ids=[f"{tag}{i}" for i in range(len(y))], features=F), y)


def test_pca_dimensions_are_chosen_on_validation_not_test():
    """Standardised X has one strong shared factor f1 (10 correlated columns: the first component) and an
    independent column f2. Train lengths follow f1 + f2; val lengths follow f1 alone, test lengths f2 alone.
    One component keeps f1 only (best on val), all of them keep f2 too (best on test): val must decide."""
    rng = np.random.default_rng(1)

    def make(n: int, w1: float, w2: float, tag: str) -> LabeledSet:
        f1, f2 = rng.normal(size=n), rng.normal(size=n)
        X = np.column_stack([f1[:, None] + 0.1 * rng.normal(size=(n, 10)), f2, rng.normal(size=(n, 3))])
        return _set(X, np.round(np.expm1(4 + w1 * f1 + w2 * f2 + 0.05 * rng.normal(size=n))), tag)

    train, val, test = make(200, 0.5, 0.5, "tr"), make(80, 0.5, 0.0, "va"), make(80, 0.0, 0.5, "te")
    cfg = HeadSettings(params={"alpha": 1.0}, select={"n_components": [1, 14]})
    head, metrics, _ = run_training("concat", cfg, train, val, test)
    assert metrics["selected"] == {"n_components": 1} and head.n_components_ == 1
    best_on_test = ConcatLinearHead(n_components=14, alpha=1.0).fit(train.inputs.features, train.y)
    from lengthpred.heads.training import score

    assert score(test.y, best_on_test.predict(test.inputs.features))["spearman"] > metrics["spearman"] + 0.3


def test_the_layer_set_is_chosen_on_validation():
    """X holds layers 10 and 20; lengths follow layer 20's block: `use` picks it among the candidates."""
    rng = np.random.default_rng(2)

    def make(n: int, tag: str) -> LabeledSet:
        X = rng.normal(size=(n, 8))
        return _set(X, np.round(np.expm1(4 + 0.7 * X[:, 5] + 0.1 * rng.normal(size=n))), tag)

    cfg = HeadSettings(params={"layers": [10, 20], "alpha": 1.0, "n_components": 4},
                       select={"use": [[10], [20], [10, 20]]})
    head, metrics, _ = run_training("concat", cfg, make(120, "tr"), make(60, "va"), make(60, "te"))
    assert metrics["selected"] == {"use": [20]} and head.columns_.tolist() == [4, 5, 6, 7]
    assert metrics["spearman"] > 0.9


def test_a_layers_config_names_every_column_in_the_order_x_holds_them():
    from lengthpred.stages.heads import feature_names, feature_needs

    hcfg = {
        "params": {"_target_": "lengthpred.heads.ConcatLinearHead"},
        "layers": [4, 2],
        "pooling": ["last", "mean"],
    }
    assert feature_names(hcfg) == ["hs.L4.last", "hs.L4.mean", "hs.L2.last", "hs.L2.mean"]
    assert feature_needs(hcfg) == [(4, "last"), (4, "mean"), (2, "last"), (2, "mean")]
    one = {"params": {"_target_": "lengthpred.heads.LinearHead"}, "layer": 20, "pooling": "last"}
    assert feature_names(one) == ["hs.L20.last"] and feature_needs(one) == [(20, "last")]
