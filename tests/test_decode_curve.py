"""Remaining-length heads on decode states: the baseline's floor, val-only selection, a decode head that reads
the remaining length off its state beats the prompt-only baseline, the table/figure, and the config group."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lengthpred.decode.plots import plot_curve
from lengthpred.decode.readout import fit_curve, implied_remaining
from lengthpred.decode.score import BASELINE, markdown_table, score_curve
from lengthpred.decode.settings import DecodeSettings, checkpoints
from lengthpred.decode.store import DecodeSet
from lengthpred.errors import ConfigError
from tests.conftest import compose_cfg

AT = [0, 8, 16, 32]


def synthetic(n: int = 150, d: int = 6, seed: int = 0, noise: float = 0.1) -> DecodeSet:
    """Lengths known only partly at t = 0 (noisy coordinates); once decoding starts, coordinate 1 carries
    log1p(remaining) with little noise (what a decode state could know that the prompt could not)."""
    rng = np.random.default_rng(seed)
    length = rng.integers(10, 200, size=n)
    rp, ts, xs = [], [], []
    for k, L in enumerate(length):
        t = checkpoints(int(L), 8, AT)
        x = rng.normal(size=(len(t), d))
        x[:, 0] = np.log1p(L) + rng.normal(scale=0.8, size=1)  # the prompt's weak hint, same at every t
        x[:, 1] = np.log1p(L - t) + rng.normal(size=len(t)) * np.where(t > 0, noise, 0.8)
        rp.append(np.full(len(t), k))
        ts.append(t)
        xs.append(x)
    ids = [f"q{k:03d}" for k in range(n)]
    return DecodeSet(Path("."), {"layer": 1, "settings": {"every": 8}}, ids, length, np.zeros(n, bool),
                     np.full(n, 5), np.concatenate(rp), np.concatenate(ts), np.concatenate(xs).astype(np.float32))


def split_ids(ds: DecodeSet) -> dict[str, list[str]]:
    return {"train": ds.ids[:90], "val": ds.ids[90:120], "test": ds.ids[120:]}


HEADS = {"linear": {"name": "linear", "select": {"alpha": [0.1, 10.0]}},
         "linear_prompt": {"name": "linear", "select": {"alpha": [0.1, 10.0]}, "with_prompt": True}}


def test_implied_remaining_floors_running_requests():
    assert implied_remaining(np.array([100.0, 20.0, 5.0]), np.array([8, 16, 32]), 1.0).tolist() == [92, 4, 1]


def test_decode_head_beats_prompt_only_once_decoding():
    ds = synthetic()
    curve = fit_curve(ds, split_ids(ds), HEADS, AT)
    df = score_curve(curve, AT, n_boot=200).set_index(["predictor", "t"])
    for t in (8, 16, 32):
        assert df.loc[("linear", t), "spearman"] > df.loc[(BASELINE, t), "spearman"] + 0.2
        assert df.loc[("linear", t), "d_spearman_lo"] > 0  # the paired CI excludes no gain
        assert df.loc[("linear", t), "mae"] < df.loc[(BASELINE, t), "mae"]
    assert df.loc[(BASELINE, 0), "n"] == 30 and df.loc[(BASELINE, 32), "n"] == (ds.length[120:] > 32).sum()


def test_selection_never_reads_test_labels():
    ds = synthetic()
    a = fit_curve(ds, split_ids(ds), HEADS, AT)
    shuffled = synthetic()
    test_rows = np.isin(shuffled.row_prompt, np.arange(120, 150))
    shuffled.X[test_rows] = shuffled.X[test_rows][::-1]  # test inputs scrambled: same fits and choices
    b = fit_curve(shuffled, split_ids(shuffled), HEADS, AT)
    assert a.chosen == b.chosen


def test_table_and_figure(tmp_path):
    ds = synthetic(n=150)
    df = score_curve(fit_curve(ds, split_ids(ds), HEADS, AT), AT, n_boot=50)
    md = markdown_table(df)
    assert "| running requests (n) | 30 |" in md and "linear_prompt: mae" in md
    assert plot_curve(df, tmp_path / "c.png").stat().st_size > 10_000


def test_config_group_mirrors_settings():
    cfg = compose_cfg()
    from lengthpred.stages.decode import decode_settings

    s = decode_settings(cfg)
    assert (s.layer, s.every, s.also_at) == (20, 8, (8, 16, 32, 64, 128))
    with pytest.raises(ConfigError, match="interval k must be >= 1"):
        decode_settings(compose_cfg(["decode.every=0"]))
    with pytest.raises(ConfigError, match="unknown keys"):
        DecodeSettings.from_cfg({"every": 8, "evry": 3})


def test_checkpoint_frame_holds_each_test_answers_predictions():
    from lengthpred.decode.checkpoints import PRED, best_decode_head, checkpoint_frame

    ds = synthetic()
    curve = fit_curve(ds, split_ids(ds), HEADS, AT)
    df = checkpoint_frame(ds, curve, every=8)
    test_ids = set(ds.ids[120:])
    assert set(df["id"]) == test_ids and (df["t"] % 8 == 0).all()
    assert ((df["t"] < df["length"]) & (df["remaining"] == df["length"] - df["t"])).all()
    assert len(df) == sum(len(range(0, int(L), 8)) for L in ds.length[120:])  # every grid point while running
    # each row holds the curve's own prediction for that answer and t (the frame is re-sorted by id, t)
    key = list(zip(np.asarray(ds.ids)[ds.row_prompt[curve.rows]], curve.t, strict=True))
    for label, p in curve.predictions.items():
        want = dict(zip(key, p, strict=True))
        got = [want[(i, t)] for i, t in zip(df["id"], df["t"], strict=True)]
        np.testing.assert_array_equal(df[PRED + label].to_numpy(), got)
    assert df[PRED + "best"].equals(df[PRED + best_decode_head(curve.chosen)])
    with pytest.raises(ConfigError, match="'best' names the head"):
        curve.predictions["best"] = curve.predictions["linear"]
        checkpoint_frame(ds, curve, every=8)


def test_best_decode_head_is_chosen_on_validation_only():
    from lengthpred.decode.checkpoints import best_decode_head
    from lengthpred.errors import DataError

    chosen = {BASELINE: {"val_spearman": 0.99}, "a": {"val_mean_spearman": 0.3}, "b": {"val_mean_spearman": 0.5},
              "c": {"val_mean_spearman": float("nan")}}
    assert best_decode_head(chosen) == "b"
    with pytest.raises(DataError, match="no decode head"):
        best_decode_head({BASELINE: {"val_spearman": 0.9}})
