"""The feature sweep: one fresh fit per (head, layer, pooling) cell, CI'd, and refusals before any work."""

from __future__ import annotations

import pandas as pd
import pytest

from lengthpred.errors import ConfigError, DataError
from tests.test_heads_training import trace_run  # noqa: F401  (the fixture)

TOKENS = ["features.pools=[last,entropy,attn]", "features.fused=[mix0.5]", "features.token_layers=[2]",
          "head.params.epochs=2"]


def test_sweep_fits_every_cell_and_writes_csv_and_markdown(trace_run):  # noqa: F811
    from lengthpred.stages.sweep import sweep_features

    cfg = trace_run("estp", *TOKENS, "sweep.heads=[estp,estp_learned,linear]", "sweep.layers=[1,2]",
                    "sweep.poolings=[attn,fused_mix0.5]", "sweep.n_boot=50")
    with pytest.raises(DataError, match="token_layers"):  # layer 1 is not stored token-level
        sweep_features(cfg, cfg.paths.output_dir)
    cfg.sweep.layers = [2]
    df = sweep_features(cfg, cfg.paths.output_dir)
    cells = set(zip(df["head"], df["layer"], df["pooling"], strict=True))
    assert cells == {("estp", 2, "attn"), ("estp", 2, "fused_mix0.5"), ("linear", 2, "attn"),
                     ("linear", 2, "fused_mix0.5"), ("estp_learned", 2, "learned")}
    learned = df[df["head"] == "estp_learned"].iloc[0]
    assert 0 < learned["alpha"] < 1 and pd.isna(df[df["head"] == "linear"]["alpha"]).all()
    ok = df.dropna(subset=["ci_low"])
    assert ((ok["ci_low"] <= ok["spearman"]) & (ok["spearman"] <= ok["ci_high"])).all()
    saved = pd.read_csv(f"{cfg.paths.output_dir}/sweep.csv")
    assert len(saved) == 5
    md = open(f"{cfg.paths.output_dir}/sweep.md").read()
    assert md.count("\n| estp ") == 2 and "| estp_learned | 2 | learned |" in md
    assert (df["span"] == "content").all() and "over the content tokens" in md  # the features' pooling options


def test_sweep_refuses_heads_without_features_and_unextracted_pools(trace_run):  # noqa: F811
    from lengthpred.stages.sweep import sweep_features

    cfg = trace_run("estp", *TOKENS, "sweep.heads=[proxy_reg]", "sweep.layers=[2]")
    with pytest.raises(ConfigError, match="proxy_reg"):
        sweep_features(cfg, cfg.paths.output_dir)
    cfg = trace_run("estp", *TOKENS, "sweep.heads=[estp]", "sweep.layers=[2]", "sweep.poolings=[fused_prod]")
    with pytest.raises(DataError, match="fused_prod"):
        sweep_features(cfg, cfg.paths.output_dir)
