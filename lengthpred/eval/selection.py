"""What the train stage's selection chose, read from its metrics.json files (never from test scores):

- `read_fits`: the newest in-domain pooled fit per head (the train stage writes one metrics.json per head);
- `selection_table`: head | budget | search space | chosen | best val Spearman | val spread | fit time;
- `candidates_table`: every candidate of every searched head with its val Spearman (seed mean) and fit time;
- `resolve_paired_heads`: `eval.paired.heads: [auto]` → the head best on validation (seed mean when
  several seeds were fitted), so the reference of the paired comparisons is chosen before test is read.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lengthpred.artefacts import METRICS, outputs
from lengthpred.errors import DataError
from lengthpred.eval.render import Cell, Column, Table

log = logging.getLogger("lengthpred.eval")
AUTO = "auto"
METRICS_NAME = METRICS


def read_fits(root: str | Path) -> dict[str, dict[str, Any]]:
    """head → its newest train-stage metrics.json under `root` (files with `head` and `n_train`)."""
    root = Path(root)
    files = outputs(root, METRICS_NAME) if root.is_dir() else []
    out: dict[str, dict[str, Any]] = {}
    for f in files:
        try:
            blob = json.loads(f.read_text())
        except json.JSONDecodeError:
            log.warning("selection: %s is not valid JSON; skipped", f)
            continue
        if isinstance(blob, dict) and "head" in blob and "n_train" in blob:
            out[str(blob["head"])] = blob
    return out


def val_score(fit: dict[str, Any]) -> float | None:
    """The fit's validation Spearman: the mean over seeds when it has several, else the first seed's."""
    seeds = [s.get("val_spearman") for s in fit.get("seeds") or []]
    if seeds and all(v is not None for v in seeds):
        return float(np.mean(seeds))
    v = fit.get("val_spearman")
    return None if v is None else float(v)


def best_on_validation(fits: dict[str, dict[str, Any]]) -> str:
    scored = {h: v for h, f in fits.items() if (v := val_score(f)) is not None}
    if not scored:
        raise DataError(
            "eval.paired.heads=[auto]: no train-stage metrics.json with a val_spearman; run the train stage"
        )
    return max(sorted(scored), key=lambda h: scored[h])


def resolve_paired_heads(heads: Sequence[str], root: str | Path) -> list[str]:
    """`auto` in `heads` replaced by the head best on validation among the fits under `root`."""
    if AUTO not in heads:
        return list(heads)
    best = best_on_validation(read_fits(root))
    log.info("evaluate: paired reference head (best val Spearman): %s", best)
    return list(dict.fromkeys(best if h == AUTO else h for h in heads))


def _space_text(space: dict[str, list[Any]]) -> str:
    return "; ".join(
        f"{k} ∈ {{{', '.join(f'{v:g}' if isinstance(v, float) else str(v) for v in vals)}}}"
        for k, vals in space.items()
    )


def _chosen_text(chosen: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in chosen.items()) or "—"


def selection_table(fits: dict[str, dict[str, Any]], key: str = "selection") -> Table | None:
    """One row per head; None when there is no fit. Spread and fit time are over every candidate and seed."""
    if not fits:
        return None
    reference = None
    try:
        reference = best_on_validation(fits)
    except DataError:
        pass
    rows = []
    for head in sorted(fits):
        f = fits[head]
        s = f.get("search")
        cands = f.get("candidates") or []
        vals = [c["val_spearman"] for c in cands if c.get("val_spearman") is not None]
        secs = [c["fit_seconds"] for c in cands if c.get("fit_seconds") is not None]
        n_seeds = int(f.get("n_seeds") or 1)
        if not s:
            secs_all = f.get("fit_seconds_seeds", f.get("fit_seconds"))
            rows.append(
                [
                    head,
                    "no search",
                    "— (no learned hyperparameters)",
                    "—",
                    None,
                    "—",
                    "—" if secs_all is None else f"{secs_all:.1f} s",
                ]
            )
            continue
        budget = f"{s['budget']} of {s['space_size']} ({s['protocol']})" + (
            f" × {n_seeds} seeds" if n_seeds > 1 else ""
        )
        if s.get("refit_on_all_train"):
            budget += f"; searched on {s['n_search_train']} train prompts, refitted on {f['n_train']}"
        spread = f"{min(vals):.3f} – {max(vals):.3f}" if vals else "—"
        fit = f"{sum(secs):.1f} s ({np.mean(secs):.2f} s / candidate)" if secs else "—"
        name = head + (" (reference)" if head == reference else "")
        rows.append(
            [
                name,
                budget,
                _space_text(s["space"]),
                _chosen_text(f.get("selected") or {}),
                Cell(val_score(f), kind="corr"),
                spread,
                fit,
            ]
        )
    cols = [
        Column("head"),
        Column("budget"),
        Column("search space"),
        Column("chosen"),
        Column("best val Spearman", "up", "corr"),
        Column("val spread over candidates"),
        Column("fit time"),
    ]
    notes = [
        "In-domain pooled fits; every candidate fitted on train and scored on val (never test). Best val "
        "Spearman: the chosen candidate's, mean over seeds for multi-seed heads; spread: min – max over "
        "all candidates and seeds."
    ]
    if reference:
        notes.append(
            f"(reference): the head best on validation, the reference of the paired comparisons "
            f"(eval.paired.heads: [auto]): {reference}."
        )
    return Table(
        key, "Hyperparameter selection on validation (one protocol for every head)", cols, rows, notes
    )


def candidates_table(fits: dict[str, dict[str, Any]], key: str = "candidates") -> Table | None:
    """Every candidate every searched head tried: one row per head × hyperparameter setting, its validation
    Spearman (mean over the seeds that tried it, with their range), fit time, and how many seeds chose it (the
    best of that seed's candidates on val). None when no head searched."""
    rows = []
    for head in sorted(fits):
        by_seed: dict[Any, list[dict[str, Any]]] = {}
        for c in fits[head].get("candidates") or []:
            by_seed.setdefault(c.get("random_state"), []).append(c)
        if not by_seed:
            continue
        chosen: dict[str, int] = {}
        for recs in by_seed.values():
            scored = [c for c in recs if c.get("val_spearman") is not None]
            if scored:
                best = _chosen_text(max(scored, key=lambda c: c["val_spearman"])["params"])
                chosen[best] = chosen.get(best, 0) + 1
        settings: dict[str, list[dict[str, Any]]] = {}
        for recs in by_seed.values():
            for c in recs:
                settings.setdefault(_chosen_text(c.get("params") or {}), []).append(c)
        ranked = sorted(settings.items(), key=lambda kv: -np.mean([_val(c) for c in kv[1]]))
        for text, recs in ranked:
            vals = [c["val_spearman"] for c in recs if c.get("val_spearman") is not None]
            secs = [c["fit_seconds"] for c in recs if c.get("fit_seconds") is not None]
            rows.append([
                head,
                text,
                Cell(float(np.mean(vals)) if vals else None, kind="corr"),
                f"{min(vals):.3f} – {max(vals):.3f}" if len(vals) > 1 else "—",
                str(len(recs)),
                f"{np.mean(secs):.2f} s" if secs else "—",
                f"{chosen[text]} of {len(by_seed)}" if text in chosen else "",
            ])
    if not rows:
        return None
    cols = [Column("head"), Column("candidate"), Column("val Spearman (seed mean)", "up", "corr"),
            Column("range over seeds"), Column("seeds"), Column("fit time (mean)"), Column("chosen by")]
    notes = ["Every candidate of every searched head, best first within a head; scored on val only (never test). "
             "'chosen by': how many of the head's seeds picked it as their best on val; a proxy's candidates "
             "are scored on its search subsample, its chosen one refitted on all train prompts."]
    return Table(key, "Every candidate of the search on validation", cols, rows, notes)


def _val(c: dict[str, Any]) -> float:
    v = c.get("val_spearman")
    return -np.inf if v is None else float(v)
