"""scripts/adapt.py's loaders on the real demo prompts and splits (features and targets faked: no model)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.conftest import compose_cfg

pytestmark = pytest.mark.datasets


def test_adapt_loads_prompts_splits_features_and_targets(tmp_path, monkeypatch, demo_splits_dir):
    import lengthpred.stages.adapt
    from lengthpred.data import load_prompts
    from lengthpred.stages.adapt import run_adaptation

    overrides = [
        f"data.out_dir={demo_splits_dir}",
        "online.alpha=10.0",
        "online.plot_pairs=0",
        "online.pairs=['chat->math','summarization->qa']",
        "online.export_readouts=false",  # random 16-wide features: not the model's states
    ]
    cfg = compose_cfg(overrides, tmp_path)
    prompts = load_prompts(cfg.data)
    rng = np.random.default_rng(0)
    samples = [[int(v) for v in rng.integers(5, 300, 3)] for _ in range(len(prompts))]
    fake = pd.DataFrame(
        {
            "lengths": samples,
            "target": [float(np.mean(s)) for s in samples],
            "n_samples": 3,
            "capped_frac": 0.0,
        },
        index=pd.Index(prompts["id"], name="id"),
    )
    monkeypatch.setattr(lengthpred.stages.adapt, "load_targets", lambda cfg: fake)
    calls = []

    class _FS:
        ids = list(prompts["id"])

        def get(self, name):
            calls.append(name)
            return rng.normal(size=(len(self.ids), 16)).astype(np.float32)

    monkeypatch.setattr(
        lengthpred.stages.adapt, "ensure_features", lambda cfg, p: _FS() if len(p) == len(prompts) else None
    )
    res = run_adaptation(cfg, tmp_path / "run")
    assert res["n_pairs"] == 2 and calls == ["hs.L20.last"]
    assert 0 < res["load"] < 1 and res["labels_seen_mean"] > 5
    preds = pd.read_parquet(tmp_path / "run" / "predictions.parquet")
    assert set(preds["domain"]) >= {"math", "qa"}
    assert set(preds["split"]) == {
        f"cross/{p}/{part}"
        for p in ("chat->math", "summarization->qa")
        for part in ("test", "stream", "stream_val")
    }
