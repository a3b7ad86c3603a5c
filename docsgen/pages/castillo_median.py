"""T7's two points set side by side: each head's MAE on its median against its MAE on its mean, per fit kind,
over the models it was scored on, rendered from the committed T7 rows (t7-castillo/castillo_T7.csv) so no number
on the page is typed."""

from __future__ import annotations

import pandas as pd

from docsgen.numbers import minus, parse_cell
from docsgen.registry import helper
from docsgen.results import Results
from docsgen.studies import DATA

T7 = f"{DATA}/t7-castillo/castillo_T7.csv"
MEDIAN, MEAN = "MAE of the median (tokens) ↓", "MAE of the mean ↓"
ALL_MODELS = " (all-models fit)"


def median_vs_mean(res: Results) -> pd.DataFrame:
    """One row per (head, fit kind) with a median and a mean on at least one model: the mean over models of
    each MAE, the per-model difference's mean and range, and on how many models the median's MAE is lower."""
    t7 = res.csv(T7, ["Model", "Predictor", MEDIAN, MEAN])
    rows = []
    for pred, g in t7.groupby("Predictor", sort=False):
        med = [parse_cell(c) for c in g[MEDIAN]]
        mean = [parse_cell(c) for c in g[MEAN]]
        pairs = [(a.value, b.value) for a, b in zip(med, mean, strict=True) if a is not None and b is not None]
        if not pairs:
            continue
        diff = [a - b for a, b in pairs]
        head, fit = (pred[: -len(ALL_MODELS)], "all-models fit") if pred.endswith(ALL_MODELS) else (pred, "own fit")
        m_med, m_mean = sum(a for a, _ in pairs) / len(pairs), sum(b for _, b in pairs) / len(pairs)
        rows.append({"head": head, "fit": fit, "models": len(pairs), "mae_median": m_med, "mae_mean": m_mean,
                     "diff": m_med - m_mean, "lo": min(diff), "hi": max(diff),
                     "lower": sum(d < 0 for d in diff)})
    if not rows:
        res.fail(T7, "no predictor has both an MAE of the median and of the mean")
    return pd.DataFrame(rows).sort_values(["head", "fit"], kind="stable", ignore_index=True)


@helper
def castillo_median_vs_mean(res: Results) -> str:
    """The table: MAE of the median and of the mean (tokens, mean over the models scored), their difference (mean
    over models, with its range over models, and relative to the mean's MAE), and the models where the median's MAE
    is lower."""
    df = median_vs_mean(res)
    lines = ["| Head | Fit | Models | MAE of the median (tokens, mean over models) ↓ | MAE of the mean (tokens, mean over "
             "models) ↓ | Median − mean (tokens, mean over models; range over models) | Relative to the mean's MAE | "
             "Models where the median's MAE is lower |",
             "|---|---|---:|---:|---:|---|---:|---:|"]
    for r in df.itertuples():
        numbers = minus(f"{r.mae_median:.1f} | {r.mae_mean:.1f} | {r.diff:+.1f} ({r.lo:+.1f} … {r.hi:+.1f}) | "
                         f"{r.diff / r.mae_mean:+.1%}")
        lines.append(f"| {r.head} | {r.fit} | {r.models} | {numbers} | {r.lower} of {r.models} |")
    return "\n".join(lines) + "\n"
