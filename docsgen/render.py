"""Templates to pages: a Jinja environment whose globals are the registered helpers bound to the page's
`Results`, with undefined names an error (a template cannot print a blank where a number was meant)."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import jinja2

from docsgen.registry import HELPERS, MARKER, TEMPLATES, Page
from docsgen.results import Results


@functools.cache
def environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True, autoescape=False)


def rel(res: Results, target: str) -> str:
    """A link from the page being rendered to `target` (repo-relative)."""
    return os.path.relpath(target, os.path.dirname(res.page) or ".").replace(os.sep, "/")


def render_template(name: str, res: Results, **extra: object) -> str:
    env = environment()
    bound = {k: functools.partial(f, res) for k, f in HELPERS.items()}
    try:
        body = env.get_template(name).render(**bound, **extra)
    except jinja2.UndefinedError as e:
        raise jinja2.UndefinedError(f"{name}: {e}") from e
    return body


def header(source: str) -> str:
    return f"{MARKER} from {source}: edit that, not this file -->\n"


def template_page(t: Path) -> Page:
    name = str(t.relative_to(TEMPLATES)).replace(os.sep, "/")
    out = name[:-3]
    source = f"docsgen/templates/{name}"

    def render(res: Results) -> str:
        return header(source) + render_template(name, res)

    return Page(out, render, source)
