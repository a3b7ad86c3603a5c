"""Which layer each head reads, chosen on validation only: the argmax of a per-layer sweep's validation
Spearman (mean over seeds where a cell has several), written as `layer_choice.json` for later stages.

The test score of the chosen layer is carried along for reporting; it never enters the choice (a test
curve that peaks elsewhere is shown beside it, not followed).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from lengthpred.errors import ConfigError, DataError

CHOICE_FILE = "layer_choice.json"
SELECTION_COLUMN = "val_spearman_seed_mean"  # lengthpred.heads.sweep.fit_cell's validation score


def choose_layers(df: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """head → {layer, pooling, val_spearman, test_spearman, ci_low, ci_high, test_spearman_seed_mean,
    test_spearman_seed_sd, n_seeds, n_layers}: per head, the row with the highest validation score (the
    lowest layer on ties). A head whose validation score is undefined at every layer is a DataError."""
    out: dict[str, dict[str, Any]] = {}
    for head, g in df.groupby("head", sort=True):
        if g["pooling"].nunique() > 1:
            raise DataError(f"{head}: the layer sweep mixes poolings {sorted(g['pooling'].unique())}; "
                            "choose a layer per pooling")
        val = pd.to_numeric(g[SELECTION_COLUMN], errors="coerce")
        if val.isna().all():
            raise DataError(f"{head}: no layer has a validation Spearman; cannot choose a layer")
        r = g.assign(_v=val).sort_values(["_v", "layer"], ascending=[False, True], kind="stable").iloc[0]
        out[str(head)] = {
            "layer": int(r["layer"]),
            "pooling": str(r["pooling"]),
            "val_spearman": _num(r[SELECTION_COLUMN]),
            "test_spearman": _num(r["spearman"]),
            "ci_low": _num(r["ci_low"]),
            "ci_high": _num(r["ci_high"]),
            "test_spearman_seed_mean": _num(r.get("spearman_seed_mean")),
            "test_spearman_seed_sd": _num(r.get("spearman_seed_sd")),
            "n_seeds": int(r.get("n_seeds", 1)),
            "n_layers": int(g["layer"].nunique()),
        }
    return out


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def write_choice(choice: Mapping[str, Mapping[str, Any]], out_dir: str | Path, **about: Any) -> Path:
    """`layer_choice.json`: {"heads": choice, "chosen_on": "validation", **about} (about: model, data, ...)."""
    path = Path(out_dir) / CHOICE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"chosen_on": "validation Spearman (mean over seeds), argmax; lowest layer on ties", **about,
           "heads": {h: dict(v) for h, v in choice.items()}}
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path


def read_layer(path: str | Path, head: str) -> int:
    """The layer `layer_choice.json` (a file or the folder holding it) chose for `head`."""
    p = Path(path)
    p = p / CHOICE_FILE if p.is_dir() else p
    if not p.is_file():
        raise ConfigError(f"no layer choice at {p}; run scripts/sweep_layers.py first")
    heads = json.loads(p.read_text()).get("heads", {})
    if head not in heads:
        raise ConfigError(f"{p} chose a layer for {sorted(heads)}, not {head!r}")
    return int(heads[head]["layer"])


def render_choice(choice: Mapping[str, Mapping[str, Any]], model: str, data: str) -> str:
    """Markdown: one row per head, the validation-chosen layer and its scores."""

    def f(v: Any) -> str:
        return "undefined" if v is None else f"{v:.3f}"

    lines = [f"**Layer chosen on validation** ({model}, {data}; argmax of the validation Spearman over "
             "layers, mean over seeds; test shown, never used to choose)", "",
             "| Head | Pooling | Layers swept | Chosen layer | Val Spearman | Test Spearman [95% CI] | "
             "Test, mean ± sd over seeds |", "|---|---|---:|---:|---:|---:|---:|"]
    for h, c in choice.items():
        seeds = (f"{f(c['test_spearman_seed_mean'])} ± {f(c['test_spearman_seed_sd'])} ({c['n_seeds']})"
                 if c["n_seeds"] > 1 else "one seed")
        lines.append(f"| {h} | {c['pooling']} | {c['n_layers']} | {c['layer']} | {f(c['val_spearman'])} | "
                     f"{f(c['test_spearman'])} [{f(c['ci_low'])}, {f(c['ci_high'])}] | {seeds} |")
    return "\n".join(lines)
