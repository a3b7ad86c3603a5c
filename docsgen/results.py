"""Reading committed result files on behalf of one page. A file missing, unreadable or without what the page
asks of it raises `DocsInputError` naming the file and the page: the build stops and prints no stale number."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import pandas as pd

from docsgen.errors import DocsInputError


@dataclass
class Results:
    """Result files under `root` (the repository), read for `page`. `overlay`: {repo-relative path: text} the
    build produced in this run and has not written yet (a producer's fresh output in `--check` mode)."""

    root: Path
    page: str
    overlay: Mapping[str, str] = field(default_factory=dict)
    read: list[str] = field(default_factory=list)  # every file this page read, in order

    def fail(self, rel: str, problem: str) -> NoReturn:
        raise DocsInputError(rel, self.page, problem)

    def text(self, rel: str) -> str:
        self.read.append(rel)
        if rel in self.overlay:
            return self.overlay[rel]
        f = self.root / rel
        if not f.is_file():
            self.fail(rel, "missing")
        try:
            return f.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            self.fail(rel, f"unreadable ({e.__class__.__name__})")

    def csv(self, rel: str, columns: list[str] | tuple[str, ...] = (), dtype: Any = str) -> pd.DataFrame:
        """The rows of a CSV (cells as text unless `dtype` says otherwise); `columns`: those it must have."""
        text = self.text(rel)
        try:
            # text cells stay as written (an empty cell is ""); typed reads get NaN for empty cells
            df = pd.read_csv(io.StringIO(text), dtype=dtype, keep_default_na=dtype is not str)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as e:
            self.fail(rel, f"malformed CSV ({str(e).splitlines()[0]})")
        missing = [c for c in columns if c not in df.columns]
        if missing:
            self.fail(rel, f"no column {missing[0]!r} (has {list(df.columns)})")
        if df.empty:
            self.fail(rel, "no rows")
        return df

    def json(self, rel: str) -> Any:
        try:
            return json.loads(self.text(rel))
        except json.JSONDecodeError as e:
            self.fail(rel, f"malformed JSON (line {e.lineno}: {e.msg})")

    def row(self, rel: str, df: pd.DataFrame, **where: str) -> pd.Series:
        """The one row of `df` (read from `rel`) whose columns equal `where`."""
        m = pd.Series(True, index=df.index)
        for k, v in where.items():
            if k not in df.columns:
                self.fail(rel, f"no column {k!r}")
            m &= df[k].astype(str) == str(v)
        hit = df[m]
        if len(hit) != 1:
            what = ", ".join(f"{k}={v}" for k, v in where.items())
            self.fail(rel, f"{len(hit)} rows with {what} (needs exactly one)")
        return hit.iloc[0]
