"""The Python examples of the docs run: every ```python block holding `>>>` lines in README.md and docs/ is a
doctest, run on the tiny random-weight model the examples build (no download)."""

from __future__ import annotations

import doctest
import re

import pytest

from lengthpred.paths import REPO_ROOT

_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def example_blocks() -> list[tuple[str, str]]:
    """(page, the page's doctest blocks joined): a page's blocks share their names, as a reader runs them."""
    pages = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
    out = []
    for p in pages:
        blocks = [b for b in _BLOCK.findall(p.read_text(encoding="utf-8")) if ">>>" in b]
        if blocks:
            out.append((str(p.relative_to(REPO_ROOT)), "\n".join(blocks)))
    return out


def test_the_docs_have_examples_to_run():
    assert any(page == "docs/how-to/heads-from-python.md" for page, _ in example_blocks())


@pytest.mark.parametrize("page, text", example_blocks(), ids=[p for p, _ in example_blocks()])
def test_a_docs_example_runs_as_written(page, text, one_torch_thread, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    test = doctest.DocTestParser().get_doctest(text, {}, page, page, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    out: list[str] = []
    runner.run(test, out=out.append)
    assert runner.failures == 0, "".join(out)
