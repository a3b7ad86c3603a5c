"""Real serving traces (request arrivals with prompt and output token counts), one loader each.

They hold no prompt texts, so they are not prompt sources: a workload takes their arrival process and
their length distributions. Every loader returns the same frame, sorted by arrival:

    arrival_s      seconds since the trace's first request (float)
    prompt_tokens  the request's input length (int, >= 1)
    output_tokens  the tokens it generated (int, >= 1)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from lengthpred.errors import DataError
from lengthpred.registry import Registry

COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")


@dataclass(frozen=True)
class ServingTrace:
    name: str
    file: str  # relative to the datasets root, as in MANIFEST.json
    load_raw: Callable[[Path], pd.DataFrame]
    about: str

    @property
    def files(self) -> tuple[str, ...]:
        return (self.file,)

    def load(self, root: Path) -> pd.DataFrame:
        """The trace as `COLUMNS`, checked: a missing file, an unparsable or non-positive value raises
        DataError naming the file and the first bad row."""
        path = Path(root) / self.file
        if not path.is_file():
            raise DataError(f"{path}: serving trace {self.name!r} not found (check data.root)")
        try:
            df = self.load_raw(path)
        except (ValueError, KeyError, json.JSONDecodeError) as e:
            raise DataError(f"{path}: cannot parse serving trace {self.name!r}: {e}") from None
        bad = df[list(COLUMNS)].isna().any(axis=1) | (df["prompt_tokens"] < 1) | (df["output_tokens"] < 1)
        if bad.any():
            row = int(bad.to_numpy().nonzero()[0][0])
            raise DataError(f"{path}: row {row + 1}: missing or non-positive value in {df.iloc[row].to_dict()}")
        df = df.sort_values("arrival_s", kind="stable").reset_index(drop=True)
        df["arrival_s"] = (df["arrival_s"] - df["arrival_s"].iloc[0]).astype(float)
        return df.astype({"prompt_tokens": int, "output_tokens": int})[list(COLUMNS)]


TRACES: Registry[ServingTrace] = Registry("serving trace")


def _azure(path: Path) -> pd.DataFrame:
    raw = pd.read_csv(path)
    t = pd.to_datetime(raw["TIMESTAMP"], format="ISO8601")
    return pd.DataFrame({"arrival_s": (t - t.min()).dt.total_seconds(),
                         "prompt_tokens": pd.to_numeric(raw["ContextTokens"], errors="coerce"),
                         "output_tokens": pd.to_numeric(raw["GeneratedTokens"], errors="coerce")})


def _mooncake(path: Path) -> pd.DataFrame:
    raw = pd.read_json(path, lines=True)
    return pd.DataFrame({"arrival_s": pd.to_numeric(raw["timestamp"], errors="coerce") / 1000.0,
                         "prompt_tokens": pd.to_numeric(raw["input_length"], errors="coerce"),
                         "output_tokens": pd.to_numeric(raw["output_length"], errors="coerce")})


for _t in (
    ServingTrace("azure2023_conv", "traces/azure2023_conv.csv", _azure,
                 "Azure LLM inference 2023, conversation: one hour of arrivals"),
    ServingTrace("azure2023_code", "traces/azure2023_code.csv", _azure,
                 "Azure LLM inference 2023, code completion: one hour of arrivals"),
    ServingTrace("mooncake_conversation", "traces/mooncake_conversation.jsonl", _mooncake,
                 "Mooncake (Kimi) conversation trace, millisecond arrivals"),
):
    TRACES.register(_t.name)(_t)


def load_trace(name: str, root: Path) -> pd.DataFrame:
    """A registered serving trace by name (an unknown name lists the known ones)."""
    return TRACES.get(name).load(root)
