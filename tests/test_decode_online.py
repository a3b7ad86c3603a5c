"""RLS on the decode readout: under a shift the frozen readout cannot follow, completions move it toward the
target; with nothing to learn (no update allowed) the curve stays flat."""

from __future__ import annotations

import numpy as np

from lengthpred.decode.online import adaptation, plot_adaptation
from tests.test_decode_curve import AT, synthetic


def shifted(ds, ids):
    """The target domain: the state's remaining-length coordinate reads 1.5 units of log higher for the same
    remaining length (a readout fitted on the source is off by a factor)."""
    rows = ds.rows_of(ids)
    ds.X[rows, 1] -= 1.5
    ds.X[rows, 0] -= 1.5
    return ds


def test_rls_adapts_under_shift_and_frozen_stays(tmp_path):
    ds = synthetic(n=150, seed=1)
    source = {"train": ds.ids[:60], "val": ds.ids[60:80]}
    stream, test = ds.ids[80:130], ds.ids[130:]
    shifted(ds, stream + test)
    df = adaptation(ds, source, stream, test, alphas=[0.1, 10.0], forgetting=[1.0], at=AT, record_every=10)
    start, end = df[df.n_seen == 0].set_index("head"), df[df.n_seen == df.n_seen.max()].set_index("head")
    assert end.loc["frozen", "mae"] == start.loc["frozen", "mae"]
    assert end.loc["rls@1", "mae"] < 0.75 * start.loc["rls@1", "mae"]  # 86 → 53 tokens here
    assert start.loc["rls@1", "mae"] == start.loc["frozen", "mae"]  # the same readout before any completion
    assert plot_adaptation(df.assign(pair="a"), tmp_path / "o.png").stat().st_size > 5_000
    assert np.isfinite(df["spearman"]).all()


def test_plot_keeps_the_points_every_pair_has(tmp_path, monkeypatch):
    import pandas as pd

    import lengthpred.decode.online as online

    seen = {}
    real = pd.DataFrame.groupby

    def spy(self, by, *a, **k):
        if by == ["head", "n_seen"]:
            seen["n"] = sorted(self["n_seen"].unique())
        return real(self, by, *a, **k)

    monkeypatch.setattr(pd.DataFrame, "groupby", spy)
    df = pd.DataFrame({"head": "frozen", "pair": ["a"] * 3 + ["b"] * 3, "n_seen": [0, 4, 8, 0, 4, 6],
                       "spearman": 0.1, "mae": 1.0})
    online.plot_adaptation(df, tmp_path / "p.png")
    assert seen["n"] == [0, 4]
