"""The refinement curve: Spearman and MAE of remaining length at t tokens generated (requests still running
at t), with bootstrap CIs over prompts and the paired difference to the prompt-only baseline."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from lengthpred.artefacts import PROMPT_ONLY
from lengthpred.decode.readout import Curve
from lengthpred.metrics import evaluate, is_undefined, paired_bootstrap

BASELINE = PROMPT_ONLY


def _num(v) -> float:
    return float("nan") if is_undefined(v) else float(v)


def score_curve(curve: Curve, at: Sequence[int], *, n_boot: int = 1000, seed: int = 0,
                confidence: float = 0.95) -> pd.DataFrame:
    """One row per (predictor, t): n running, Spearman and MAE with CIs, and each decode head's paired
    difference to the baseline (d_spearman > 0 and d_mae < 0 are better). One row per prompt at each t, so
    resampling rows resamples prompts."""
    out = []
    for t in at:
        m = curve.t == t
        y = curve.y[m]
        base = curve.predictions[BASELINE][m]
        for name, pred in curve.predictions.items():
            p = pred[m]
            row = {"predictor": name, "t": int(t), "n": int(m.sum())}
            if m.sum() >= 3:
                est = evaluate(y, p, ["spearman", "mae"], n_boot=n_boot, seed=seed, confidence=confidence)
                for k, e in est.items():
                    row |= {k: _num(e.value), f"{k}_lo": _num(e.ci_low), f"{k}_hi": _num(e.ci_high)}
                if name != BASELINE:
                    for k in ("spearman", "mae"):
                        d = paired_bootstrap(y, p, base, k, n_boot=n_boot, seed=seed, confidence=confidence)
                        row |= {f"d_{k}": _num(d.diff), f"d_{k}_lo": _num(d.ci_low),
                                f"d_{k}_hi": _num(d.ci_high)}
            out.append(row)
    return pd.DataFrame(out)


def markdown_table(df: pd.DataFrame) -> str:
    """Spearman and MAE [CI] per predictor (rows) and t (columns), plus the running count per t."""
    ts = sorted(df["t"].unique())
    head = "| predictor | " + " | ".join(f"t={t}" for t in ts) + " |"
    lines = [head, "|" + "---|" * (len(ts) + 1)]
    n = df.drop_duplicates("t").set_index("t")["n"]
    lines.append("| running requests (n) | " + " | ".join(str(int(n[t])) for t in ts) + " |")
    for metric, fmt in (("spearman", "{:.3f} [{:.3f}, {:.3f}]"), ("mae", "{:.1f} [{:.1f}, {:.1f}]")):
        for name, g in df.groupby("predictor", sort=False):
            g = g.set_index("t")
            cells = []
            for t in ts:
                v = g.loc[t].get(metric, np.nan) if t in g.index else np.nan
                cells.append("–" if not np.isfinite(v) else fmt.format(v, g.loc[t][f"{metric}_lo"],
                                                                        g.loc[t][f"{metric}_hi"]))
            lines.append(f"| {name}: {metric} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
