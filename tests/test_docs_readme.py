"""The README is a front door: short, generated from the committed results, with no dated history."""

from __future__ import annotations

import re

from docsgen.registry import MARKER
from lengthpred.paths import REPO_ROOT

MAX_LINES = 250


def test_the_readme_stays_a_front_door():
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_LINES, f"README.md has {len(text.splitlines())} lines (cap {MAX_LINES})"
    assert text.startswith(MARKER), "README.md is rendered by make docs from docsgen/templates/README.md.j2"
    assert not re.search(r"\bissue \d+", text, re.I), "issue numbers belong in the log, not the README"
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), "dated history belongs in docs/log/, not the README"
