"""Markdown table of static batching: padding ratio and useful-token throughput per batch formation."""

from __future__ import annotations

import pandas as pd

from lengthpred.sched.batching.batches import POOL_DATA
from lengthpred.sched.sweep.summary import _num, _pct

__all__ = ["batching_table", "interval_scope"]

ORDER = {"arrival": 0, "random": 1, "predicted": 2, "true": 3}


def _v(r: pd.Series | None, fmt: str, scale: float = 1.0) -> str:
    if r is None or _num(r["value"]) is None:
        return ""
    s = format(scale * _num(r["value"]), fmt)
    lo, hi = _num(r["ci_low"]), _num(r["ci_high"])
    return s + (f" [{format(scale * lo, fmt)}, {format(scale * hi, fmt)}]" if lo is not None and hi is not None else "")


def interval_scope(data: str, pool_prompts: int | None, pool_resampled: bool) -> str:
    """What the intervals of workload `data` cover: seeds (a trace's windows, or the pool's request draws),
    and the heads' prompt pool when each seed resampled it (`batching.pool_draw` / `trace_draw`)."""
    pool_workload = data == POOL_DATA
    base = "95% bootstrap CI over seeds" + ("" if pool_workload else " (windows)")
    if pool_prompts is None:
        return base
    pool = f"the {pool_prompts}-prompt test pool"
    if pool_resampled:
        how = "draws its requests from" if pool_workload else "maps the heads from"
        return f"{base}; each seed {how} its own resample of {pool}, so the heads' intervals cover it too"
    if pool_workload:
        return f"{base}; every seed draws from {pool} itself: the request draw is covered, the pool only in part"
    return f"{base} only: the heads' intervals leave out the variability of {pool} their errors come from"


def batching_table(results: pd.DataFrame, spearman: dict[tuple[str, str], float] | None = None, *,
                   pool_prompts: int | None = None, pool_resampled: bool = False) -> str:
    """Per workload and batch size, one row per formation (and predictor): padding ratio, useful-token
    throughput and its gain over arrival order (paired per seed), means over seeds [95% bootstrap CI].
    `spearman` ((data, predictor) → its Spearman with the true lengths) adds that column. `pool_prompts`
    (the heads' pool size; None: no heads) and `pool_resampled` say what the intervals cover
    (`interval_scope`)."""
    lines = []
    idx = results.set_index(["data", "batch_size", "formation", "predictor", "metric"])
    for (data, B), sub in results.groupby(["data", "batch_size"], sort=True):
        hw, n = sub["hardware"].iloc[0], int(sub["n"].max())
        scope = interval_scope(str(data), pool_prompts, pool_resampled)
        lines += ["", f"**{data}, batches of {B}** ({hw}; {n} seeds; mean [{scope}])", "",
                  "| formation | predictor | Spearman | padding ratio ↓ | useful tokens/s ↑ | throughput vs arrival order ↑ |",
                  "|---|---|---:|---:|---:|---:|"]
        keys = sub[["formation", "predictor"]].drop_duplicates()
        pad = {(f, p): idx.loc[(data, B, f, p, "padding_ratio")] for f, p in keys.itertuples(index=False)}
        keys = sorted(keys.itertuples(index=False), key=lambda k: (ORDER.get(k[0], 9), -float(pad[k]["value"])))
        for f, p in keys:
            rho = (spearman or {}).get((data, p))
            cells = (_v(pad[(f, p)], ".3f"), _v(idx.loc[(data, B, f, p, "throughput")], ".1f"),
                     _pct(*(idx.loc[(data, B, f, p, "throughput_gain")][c] for c in ("value", "ci_low", "ci_high"))))
            lines.append(f"| {f} | {p} | {'' if rho is None or _num(rho) is None else f'{_num(rho):.2f}'} | "
                         + " | ".join(cells) + " |")
    return "\n".join(lines).strip()
