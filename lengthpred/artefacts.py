"""The names of the files stages hand to each other, and the one rule for which of several copies is read.

Every stage writes its outputs under fixed names into its own run folder; a later stage finds them under an
experiment folder by name (`lengthpred.stages.locations` holds the typed resolvers; library code that scans a
folder it was given uses `outputs` here). When a name occurs more than once (a stage run twice, or `runs/`,
`multiruns/` and a demo's `<stage>/` folders side by side), the newest is the one **written last**: the largest
(modification time in ns, path). Run folders are timestamps only under `runs/` and `multiruns/`, which
interleave in time, and `scripts/demo.py` or the pipeline name them by stage, so path order says nothing about
which was written later; the file's own write time does, and the path only breaks exact ties.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from lengthpred.paths import data_dir as home_data_dir
from lengthpred.paths import resolve

PREDICTIONS = "predictions.parquet"  # every predictor stage (train, adapt, stack, castillo, decode)
METRICS = "metrics.json"  # the train and stack stages' fit record, beside their predictions
HEAD = "head"  # the train stage's saved head folder (`<run>/head/head.json`)
HEAD_SPEC = "head.json"
ONLINE_SUMMARY = "summary.csv"  # the adapt stage: per pair and head, end-of-stream metrics and update_ms
CURVES = "curves.csv"  # the adapt stage: held-out Spearman/MAE vs labels learned
STREAM_CURVES = "stream_curves.csv"  # the adapt stage: the main adaptation curve (in-stream Spearman)
SCHED_RESULTS = "sched_results.csv"  # the simulate stage (T5)
SCHED_GAINS = "sched_gains.csv"  # the simulate stage, beside sched_results.csv
SCHED_LATENCIES = "sched_latencies.parquet"  # the simulate stage (latency CDF plot)
COSTS = "costs.json"  # the costs stage (T6)
RESULTS = "results.csv"  # the evaluate stage
DECODE_CHECKPOINTS = "checkpoints.parquet"  # the decode curve stage: test predictions per answer and checkpoint,
# one `pred:<label>` column per predictor (CHECKPOINT_PRED); read by the refined-scheduler stage
CHECKPOINT_PRED = "pred:"
PROMPT_ONLY = "prompt-only"  # the decode curve's prompt-only baseline (its label and its checkpoints column)
DECODE_CHOSEN = "chosen.json"  # the decode curve stage: what validation chose, the store's checkpoint interval
SPLITS = "splits"  # `<data_dir>/splits/<data.name>/`: the prepared prompt set
SPLITS_JSON = "splits.json"


def age_key(path: Path) -> tuple[int, str]:
    """The one "newest" rule: later write time wins, then the later path."""
    return path.stat().st_mtime_ns, str(path)


def oldest_first(paths: Iterable[Path]) -> list[Path]:
    """`paths` ordered by `age_key`, so iterating and overwriting leaves the newest in place."""
    return sorted(paths, key=age_key)


def newest(paths: Iterable[Path]) -> Path | None:
    """The path written last (`age_key`), None when there is none."""
    ordered = oldest_first(paths)
    return ordered[-1] if ordered else None


def outputs(root: str | Path, name: str) -> list[Path]:
    """Every file called `name` under `root` (a run or experiment folder), oldest first; `root` itself when it
    is such a file; none when `root` does not exist."""
    root = Path(root)
    if root.is_file():
        return [root]
    return oldest_first(root.rglob(name)) if root.is_dir() else []


def newest_output(root: str | Path, name: str) -> Path | None:
    """The newest file called `name` under `root`, None when there is none."""
    found = outputs(root, name)
    return found[-1] if found else None


def splits_dir(data_cfg: Mapping[str, Any], data_dir: str | Path | None = None) -> Path:
    """A data config's prepared prompt set: `<data_dir>/splits/<name>`; without data_dir, `data.out_dir`
    (`${paths.data_dir}/splits/<name>` in conf/data), else the home's `data/splits/<name>`."""
    if data_dir is not None:
        return resolve(data_dir) / SPLITS / str(data_cfg["name"])
    if data_cfg.get("out_dir"):
        return resolve(str(data_cfg["out_dir"]))
    return home_data_dir() / SPLITS / str(data_cfg["name"])
