"""A page of Markdown tables into committed rows and a template that renders it back.

    python -m docsgen.convert --ingest outputs/bench/tables --prefix bench_ --made-by "make bench"
    python -m docsgen.convert --ingest outputs/castillo/runs/<time>/tables --prefix castillo_ --made-by "make castillo"
    python -m docsgen.convert --ingest table.md --as bench_T1 --made-by "..."   # one page
    python -m docsgen.convert            # the one-time move of the flat docs/*.md pages (done; kept for the record)

Each table becomes one CSV under docs/results/data/<study>/ (cells as the table showed them: a cell
`0.754 [0.701, 0.803]` is a value and its 95% interval, read as numbers by `docsgen.numbers`); the text
around the tables becomes the page's template under docsgen/templates/, so `make docs` renders the page from
the rows. Where the rows came from (the page, its last commit and the command that wrote it) goes to
docs/results/data/SOURCES.csv.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import subprocess
import sys
from pathlib import Path

from docsgen import mdtable
from docsgen.studies import DATA, FLAT_PAGES, page_path, study_of

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "docsgen" / "templates"
SOURCES = f"{DATA}/SOURCES.csv"
SOURCE_COLUMNS = ["file", "align", "converted_from", "commit", "committed_on", "made_by"]
_SCALES = {"bench": "Bench", "demo": "Demo", "castillo": "CASTILLO", "serve": "Serving", "spec": "Bench"}
_MADE_BY = {"bench": "make bench", "demo": "make demo", "castillo": "make castillo", "spec": "make spec"}
_CAPTION = re.compile(r"^\*\*(?:[A-Za-z0-9_]+\. )?(.+?)\*\*\s*$")


def made_by(stem: str, text: str) -> str:
    """The command that wrote a page: the `Output of `...`` line where the page names one, else its prefix's."""
    m = re.search(r"Output of `([^`]+)`", text)
    if m:
        return m.group(1)
    return _MADE_BY.get(stem.split("_")[0], "a script named on the page")


def last_commit(path: str) -> tuple[str, str]:
    out = subprocess.run(["git", "log", "-1", "--format=%h %ad", "--date=short", "--", path], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout.split()
    return (out[0], out[1]) if out else ("uncommitted", "")


def _relink(line: str, stems: set[str], study: str) -> str:
    """Links and mentions of the flat pages and figures, rewritten for the page's new place."""
    line = line.replace("](figures/", "](../../figures/")

    def mention(m: re.Match) -> str:
        return page_path(m.group(1)) if m.group(1) in stems else m.group(0)

    return re.sub(r"docs/([A-Za-z0-9_]+)\.md", mention, line)


def split_page(text: str, stem: str, study: str) -> tuple[str, list[mdtable.MdTable]]:
    """(template text, tables): each table's lines replaced by a `table(...)` call, in order."""
    stems = {s for v in FLAT_PAGES.values() for s in v}
    lines = text.rstrip("\n").split("\n")
    out: list[str] = []
    tables: list[mdtable.MdTable] = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and mdtable.is_separator(lines[i + 1]):
            j = i + 2
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            tables.append(mdtable.parse(lines[i:j]))
            out.append(f"{{{{ table(\"{study}/{_csv_name(stem, len(tables))}\") }}}}")
            i = j
            continue
        out.append(_relink(lines[i], stems, study))
        i += 1
    n = len(tables)
    if n == 1:  # one table: its file is <stem>.csv
        out = [o.replace(_csv_name(stem, 1), f"{stem}.csv") for o in out]
    return "\n".join(out) + "\n", tables


def _csv_name(stem: str, k: int) -> str:
    return f"{stem}-{k}.csv"


def _title(template: str, stem: str) -> str:
    """An H1 for a page that starts with a bold table caption instead of one."""
    first, _, rest = template.partition("\n")
    if first.startswith("# "):
        return first + "\n\n{{ provenance() }}\n" + rest
    scale = _SCALES.get(stem.split("_")[0], "")
    m = _CAPTION.match(first)
    if m:
        return f"# {scale}: {m.group(1)}\n\n{{{{ provenance() }}}}\n{rest}"
    return f"# {scale}: {stem.replace('_', ' ')}\n\n{{{{ provenance() }}}}\n\n{template}"


def convert(src: Path, stem: str, sources: dict[str, list[str]], made: str | None = None) -> list[Path]:
    """Write the rows and the template of one page; record each CSV's source. Returns the files written."""
    study = study_of(stem)
    text = src.read_text(encoding="utf-8")
    for mark in ("{{", "{%", "{#"):
        if mark in text:
            raise SystemExit(f"{src}: holds {mark!r}, which the template would read as Jinja; wrap it in raw first")
    template, tables = split_page(text, stem, study)
    commit, day = last_commit(str(src.relative_to(ROOT))) if src.is_relative_to(ROOT) else ("", "")
    written = []
    for k, t in enumerate(tables, 1):
        name = f"{stem}.csv" if len(tables) == 1 else _csv_name(stem, k)
        f = ROOT / DATA / study / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(t.to_csv(), encoding="utf-8")
        sources[f"{study}/{name}"] = [f"{study}/{name}", " ".join(t.align),
                                      str(src.relative_to(ROOT)) if src.is_relative_to(ROOT) else str(src),
                                      commit, day, made or made_by(stem, text)]
        written.append(f)
    tpl = TEMPLATES / (page_path(stem) + ".j2")
    tpl.parent.mkdir(parents=True, exist_ok=True)
    tpl.write_text(_title(template, stem), encoding="utf-8")
    return [*written, tpl]


def read_sources() -> dict[str, list[str]]:
    f = ROOT / SOURCES
    if not f.is_file():
        return {}
    rows = list(csv.reader(io.StringIO(f.read_text(encoding="utf-8"))))
    return {r[0]: r for r in rows[1:]}


def write_sources(sources: dict[str, list[str]]) -> None:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(SOURCE_COLUMNS)
    w.writerows(sources[k] for k in sorted(sources))
    (ROOT / SOURCES).write_text(buf.getvalue(), encoding="utf-8")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--ingest", type=Path, help="a table page a run wrote, or its tables folder")
    ap.add_argument("--as", dest="stem", help="the page one file becomes (a stem of docsgen.studies.FLAT_PAGES)")
    ap.add_argument("--prefix", default="", help="with a folder: page stem = prefix + file stem (bench_ + T1)")
    ap.add_argument("--made-by", help="the command that wrote it (recorded in SOURCES.csv)")
    a = ap.parse_args(argv)
    sources = read_sources()
    known = {s for v in FLAT_PAGES.values() for s in v}
    if a.ingest and a.ingest.is_dir():
        for f in sorted(a.ingest.glob("*.md")):
            stem = a.prefix + f.stem
            if stem in known:
                convert(f.resolve(), stem, sources, a.made_by)
                print(f"ingested {f} as {page_path(stem)}")
            else:
                print(f"skipped {f}: no results page {stem} (docsgen.studies.FLAT_PAGES)")
    elif a.ingest:
        if not a.stem:
            ap.error("--ingest FILE needs --as <page stem>")
        convert(a.ingest.resolve(), a.stem, sources, a.made_by)
    else:
        for stems in FLAT_PAGES.values():
            for stem in stems:
                src = ROOT / "docs" / f"{stem}.md"
                if src.is_file():
                    convert(src, stem, sources)
    write_sources(sources)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
