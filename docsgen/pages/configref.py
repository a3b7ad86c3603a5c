"""docs/reference/config.md: every config group and option under conf/ (the package's lengthpred/conf when conf/
is its symlink), each key with its default and the comment beside it, read from the YAML files themselves."""

from __future__ import annotations

import re
from pathlib import Path

from docsgen import mdtable
from docsgen.registry import page
from docsgen.render import header
from docsgen.results import Results

_KEY = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z_][\w.\-]*|'[^']*'|\"[^\"]*\")\s*:(?P<rest>.*)$")


def conf_dir(root: Path) -> Path:
    """conf/ resolved (it may be a symlink to lengthpred/conf), else lengthpred/conf."""
    for c in (root / "conf", root / "lengthpred" / "conf"):
        if c.is_dir():
            return c.resolve()
    raise FileNotFoundError("neither conf/ nor lengthpred/conf/ exists")


def _split_comment(rest: str) -> tuple[str, str]:
    """(value, comment) of what follows `key:`; a `#` inside quotes or brackets is part of the value."""
    depth, quote = 0, ""
    for i, ch in enumerate(rest):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "#" and depth == 0 and (i == 0 or rest[i - 1].isspace()):
            return rest[:i].strip(), rest[i + 1:].strip()
    return rest.strip(), ""


def keys(text: str) -> tuple[str, list[tuple[str, str, str]]]:
    """(the file's leading comment, [(dotted key, default, comment)]); a comment-only line under a key continues
    its comment."""
    lines = text.splitlines()
    lead = []
    for ln in lines:
        if ln.startswith("#") and not ln.startswith("# @package"):
            lead.append(ln.lstrip("#").strip())
        elif ln.strip() and not ln.startswith("#"):
            break
    out: list[tuple[str, str, str]] = []
    stack: list[tuple[int, str]] = []
    for ln in lines:
        m = _KEY.match(ln)
        if not m or ln.lstrip().startswith(("#", "-")):
            s = ln.strip()
            if s.startswith("#") and out and ln.startswith(" " * 10):  # a comment continued under a value
                k, v, c = out[-1]
                out[-1] = (k, v, f"{c} {s.lstrip('#').strip()}".strip())
            continue
        indent = len(m.group("indent"))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key = m.group("key").strip("'\"")
        value, comment = _split_comment(m.group("rest"))
        dotted = ".".join([*(k for _, k in stack), key])
        if value in ("", "|", ">"):
            stack.append((indent, key))
            if comment:
                out.append((dotted, "", comment))
            continue
        out.append((dotted, value, comment))
    return " ".join(lead), out


def _cell(s: str) -> str:
    """Text for a table cell: pipes escaped, and brackets, which Markdown would read as a link reference."""
    return s.replace("|", "\\|").replace("[", "\\[").replace("]", "\\]")


@page("docs/reference/config.md", source="docsgen/pages/configref.py")
def render(res: Results) -> str:
    conf = conf_dir(res.root)
    parts = [header("docsgen/pages/configref.py"),
             "# Configuration reference\n\n"
             "Every option of every config group, read from the YAML files (Hydra; `python scripts/<stage>.py "
             "group=option key=value`). A group's option is chosen with `group=option`; each key is set with its "
             "dotted name, e.g. `head.layer=15` or `data.length_field=output_tokens`. An `experiment` option holds "
             "only the overrides of one run ([your own trace](../how-to/own-trace.md)). The comment column is the "
             "comment beside the key in its file.\n"]
    root = conf / "config.yaml"
    if root.is_file():
        lead, rows = keys(root.read_text(encoding="utf-8"))
        parts.append("## The root config (`config.yaml`)\n\n" + (_cell(lead) + "\n\n" if lead else "") + _table(rows))
    for group in sorted(p for p in conf.iterdir() if p.is_dir() and not p.name.startswith("_")):
        files = sorted(group.rglob("*.yaml"))
        if not files:
            continue
        parts.append(f"## `{group.name}`\n")
        for f in files:
            lead, rows = keys(f.read_text(encoding="utf-8"))
            name = str(f.relative_to(group).with_suffix(""))
            parts.append(f"### `{group.name}={name}`\n\n" + (_cell(lead) + "\n\n" if lead else "") + _table(rows))
    return "\n".join(parts)


def _table(rows: list[tuple[str, str, str]]) -> str:
    if not rows:
        return "_(no keys)_\n"
    t = mdtable.MdTable(["key", "default", "comment"], ["---", "---", "---"],
                        [[f"`{k}`", f"`{_cell(v)}`" if v else "", _cell(c)] for k, v, c in rows])
    return mdtable.render(t) + "\n"
