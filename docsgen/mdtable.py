"""Markdown pipe tables to rows and back, byte for byte: a table read by `parse` and written by `render` gives
the lines it was read from (cell text kept as shown, alignment kept per column)."""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass

_SEP = re.compile(r"^\|(\s*:?-+:?\s*\|)+\s*$")


@dataclass
class MdTable:
    header: list[str]
    align: list[str]  # per column: "---", "---:", ":---" or ":---:" as written
    rows: list[list[str]]

    def to_csv(self) -> str:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(self.header)
        w.writerows(self.rows)
        return buf.getvalue()


def split_row(line: str) -> list[str]:
    """Cells of one `| a | b |` line; `\\|` inside a cell stays in it."""
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    cells, cur, i = [], "", 0
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body) and body[i + 1] == "|":
            cur += "\\|"
            i += 2
            continue
        if body[i] == "|":
            cells.append(cur.strip())
            cur = ""
        else:
            cur += body[i]
        i += 1
    cells.append(cur.strip())
    return cells


def is_separator(line: str) -> bool:
    return bool(_SEP.match(line.strip()))


def parse(lines: list[str]) -> MdTable:
    """A table from its lines: header, separator, rows (a row with fewer cells is padded with blanks)."""
    if len(lines) < 2 or not is_separator(lines[1]):
        raise ValueError("not a Markdown table: no |---| line under the header")
    header = split_row(lines[0])
    align = [c.replace(" ", "") for c in split_row(lines[1])]
    rows = []
    for line in lines[2:]:
        cells = split_row(line)
        rows.append(cells + [""] * (len(header) - len(cells)))
    return MdTable(header, align, rows)


def render(t: MdTable) -> str:
    """The table as Markdown lines (no trailing newline)."""
    return "\n".join([_line(t.header), "|" + "|".join(t.align) + "|", *(_line(r) for r in t.rows)])


def _line(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def from_csv(text: str, align: list[str] | None = None) -> MdTable:
    """A table from CSV text (first row the header); `align` defaults to left for every column."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        raise ValueError("empty CSV: no header row")
    header, body = rows[0], rows[1:]
    if any(len(r) != len(header) for r in body):
        bad = next(i for i, r in enumerate(body, 2) if len(r) != len(header))
        raise ValueError(f"row {bad} has a different number of cells than the header ({len(header)})")
    return MdTable(header, align or ["---"] * len(header), body)
