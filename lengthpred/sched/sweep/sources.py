"""Where a simulation's request lengths and predictions come from: a predictions file, CASTILLO, synthetic.

Each reader returns a `LengthSource` (lengthpred.sched.sweep.pool): a pool of prompts (sampled output lengths,
prompt length) with one prediction array per predictor, aligned; simulations draw their requests from it
with replacement, each request taking one of its prompt's sampled lengths.
"""

from __future__ import annotations

import fnmatch
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from lengthpred.artefacts import PREDICTIONS, outputs
from lengthpred.errors import ConfigError, DataError
from lengthpred.names import SplitName
from lengthpred.sched.core.workload import noisy_prediction, synthetic_lengths
from lengthpred.sched.sweep.pool import LengthSource

__all__ = ["LengthSource", "POOLED_TEST", "from_castillo", "from_predictions", "from_trace", "read_prediction_files",
           "synthetic"]

log = logging.getLogger("lengthpred.sched")


def read_prediction_files(path: str | Path) -> pd.DataFrame:
    """One predictions file, or every `predictions.parquet` under a directory with each head taken from the
    newest file that has it (train.py and adapt.py runs side by side)."""
    p = Path(path)
    files = outputs(p, PREDICTIONS)  # oldest first (lengthpred.artefacts: the one "newest" rule)
    if not files:
        raise DataError(f"no predictions file at {p}: run scripts/train.py first, or set "
                        "sched.source.kind=castillo (or synthetic)")
    frames: dict[str, pd.DataFrame] = {}
    for f in files:  # oldest first, so newer files replace a head's rows
        df = pd.read_parquet(f)
        missing = [c for c in ("head", "split", "id", "y_true", "y_pred") if c not in df.columns]
        if missing:
            raise DataError(f"{f}: predictions file lacks column(s) {', '.join(missing)}")
        for h, g in df.groupby("head"):
            frames[str(h)] = g
    return pd.concat(frames.values(), ignore_index=True)


POOLED_TEST = str(SplitName.indomain("*", "test"))


def from_predictions(path: str | Path, *, split: str | None = None, heads: list[str] | None = None,
                     prompt_tokens: int | Mapping[str, int] = 128,
                     samples: Mapping[str, Sequence[int]] | None = None) -> LengthSource:
    """Requests of one split of `predictions.parquet` file(s) (docs/DESIGN.md): each head's y_pred a
    predictor; only ids every chosen head predicts. `split` may be a glob (`indomain/*/test`: every domain's
    test prompts pooled, a mixed workload). `split=None` takes that pool when present, else the split with
    the most rows among those whose name contains "test" (else all).

    `samples` (prompt id → its sampled lengths, capped ones as the cap: `lengthpred.targets.per_prompt`'s
    `lengths`) gives each request one sampled length; without it a request's length is the prompt's y_true,
    a smoothed truth. Prompt tokens: the file's `n_prompt_tokens` column, else `prompt_tokens` (id → count,
    the generation's `prompt_tokens`; or one count for every prompt)."""
    p = Path(path)
    df = read_prediction_files(p)
    names = df["split"].astype(str)
    if split is None:
        if fnmatch.filter(names.unique(), POOLED_TEST):
            split = POOLED_TEST
        else:
            counts = names.value_counts()
            tests = counts[[("test" in s) for s in counts.index]]
            split = str((tests if len(tests) else counts).idxmax())
    df = df[[fnmatch.fnmatchcase(s, split) for s in names]]
    if heads:
        unknown = sorted(set(heads) - set(df["head"]))
        if unknown:
            raise ConfigError(f"{p}: no predictions of head(s) {unknown} in split {split!r}; "
                              f"present: {sorted(df['head'].unique())}")
        df = df[df["head"].isin(heads)]
    if df.empty:
        raise DataError(f"{p}: no rows in split {split!r}")
    wide = df.pivot_table(index="id", columns="head", values="y_pred", aggfunc="first").dropna()
    if wide.empty:
        raise DataError(f"{p}: no id in split {split!r} is predicted by every head; choose sched.source.heads")
    ids = [str(i) for i in wide.index]
    y = df.groupby("id")["y_true"].first().loc[wide.index].to_numpy(float)
    if "n_prompt_tokens" in df.columns:
        prompt = df.groupby("id")["n_prompt_tokens"].first().loc[wide.index].to_numpy(float)
    elif isinstance(prompt_tokens, Mapping):
        prompt = np.array(_lookup(prompt_tokens, ids, p, "prompt token count"), dtype=float)
    else:
        log.warning("%s: no prompt token counts; every request gets a %d-token prompt", p, prompt_tokens)
        prompt = np.full(len(y), prompt_tokens)
    drawn = None if samples is None else _lookup(samples, ids, p, "sampled lengths")
    preds = {str(h): np.maximum(wide[h].to_numpy(float), 1.0) for h in wide.columns}
    return LengthSource(f"predictions:{split}", np.maximum(np.rint(y), 1).astype(np.int64),
                        np.rint(prompt).astype(np.int64), preds, samples=drawn)


