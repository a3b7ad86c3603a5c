"""A small table model rendered as Markdown, LaTeX and CSV (deterministic text, no timestamps)."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lengthpred.metrics import is_undefined

MISSING = "—"
_DECIMALS = {"corr": 3, "frac": 3, "tokens": 1, "ms": 3, "us": 2, "float": 3, "pct": 1}
_ARROW_MD = {"up": " ↑", "down": " ↓", None: ""}
_ARROW_TEX = {"up": r" $\uparrow$", "down": r" $\downarrow$", None: ""}


@dataclass(frozen=True)
class Cell:
    """A number with an optional CI; any part may be UNDEFINED (shown as 'undefined') or None (missing)."""

    value: Any
    lo: Any = None
    hi: Any = None
    kind: str = "float"  # corr | frac | tokens | ms | us | float | sig | pct | int


@dataclass(frozen=True)
class Column:
    name: str
    direction: str | None = None  # "up": higher is better, "down": lower is better
    kind: str = "text"


@dataclass
class Table:
    key: str  # e.g. "T1"; also the file stem
    title: str
    columns: list[Column]
    rows: list[list[Any]]  # cells: str, int, Cell or None
    notes: list[str] = field(default_factory=list)

    # --- text of one value -----------------------------------------------------------------------
    @staticmethod
    def number(v: Any, kind: str) -> str:
        if v is None:
            return MISSING
        if is_undefined(v):
            return "undefined"
        if kind == "int":
            return f"{int(round(float(v))):,}"
        if kind == "sig":  # 4 significant digits: latencies in s/token next to throughputs in tokens/s
            return f"{float(v):.4g}"
        if kind == "pct":
            return f"{float(v):+.{_DECIMALS['pct']}f}%"
        return f"{float(v):.{_DECIMALS.get(kind, 3)}f}"

    def cell_text(self, c: Any) -> str:
        if isinstance(c, Cell):
            text = self.number(c.value, c.kind)
            if c.lo is None and c.hi is None or c.value is None or is_undefined(c.value):
                return text
            if is_undefined(c.lo) or is_undefined(c.hi):
                return f"{text} [CI undefined]"
            return f"{text} [{self.number(c.lo, c.kind)}, {self.number(c.hi, c.kind)}]"
        if c is None:
            return MISSING
        return str(c)

    # --- formats ---------------------------------------------------------------------------------
    def to_markdown(self) -> str:
        head = [c.name + _ARROW_MD[c.direction] for c in self.columns]
        body = [[self.cell_text(c) for c in row] for row in self.rows]
        lines = [
            f"**{self.key}. {self.title}**",
            "",
            "| " + " | ".join(head) + " |",
            "|" + "|".join("---" if c.kind == "text" else "---:" for c in self.columns) + "|",
        ]
        lines += ["| " + " | ".join(r) + " |" for r in body]
        if self.notes:
            lines += [""] + [f"_{n}_" for n in self.notes]
        return "\n".join(lines) + "\n"

    def to_latex(self) -> str:
        align = "".join("l" if c.kind == "text" else "r" for c in self.columns)
        head = " & ".join(_tex(c.name) + _ARROW_TEX[c.direction] for c in self.columns)
        lines = [
            r"\begin{table}[t]",
            r"\centering",
            r"\small",
            f"\\caption{{{_tex(self.title)}}}",
            f"\\label{{tab:{self.key.lower()}}}",
            f"\\begin{{tabular}}{{{align}}}",
            r"\toprule",
            head + r" \\",
            r"\midrule",
        ]
        lines += [" & ".join(_tex(self.cell_text(c)) for c in row) + r" \\" for row in self.rows]
        lines += [r"\bottomrule", r"\end{tabular}"]
        lines += [f"\\par\\footnotesize {_tex(n)}" for n in self.notes]
        lines += [r"\end{table}"]
        return "\n".join(lines) + "\n"

    def to_csv(self) -> str:
        """Machine-readable: a CI-bearing column becomes `<name>`, `<name>_ci_low`, `<name>_ci_high`."""
        with_ci = [
            any(isinstance(r[i], Cell) and r[i].lo is not None for r in self.rows)
            for i in range(len(self.columns))
        ]
        header: list[str] = []
        for col, ci in zip(self.columns, with_ci, strict=True):
            header += [col.name, f"{col.name}_ci_low", f"{col.name}_ci_high"] if ci else [col.name]
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(header)
        for row in self.rows:
            out: list[str] = []
            for c, ci in zip(row, with_ci, strict=True):
                vals = (
                    [c.value, c.lo, c.hi]
                    if ci and isinstance(c, Cell)
                    else [c.value if isinstance(c, Cell) else c]
                )
                if ci and not isinstance(c, Cell):
                    vals += [None, None]
                out += [_raw(v) for v in vals]
            w.writerow(out)
        return buf.getvalue()

    def write(self, out_dir: str | Path) -> dict[str, Path]:
        """`<key>.md`, `<key>.tex` and `<key>.csv` under out_dir."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = {}
        for ext, text in (("md", self.to_markdown()), ("tex", self.to_latex()), ("csv", self.to_csv())):
            p = out_dir / f"{self.key}.{ext}"
            p.write_text(text, encoding="utf-8")
            paths[ext] = p
        return paths


def _raw(v: Any) -> str:
    if v is None:
        return ""
    if is_undefined(v):
        return "undefined"
    if isinstance(v, float):
        return format(v, ".6g")
    return str(v)


_TEX_ESCAPES = {
    "\\": r"\textbackslash{}",
    "^": r"\^{}",
    "&": r"\&",
    "%": r"\%",
    "#": r"\#",
    "_": r"\_",
    "$": r"\$",
    "{": r"\{",
    "}": r"\}",
    "—": "--",
    "±": r"$\pm$",
    "→": r"$\to$",
    "λ": r"$\lambda$",
    "√": r"$\surd$",
    "~": r"\textasciitilde{}",
    "↑": r"$\uparrow$",
    "↓": r"$\downarrow$",
    "τ": r"$\tau$",
    "·": r"$\cdot$",
    "−": "-",
    "≤": r"$\le$",
    "≥": r"$\ge$",
}


def _tex(s: str) -> str:
    s = s.replace("->", "→")
    return "".join(_TEX_ESCAPES.get(ch, ch) for ch in s)
