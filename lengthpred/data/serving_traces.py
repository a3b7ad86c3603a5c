"""Real serving traces (request arrivals with prompt and output token counts), one loader each.

They hold no prompt texts, so they are not prompt sources: a workload takes their arrival process and
their length distributions. Every loader returns the same frame, in file order:

    arrival_s      seconds since the trace's first request (float, nondecreasing)
    prompt_tokens  the request's input length (int, >= 1)
    output_tokens  the tokens it generated (int, >= 1)

Bad input (the project's rule, `lengthpred.data.readers.BadInputLog`): a missing or unparsable timestamp,
a timestamp earlier than an earlier row's (non-monotone), a missing, non-integer, zero or negative token
count, a missing column or an unknown one stops the load with one line naming the file, its line, the row
and the field. With ``on_bad="skip"`` bad rows are dropped and unknown columns ignored, and both are
counted in ``df.attrs["bad_input"]``. Rows are never re-sorted: a trace out of order is a broken trace
(two files concatenated, a wrong unit), and sorting would hide it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from lengthpred.data.readers import BadInputLog
from lengthpred.errors import DataError
from lengthpred.registry import Registry

COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")


@dataclass(frozen=True)
class ServingTrace:
    name: str
    file: str  # relative to the datasets root, as in MANIFEST.json
    read: Callable[[Path], pd.DataFrame]  # the raw file as a frame of its own columns
    fields: tuple[str, str, str]  # the raw columns holding the timestamp, prompt tokens, output tokens
    seconds: Callable[[pd.Series], pd.Series]  # raw timestamps → seconds (NaN where unparsable)
    about: str
    ignored: tuple[str, ...] = ()  # known columns the loader does not use (Mooncake's prefix-cache hash ids)

    @property
    def files(self) -> tuple[str, ...]:
        return (self.file,)

    def load(self, root: Path, on_bad: str = "raise") -> pd.DataFrame:
        """The trace as `COLUMNS`, checked (module docstring); `on_bad` is "raise" or "skip"."""
        log = BadInputLog(on_bad)
        path = Path(root) / self.file
        if not path.is_file():
            raise DataError(f"{path}: serving trace {self.name!r} not found (check data.root)")
        try:
            raw = self.read(path)
        except (ValueError, json.JSONDecodeError) as e:
            raise DataError(f"{path}: cannot parse serving trace {self.name!r}: {e}") from None
        known = (*self.fields, *self.ignored)
        missing = [c for c in self.fields if c not in raw.columns]
        if missing:
            raise DataError(f"{path}: line 1: no column {missing[0]!r}; a {self.name} trace has {', '.join(known)}")
        for c in raw.columns:
            if c not in known:
                log.bad("unknown column", f"{path}:1", f"field {c!r}; a {self.name} trace has {', '.join(known)}")
        t_col, p_col, o_col = self.fields
        values = {t_col: self.seconds(raw[t_col]), p_col: _tokens(raw[p_col]), o_col: _tokens(raw[o_col])}
        first_line = 2 if path.suffix == ".csv" else 1  # a CSV's header is line 1
        keep = np.ones(len(raw), dtype=bool)
        for r in np.flatnonzero(pd.DataFrame(values).isna().any(axis=1).to_numpy()):  # [bad rows], file order
            field = next(c for c in self.fields if pd.isna(values[c].iloc[r]))
            what = "missing or unparsable timestamp" if field == t_col else "missing, zero, negative or non-integer token count"
            log.bad(what, f"{path}:{first_line + r}", f"row {r + 1}, field {field!r}: {raw[field].iloc[r]!r}")
            keep[r] = False
        t = values[t_col].to_numpy(float)
        ok = np.flatnonzero(keep)
        before = np.maximum.accumulate(t[ok])  # latest timestamp up to each good row
        for k in np.flatnonzero(t[ok][1:] < before[:-1]) + 1:  # rows earlier than an earlier row
            r = int(ok[k])
            log.bad("non-monotone timestamp", f"{path}:{first_line + r}",
                    f"row {r + 1}, field {t_col!r}: {raw[t_col].iloc[r]!r} is earlier than an earlier row's")
            keep[r] = False
        if not keep.any():
            raise DataError(f"{path}: no usable row in serving trace {self.name!r}")
        df = pd.DataFrame({"arrival_s": t[keep] - t[keep][0],
                           "prompt_tokens": values[p_col].to_numpy()[keep].astype(np.int64),
                           "output_tokens": values[o_col].to_numpy()[keep].astype(np.int64)})
        df.attrs["bad_input"] = dict(log.counts)
        return df


def _tokens(col: pd.Series) -> pd.Series:
    """Token counts as floats, NaN where missing, non-integer or below 1."""
    x = pd.to_numeric(col, errors="coerce").astype(float)
    return x.where((x >= 1) & (x == np.floor(x)))


def _azure_seconds(col: pd.Series) -> pd.Series:
    t = pd.to_datetime(col, format="ISO8601", errors="coerce")
    return (t - t.min()).dt.total_seconds()


def _ms_seconds(col: pd.Series) -> pd.Series:
    return pd.to_numeric(col, errors="coerce").astype(float) / 1000.0


def _read_csv(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])


def _read_jsonl(path: Path) -> pd.DataFrame:
    return pd.read_json(path, lines=True, dtype=False)


TRACES: Registry[ServingTrace] = Registry("serving trace")
_AZURE = dict(read=_read_csv, fields=("TIMESTAMP", "ContextTokens", "GeneratedTokens"), seconds=_azure_seconds)
for _t in (
    ServingTrace("azure2023_conv", "traces/azure2023_conv.csv", **_AZURE,
                 about="Azure LLM inference 2023, conversation: one hour of arrivals"),
    ServingTrace("azure2023_code", "traces/azure2023_code.csv", **_AZURE,
                 about="Azure LLM inference 2023, code completion: one hour of arrivals"),
    ServingTrace("mooncake_conversation", "traces/mooncake_conversation.jsonl", _read_jsonl,
                 ("timestamp", "input_length", "output_length"), _ms_seconds,
                 "Mooncake (Kimi) conversation trace, millisecond arrivals (in 3 s ticks)", ignored=("hash_ids",)),
):
    TRACES.register(_t.name)(_t)


def load_trace(name: str, root: Path, on_bad: str = "raise") -> pd.DataFrame:
    """A registered serving trace by name (an unknown name lists the known ones); `on_bad`: raise | skip."""
    return TRACES.get(name).load(root, on_bad)