def _lookup(table: Mapping[str, object], ids: list[str], path: Path, what: str) -> list:
    missing = [i for i in ids if i not in table]
    if missing:
        raise DataError(f"{path}: no {what} for {len(missing)} of {len(ids)} prompts (e.g. {missing[0]}); the "
                        "predictions and the targets come from different data")
    return [table[i] for i in ids]


def from_castillo(root: str | Path, *, model: str, datasets: list[str], part: str = "validate",
                  noisy_spearman: list[float] | None = None, seed: int = 0) -> LengthSource:
    """CASTILLO prompts of one model with their (ten) sampled lengths: each request draws one; predictors are
    synthetic noisy ones of the prompt's mean length (the near-ceiling predictor is the `mean-oracle` row)."""
    samples, prm = [], []
    for ds in datasets:
        f = Path(root) / part / ds / f"{model}.jsonl"
        if not f.is_file():
            raise DataError(f"no CASTILLO file {f}")
        for line in f.read_text().splitlines():
            r = json.loads(line)
            samples.append([max(int(x), 1) for x in r["output_sizes"]])
            prm.append(int(r["input_size"]))
    mean = np.array([np.mean(s) for s in samples])
    rng = np.random.default_rng(seed)
    preds = {f"noisy@{rho:g}": noisy_prediction(mean, rho, rng=rng) for rho in noisy_spearman or []}
    return LengthSource(f"castillo:{model}", np.maximum(np.rint(mean), 1).astype(np.int64),
                        np.array(prm, dtype=np.int64), preds, samples=samples)


def synthetic(n: int = 5000, *, median: float = 200.0, sigma: float = 1.0, max_len: int = 4096,
              prompt_tokens: int = 128, noisy_spearman: list[float] | None = None, n_samples: int = 0,
              sample_sigma: float = 0.5, seed: int = 0) -> LengthSource:
    """Lognormal prompt lengths (their medians) with noisy predictors of known Spearman (`noisy@0.6`, …).
    `n_samples` > 0 gives each prompt that many sampled lengths, lognormal around its median with log-sd
    `sample_sigma` (the serving model's sampling noise); 0: a request's length is its prompt's."""
    rng = np.random.default_rng(seed)
    y = synthetic_lengths(n, median=median, sigma=sigma, max_len=max_len, rng=rng)
    preds = {f"noisy@{r:g}": noisy_prediction(y, r, rng=rng) for r in (noisy_spearman or [0.6])}
    drawn = None
    if n_samples > 0:
        noise = np.exp(sample_sigma * rng.standard_normal((n, n_samples)))  # [n, n_samples]
        drawn = np.clip(np.rint(y[:, None] * noise), 1, max_len).astype(np.int64).tolist()
    return LengthSource("synthetic", y, np.full(n, prompt_tokens, dtype=np.int64), preds, samples=drawn)


def from_trace(path: str | Path) -> LengthSource:
    """A CSV/Parquet trace: `arrival` (s), `output_tokens`, optional `prompt_tokens` and `pred.<name>` columns."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"no trace file at {p}")
    df = pd.read_parquet(p) if p.suffix == ".parquet" else pd.read_csv(p)
    for c in ("arrival", "output_tokens"):
        if c not in df.columns:
            raise DataError(f"{p}: trace lacks column {c!r} (need arrival, output_tokens)")
    df = df.sort_values("arrival", kind="stable")
    prompt = df["prompt_tokens"].to_numpy(np.int64) if "prompt_tokens" in df.columns else np.zeros(len(df), np.int64)
    preds = {c[5:]: df[c].to_numpy(float) for c in df.columns if c.startswith("pred.")}
    return LengthSource(p.stem, np.maximum(df["output_tokens"].to_numpy(np.int64), 1), prompt, preds,
                        arrival=df["arrival"].to_numpy(float) - float(df["arrival"].iloc[0]))
