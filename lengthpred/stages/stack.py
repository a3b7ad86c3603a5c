"""The stack stage (`scripts/stack.py`): two trained heads' predictions → one stacked head, weight chosen on val.

Reads, for each of `stack.heads`, the newest predictions.parquet under `stack.input_dir` that holds that
head's val rows (the train stage writes them: `indomain/<domain>/val`); both must come from runs of one
model and config (the evaluate stage's provenance rule) and agree on every shared prompt's target. The
weight is chosen on the pooled in-domain val rows (lengthpred.heads.stacking) and applied to every split
the two heads share by id: in-domain val and test, ForeLen subsets (cross-domain pairs are fitted per pair
and left out). Writes predictions.parquet (head `stack.label`) and metrics.json into the run directory, so
`scripts/evaluate.py` scores the stack like any head (`eval.paired.heads=[linear]` for its paired interval).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import DictConfig

from lengthpred.artefacts import METRICS, PREDICTIONS
from lengthpred.errors import DataError
from lengthpred.eval.predictions import read_predictions
from lengthpred.eval.results import provenance_for
from lengthpred.heads.stacking import fit_stack, predict_stack
from lengthpred.heads.training import PREDICTION_COLUMNS, score
from lengthpred.names import SplitName
from lengthpred.paths import resolve
from lengthpred.stages.locations import predictions_files
from lengthpred.stages.provenance import provenance_of

log = logging.getLogger(__name__)


def _part(split: str) -> tuple[str, str]:
    s = SplitName.try_parse(split)
    return ("", "") if s is None else (s.kind, s.part)


def head_rows(root: Path, head: str, skip: Path | None = None) -> tuple[Path, pd.DataFrame]:
    """(file, rows) of `head` from the newest predictions file under `root` with its in-domain val rows:
    those rows and its in-domain test and ForeLen rows."""
    files = [f for f in predictions_files(root) if skip is None or skip not in f.resolve().parents]
    for f in reversed(files):  # newest first
        df = read_predictions(f)
        df = df[df["head"] == head]
        kinds = [_part(s) for s in df["split"]]
        if any(k == ("indomain", "val") for k in kinds):
            keep = [k in (("indomain", "val"), ("indomain", "test")) or k[0] == "forelen" for k in kinds]
            return f, df[keep]
    raise DataError(
        f"no predictions of head {head!r} with val rows under {root}: train it with this version of "
        f"scripts/train.py (it writes indomain/<domain>/val rows), e.g. scripts/train.py head={head}"
    )


def stack_frames(a: pd.DataFrame, b: pd.DataFrame, label: str, n_weights: int) -> tuple[pd.DataFrame, dict]:
    """The stacked predictions of two heads' rows (shared (split, id) only) and what was chosen."""
    both = a.merge(b[["split", "id", "y_true", "y_pred"]], on=["split", "id"], suffixes=("", "_b"))
    if both.empty:
        raise DataError("the two heads share no (split, id): were they trained on the same splits?")
    bad = ~np.isclose(both["y_true"], both["y_true_b"])
    if bad.any():
        raise DataError(
            f"the heads disagree on {int(bad.sum())} targets (e.g. {both.loc[bad, 'id'].iloc[0]})"
        )
    is_val = np.array([_part(s) == ("indomain", "val") for s in both["split"]])
    val = both[is_val]
    stack = fit_stack(
        val["y_true"].to_numpy(), val["y_pred"].to_numpy(), val["y_pred_b"].to_numpy(), n_weights
    )
    out = both.assign(
        head=label, y_pred=predict_stack(stack, both["y_pred"].to_numpy(), both["y_pred_b"].to_numpy())
    )
    test = out[[_part(s) == ("indomain", "test") for s in out["split"]]]
    info = {
        "weight": stack.weight,
        "coef_a": stack.coef_a,
        "val_spearman": stack.val_spearman,
        "val_grid": [{"weight": w, "val_spearman": r} for w, r in stack.grid],
        "n_val": int(len(val)),
        "n_test": int(len(test)),
        **(score(test["y_true"].to_numpy(), test["y_pred"].to_numpy()) if len(test) > 1 else {}),
    }
    return out[PREDICTION_COLUMNS], info


def _n_parameters(pred_file: Path) -> int | None:
    path = pred_file.parent / METRICS
    try:
        return int(json.loads(path.read_text())["n_parameters"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def stack_from_config(cfg: DictConfig, out_dir: str | Path) -> dict[str, Any]:
    """Stack `cfg.stack.heads` (module docstring) into `out_dir`; returns the metrics written. The second
    entry may be a list of candidate partners: each is stacked with the first head and the stack with the
    best val Spearman is kept (every candidate's val score goes into metrics.json)."""
    s = cfg.stack
    heads = list(s.heads)
    if len(heads) != 2:
        raise DataError(f"stack.heads={heads}: give two heads, [base, partner or [candidate partners]]")
    base = str(heads[0])
    partners = [str(h) for h in heads[1]] if not isinstance(heads[1], str) else [str(heads[1])]
    if not partners:
        raise DataError("stack.heads: the partner list is empty")
    out_dir = Path(out_dir)
    root = resolve(s.input_dir)
    fa, a = head_rows(root, base, skip=out_dir.resolve())
    runs = provenance_of(cfg)
    pa = provenance_for(fa, root, runs)
    label = str(s.label or (f"stack_{base}_{partners[0]}" if len(partners) == 1 else f"stack_{base}"))
    fits = []
    for partner in partners:
        fb, b = head_rows(root, partner, skip=out_dir.resolve())
        pb = provenance_for(fb, root, runs)
        if (pa.model, pa.config_hash) != (pb.model, pb.config_hash):
            raise DataError(
                f"{fa} and {fb} come from different models or configs ({pa.config_hash} vs {pb.config_hash})"
            )
        fits.append((partner, fb, *stack_frames(a, b, label, int(s.n_weights))))
    partner, fb, preds, info = max(fits, key=lambda f: f[3]["val_spearman"])  # the first of equals
    counts = [_n_parameters(fa), _n_parameters(fb)]
    metrics = {
        "head": label,
        "heads": [base, partner],
        "sources": [str(fa), str(fb)],
        **info,
        "partners_val_spearman": {f[0]: f[3]["val_spearman"] for f in fits},
        "n_parameters": sum(counts) + 1 if None not in counts else None,  # both heads and the weight
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    preds.to_parquet(out_dir / PREDICTIONS, index=False)
    (out_dir / METRICS).write_text(json.dumps(metrics, indent=2) + "\n")
    log.info(
        "%s: %s + %s, weight %.2f on %s (val spearman %.3f), test spearman %s",
        label,
        base,
        partner,
        info["weight"],
        base,
        info["val_spearman"],
        info.get("spearman"),
    )
    return metrics


def run_stack(cfg: DictConfig, out: str | Path) -> Path:
    """The stack stage (scripts/stack.py): `stack_from_config` into `out`, its weight and scores printed.
    Returns the folder."""
    m = stack_from_config(cfg, out)
    print(
        f"{m['head']}: weight {m['weight']:.2f} on {m['heads'][0]} (val spearman {m['val_spearman']:.3f}); "
        f"test spearman {m.get('spearman')}, mae {m.get('mae')} (n_test {m['n_test']}) → {out}"
    )
    return Path(out)
