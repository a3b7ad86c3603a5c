"""Pooling × head at one layer: every head on every pooling, so that "does a pooling beat the last token"
(same head, paired over test prompts) and "does an MLP beat ridge" (same pooling) are separate answers.

Rows come from `lengthpred.heads.sweep.fit_cell`; the paired differences use the first seed's test
predictions of both cells (the predictor whose bootstrap CI the table shows), and the seed spread of MLP
cells is shown beside them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from lengthpred.errors import DataError
from lengthpred.metrics import is_undefined, paired_bootstrap

BASE_POOLING = "last"


def paired_differences(
    rows: pd.DataFrame,
    preds: Mapping[tuple[str, str], pd.DataFrame],
    *,
    reference_head: str,
    n_boot: int,
    seed: int,
    pairs: Sequence[Sequence[str]] = (),
) -> pd.DataFrame:
    """One row per (kind, head, pooling): kind `pooling` = head on pooling − the same head on the last
    token; kind `head` = head − `reference_head` on the same pooling; kind `pair` = head on pooling a − the
    same head on pooling b for each [a, b] of `pairs` (e.g. attention − entropy: ESTP's question, asked of
    every head). Test Spearman, paired bootstrap CI."""
    out = []

    def diff(kind: str, h: str, p: str, a: tuple[str, str], b: tuple[str, str]) -> None:
        pa, pb = preds[a], preds[b]
        if list(pa["id"]) != list(pb["id"]):
            raise DataError(f"{a} and {b} were scored on different test prompts: no paired difference")
        d = paired_bootstrap(pa["y_true"].to_numpy(), pa["y_pred"].to_numpy(), pb["y_pred"].to_numpy(),
                             "spearman", n_boot=int(n_boot), seed=int(seed))
        out.append({"kind": kind, "head": h, "pooling": p, "against": f"{b[0]} on {b[1]}",
                    **{k: None if is_undefined(v) else float(v)
                       for k, v in (("diff", d.diff), ("ci_low", d.ci_low), ("ci_high", d.ci_high),
                                    ("p_value", d.p_value))}})

    heads = list(dict.fromkeys(rows["head"]))
    poolings = list(dict.fromkeys(rows["pooling"]))
    for h in heads:
        for p in poolings:
            if p != BASE_POOLING and (h, BASE_POOLING) in preds and (h, p) in preds:
                diff("pooling", h, p, (h, p), (h, BASE_POOLING))
    for h in heads:
        for p in poolings:
            if h != reference_head and (reference_head, p) in preds and (h, p) in preds:
                diff("head", h, p, (h, p), (reference_head, p))
    for a, b in pairs:
        for h in heads:
            if (h, a) in preds and (h, b) in preds:
                diff("pair", h, f"{a} − {b}", (h, a), (h, b))
    return pd.DataFrame(out, columns=["kind", "head", "pooling", "against", "diff", "ci_low", "ci_high", "p_value"])


def _f(v: Any, sign: bool = False) -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)) or pd.isna(v):
        return "undefined"
    return f"{v:+.3f}" if sign else f"{v:.3f}"


def _cell(r: Mapping[str, Any]) -> str:
    s = f"{_f(r['spearman'])} [{_f(r['ci_low'])}, {_f(r['ci_high'])}]"
    if int(r.get("n_seeds", 1)) > 1:
        s += f"; {_f(r['spearman_seed_mean'])} ± {_f(r['spearman_seed_sd'])} ({int(r['n_seeds'])} seeds)"
    return s


def val_best_pooling(rows: pd.DataFrame) -> dict[str, str]:
    """head → its pooling with the best validation Spearman (mean over seeds; first in order on ties)."""
    out = {}
    for h, g in rows.groupby("head", sort=False):
        v = pd.to_numeric(g["val_spearman_seed_mean"], errors="coerce").fillna(-2.0)
        out[str(h)] = str(g.iloc[int(np.argmax(v.to_numpy()))]["pooling"])
    return out


def render(rows: pd.DataFrame, diffs: pd.DataFrame, *, model: str, data: str, layer: int | str,
           reference_head: str, poolings: Sequence[str] | None = None) -> str:
    """Markdown: the pooling × head table (test [CI]; mean ± sd over seeds; val), then the paired answers."""
    heads = list(dict.fromkeys(rows["head"]))
    poolings = list(poolings or dict.fromkeys(rows["pooling"]))
    by = {(r["head"], r["pooling"]): r for r in rows.to_dict("records")}
    n = int(rows["n_test"].iloc[0]) if len(rows) else 0
    lines = [
        f"**Pooling × head at layer {layer}** ({model}, {data}; pooled in-domain test, n = {n}; test Spearman "
        "[95% bootstrap CI of the first seed]; for MLP heads also mean ± sd over seeds; val = validation "
        "Spearman, mean over seeds)",
        "",
        "| Pooling | " + " | ".join(f"{h} test | {h} val" for h in heads) + " |",
        "|---|" + "---:|---:|" * len(heads),
    ]
    for p in poolings:
        cells = []
        for h in heads:
            r = by.get((h, p))
            cells += ["—", "—"] if r is None else [_cell(r), _f(r["val_spearman_seed_mean"])]
        lines.append(f"| {p} | " + " | ".join(cells) + " |")

    def diff_table(kind: str, title: str, col: str) -> list[str]:
        d = diffs[diffs["kind"] == kind]
        if d.empty:
            return []
        cols = list(dict.fromkeys(d[col]))
        rows_ = list(dict.fromkeys(d["pooling" if col == "head" else "head"]))
        key = {(r[col], r["pooling" if col == "head" else "head"]): r for r in d.to_dict("records")}
        out = ["", title, "", f"| {'Pooling' if col == 'head' else 'Head'} | " + " | ".join(cols) + " |",
               "|---|" + "---:|" * len(cols)]
        for rr in rows_:
            vals = []
            for c in cols:
                r = key.get((c, rr))
                vals.append("—" if r is None else f"{_f(r['diff'], True)} [{_f(r['ci_low'], True)}, "
                            f"{_f(r['ci_high'], True)}]")
            out.append(f"| {rr} | " + " | ".join(vals) + " |")
        return out

    lines += diff_table("pooling", "**Pooling vs last token, same head** (test Spearman of the pooling − the "
                        "last token; paired bootstrap over test prompts, first seed)", "head")
    lines += diff_table("head", f"**Head vs {reference_head}, same pooling** (test Spearman of the head − "
                        f"{reference_head}; paired, first seed)", "head")
    lines += diff_table("pair", "**One pooling against another, same head** (`sweep.pooling_pairs`; test "
                        "Spearman difference, paired, first seed)", "head")
    best = val_best_pooling(rows)
    answers = []
    for h, p in best.items():
        d = diffs[(diffs["kind"] == "pooling") & (diffs["head"] == h) & (diffs["pooling"] == p)]
        if p == BASE_POOLING:
            answers.append(f"- {h}: validation prefers the last token itself.")
        elif len(d):
            r = d.iloc[0]
            excl = r["ci_low"] is not None and (r["ci_low"] > 0 or r["ci_high"] < 0)
            answers.append(f"- {h}: validation prefers `{p}`; on test it is {_f(r['diff'], True)} "
                           f"[{_f(r['ci_low'], True)}, {_f(r['ci_high'], True)}] against the last token"
                           f"{'' if excl else ' (the interval includes 0: no measurable difference)'}.")
    if answers:
        lines += ["", "**Which pooling each head would pick on validation:**", *answers]
    return "\n".join(lines)
