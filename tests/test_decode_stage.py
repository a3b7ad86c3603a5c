"""The decode stages end to end on the real demo prompts and splits with the tiny model and faked answers:
extract (resumable store found again by its key), curve (csv, table, figure) and online (one pair)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from lengthpred.integrity import write_checksum
from tests.conftest import compose_cfg

pytestmark = [pytest.mark.datasets, pytest.mark.usefixtures("one_torch_thread")]


def fake_generations(root, ids, seed=0):
    import datasets

    rng = np.random.default_rng(seed)
    rows = []
    for pid in ids:
        n = int(rng.integers(1, 40))
        rows.append(dict(id=pid, sample=0, length=n, finish_reason="length" if n > 35 else "stop",
                         token_ids=rng.integers(100, 1000, n).tolist()))
    datasets.Dataset.from_list(rows).save_to_disk(str(root / "merged"))
    for f in (root / "merged").iterdir():  # as a merge writes them: digests beside every file
        write_checksum(f)
    (root / "manifest.json").write_text(json.dumps({"max_context": 1024, "settings": {"max_new_tokens": 64}}))


def test_extract_curve_online(tmp_path, demo_splits_dir):
    from lengthpred.data import load_prompts
    from lengthpred.stages.decode import find_decode, run_decode_curve, run_decode_online, run_extract_decode

    gen = tmp_path / "gen"
    gen.mkdir()
    overrides = [f"data.out_dir={demo_splits_dir}", "model=tiny", f"paths.data_dir={tmp_path / 'data'}",
                 f"decode.generations={gen}", "decode.layer=2", "decode.also_at=[4]", "decode.curve.at=[0,4,8,16]",
                 "decode.curve.n_boot=20", "~decode.curve.heads.probe", "~decode.curve.heads.probe_prompt",
                 "decode.online.pairs=['chat->math']", "decode.online.record_every=12"]
    cfg = compose_cfg(overrides, tmp_path / "run")
    fake_generations(gen, load_prompts(cfg.data)["id"])
    root = run_extract_decode(cfg, tmp_path / "run")
    ds = find_decode(cfg)
    assert ds.root == root and len(ds.ids) == len(load_prompts(cfg.data))
    out = run_decode_curve(cfg, tmp_path / "curve")
    assert {"curve.csv", "curve.md", "curve.png", "chosen.json", "checkpoints.parquet"} <= {
        p.name for p in out.iterdir()}
    chosen = json.loads((out / "chosen.json").read_text())
    assert chosen["best"] in {"linear", "linear_prompt"} and chosen["every"] == 8
    assert set(pd.read_csv(out / "curve.csv")["predictor"]) == {"prompt-only", "linear", "linear_prompt"}
    df = pd.read_csv(run_decode_online(cfg, tmp_path / "run") / "online.csv")
    assert set(df["head"]) == {"frozen", "rls@1", "rls@0.99"} and (tmp_path / "run" / "online.png").is_file()
