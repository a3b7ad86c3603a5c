"""How-to pages other contributors write: while one is missing, the build writes a short placeholder so links
to it resolve; once the real page exists (a file without the generated marker), the build leaves it alone."""

from __future__ import annotations

from pathlib import Path

from docsgen.registry import MARKER, page
from docsgen.render import header
from docsgen.results import Results

ROOT = Path(__file__).resolve().parents[2]
PLACEHOLDERS = {
    "docs/how-to/serve-with-vllm.md": ("Serving with vLLM", "how to run `vllm serve` with lengthpred's plugin "
                                       "and measure it with `vllm bench serve`"),
}


def _placeholder(out: str, title: str, what: str) -> None:
    @page(out, source="docsgen/pages/placeholders.py")
    def render(res: Results) -> str:
        return header("docsgen/pages/placeholders.py") + (
            f"# {title}\n\nThis page, {what}, is being written. Until it lands, see "
            "[getting started](../getting-started.md).\n")


for _out, (_title, _what) in PLACEHOLDERS.items():
    _f = ROOT / _out
    if not _f.is_file() or _f.read_text(encoding="utf-8").startswith(MARKER):
        _placeholder(_out, _title, _what)
