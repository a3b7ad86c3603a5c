"""One head's seeds, fitted in separate train runs (a long fit run one seed at a time:
`head.n_seeds=1 head.params.random_state=<k>`), merged into the predictions file one run over every seed writes
(lengthpred.eval.seed_pairs.merge_seed_runs), so scripts/evaluate.py and T1 show the mean ± sd over seeds:

    .venv/bin/python scripts/merge_seeds.py --head lora --out outputs/bench/train_lora \\
        outputs/bench/train_lora_s0 outputs/bench/train_lora_s1 outputs/bench/train_lora_s2

Each run is a folder holding predictions.parquet (or the file), the first seed's run first (its `y_pred` stays the
head's). Writes `<out>/predictions.parquet` and, when every run has its metrics.json, `<out>/metrics.json`
(merge_seed_metrics: every seed's validation and test scores and search candidates; no parameter count when the
seeds chose heads of different sizes; runs of another head, data or search budget, or a seed given twice, are
refused), so `scripts/evaluate.py eval.input_dir=<out>` scores it like any train run; scripts/compare_seeds.py pairs
it with another head. Refuses an `--out` that already holds either file.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

import pandas as pd

from lengthpred.artefacts import METRICS, PREDICTIONS
from lengthpred.errors import DataError, LengthpredError
from lengthpred.eval.seed_pairs import merge_seed_metrics, merge_seed_runs
from lengthpred.integrity import atomic_write_bytes, atomic_write_text


def _metrics(runs: list[Path]) -> list[dict] | None:
    """Each run's metrics.json (beside its predictions file when the run is given as the file), or None when a run
    has none."""
    files = [(r if r.is_dir() else r.parent) / METRICS for r in runs]
    if not all(f.is_file() for f in files):
        return None
    try:
        return [json.loads(f.read_text()) for f in files]
    except ValueError as e:
        raise DataError(f"a run's {METRICS} is not JSON ({e}); rerun its train stage") from None


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="train run folders (or their predictions files)")
    ap.add_argument("--head", required=True, help="the head whose rows to merge")
    ap.add_argument("--out", required=True, type=Path, help="folder to write predictions.parquet into")
    args = ap.parse_args(argv)
    target, metrics_file = args.out / PREDICTIONS, args.out / METRICS
    try:
        for t in (target, metrics_file):
            if t.exists():
                raise DataError(f"{t} exists: give a new --out folder (nothing was written)")
        files = [r / PREDICTIONS if r.is_dir() else r for r in args.runs]
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise DataError(f"no predictions file at {', '.join(missing)}")
        merged = merge_seed_runs([pd.read_parquet(f) for f in files], args.head)
        blobs = _metrics(args.runs)
        metrics = merge_seed_metrics(blobs, args.head) if blobs is not None else None
    except LengthpredError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    buf = io.BytesIO()
    merged.to_parquet(buf, index=False)
    atomic_write_bytes(target, buf.getvalue())
    n = len([c for c in merged.columns if c.startswith("y_pred_seed")])
    print(f"{target}: {len(merged)} rows of {args.head}, {n} seeds")
    if metrics is None:
        print(f"no {METRICS} written (a run without one): score it with 'eval.paired.heads=[]'")
    else:
        atomic_write_text(metrics_file, json.dumps(metrics, indent=2) + "\n")
        print(f"{metrics_file}: {metrics['n_seeds']} seeds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
