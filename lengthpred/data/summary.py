"""The summary table: records per domain × split, prompt-length and known-output-length quantiles."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lengthpred.data.records import prompt_chars
from lengthpred.names import SplitName
from lengthpred.targets import reference_samples  # the trace's one reader (meta line + rows)

Record = dict[str, Any]


def _q(xs: Sequence[float]) -> str:
    if len(xs) == 0:
        return "-"
    p10, p50, p90 = np.percentile(xs, [10, 50, 90])
    return f"{p10:.0f}/{p50:.0f}/{p90:.0f}"


def reference_lengths(path: Path) -> dict[str, list[int]]:
    """id → sampled lengths from a committed reference trace (`data/reference/<model>/<data>.jsonl`)."""
    return reference_samples(path)


def summary_rows(
    splits: Mapping[str, Any], by_id: Mapping[str, Record], served: Mapping[str, list[int]] | None = None
) -> list[dict[str, Any]]:
    """One row per in-domain domain (and ForeLen subset); `served`: the serving model's reference lengths."""
    rows = []
    for dom, parts in splits["indomain"].items():
        recs_all = [by_id[i] for ids in parts.values() for i in ids]
        known = [float(np.mean(r["lengths"])) for r in recs_all if r["lengths"]]
        row = {
            "domain": dom, **{k: len(v) for k, v in parts.items()},
            "prompt_chars p10/50/90": _q([prompt_chars(r) for r in recs_all]),
            "known_len n": len(known),
            "known_len p10/50/90": _q(known),
        }
        if served is not None:
            ref = [float(np.mean(served[r["id"]])) for r in recs_all if r["id"] in served]
            row["served_len n"], row["served_len p10/50/90"] = len(ref), _q(ref)
        rows.append(row)
    for name, ids in splits.get("forelen", {}).items():
        if not ids:
            continue
        recs = [by_id[i] for i in ids]
        known = [float(np.mean(r["lengths"])) for r in recs if r["lengths"]]
        row = {"domain": str(SplitName.forelen(name)), "train": len(ids), "val": 0, "test": 0,
               "prompt_chars p10/50/90": _q([prompt_chars(r) for r in recs]),
               "known_len n": len(known), "known_len p10/50/90": _q(known)}
        if served is not None:
            ref = [float(np.mean(served[i])) for i in ids if i in served]
            row["served_len n"], row["served_len p10/50/90"] = len(ref), _q(ref)
        rows.append(row)
    return rows


def format_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Plain fixed-width table (lm-eval-harness style), one row per domain."""
    if not rows:
        return "(no records)"
    cols = list(rows[0])
    width = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in cols}
    line = " | ".join(c.ljust(width[c]) for c in cols)
    sep = "-+-".join("-" * width[c] for c in cols)
    body = [" | ".join(str(r.get(c, "")).ljust(width[c]) for c in cols) for r in rows]
    return "\n".join([line, sep, *body])
