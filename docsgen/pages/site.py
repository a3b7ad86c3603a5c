"""mkdocs.yml: the site's settings and its navigation, the results part listed from the study registry, so a
page added to a study appears in the menu without editing YAML by hand.

Why mkdocs-material: it reads the Markdown the project already writes (every results page is plain Markdown
that GitHub renders too), builds in seconds, fails on a broken link in strict mode, and with mkdocstrings it
renders the API pages from the docstrings by static analysis (no import of torch or vLLM). Sphinx would need
reStructuredText or MyST and autodoc's imports.
"""

from __future__ import annotations

import yaml

from docsgen.pages.serving import FOLDERS
from docsgen.pages.study_pages import page_title
from docsgen.registry import PAGES, page
from docsgen.render import header
from docsgen.results import Results
from docsgen.studies import FLAT_PAGES, RESULTS, STUDIES, page_path

API = {  # API page -> modules it documents (docs/reference/api/<page>.md is written by api_page)
    # a package documents what it re-exports (__all__); a module is listed beside it only for what it keeps
    "heads": ("lengthpred.heads",),
    "online": ("lengthpred.online", "lengthpred.online.service"),
    "features": ("lengthpred.features", "lengthpred.features.capture", "lengthpred.features.pooling"),
    "metrics-and-eval": ("lengthpred.metrics", "lengthpred.eval"),
    "simulator": ("lengthpred.sched",),
    "serving": ("lengthpred.serve", "lengthpred.serve.paired", "lengthpred.serve.summary",
                "lengthpred.serve.featurize"),
    "vllm-plugin": ("lengthpred.vllm_plugin.settings", "lengthpred.vllm_plugin.policy",
                    "lengthpred.online.readout_file"),
    "data": ("lengthpred.data", "lengthpred.data.trace", "lengthpred.targets"),
    "distributions": ("lengthpred.distributions",),
    "names-and-errors": ("lengthpred.names", "lengthpred.registry", "lengthpred.errors"),
}
API_TITLES = {"heads": "Heads", "online": "Online adaptation", "features": "Prefill features",
              "metrics-and-eval": "Metrics and evaluation", "simulator": "Scheduling simulator",
              "serving": "Serving on vLLM", "vllm-plugin": "The vLLM plugin", "data": "Data and targets", "distributions": "Distributions",
              "names-and-errors": "Names, registries, errors"}


def _api_page(name: str, modules: tuple[str, ...]) -> None:
    @page(f"docs/reference/api/{name}.md", source="docsgen/pages/site.py", committed=False)
    def render(res: Results) -> str:
        body = "\n\n".join(f"::: {m}" for m in modules)
        return header("docsgen/pages/site.py") + f"# {API_TITLES[name]}\n\n{body}\n"


for _n, _m in API.items():
    _api_page(_n, _m)


@page("docs/reference/api/index.md", source="docsgen/pages/site.py")
def api_index(res: Results) -> str:
    items = "\n".join(f"- [{API_TITLES[n]}]({n}.md): " + ", ".join(f"`{m}`" for m in mods) for n, mods in API.items())
    return header("docsgen/pages/site.py") + (
        "# Python API\n\nGenerated from the docstrings (mkdocstrings, by static analysis: nothing is imported). "
        "Every head follows scikit-learn's estimator protocol; [heads from Python](../../how-to/heads-from-python.md) "
        f"shows them in use.\n\n{items}\n")


def _strip(path: str) -> str:
    return path.removeprefix("docs/")


def _study_nav(slug: str) -> dict:
    items: list = [_strip(f"{RESULTS}/{slug}/index.md")]
    for stem in FLAT_PAGES[slug]:
        out = page_path(stem)
        if out in PAGES:
            title = f"Folder {stem}" if stem in FOLDERS else page_title(out)  # a folder's own title is a paragraph
            items.append({title: _strip(out)})
    return {STUDIES[slug].title: items}


def nav() -> list:
    return [
        {"Home": "index.md"},
        {"Getting started": "getting-started.md"},
        {"How-to": [{"Your own trace, end to end": "how-to/own-trace.md"},
                    {"Choosing a layer": "how-to/choose-layer.md"},
                    {"Heads from Python": "how-to/heads-from-python.md"},
                    {"Serving with vLLM": "how-to/serve-with-vllm.md"},
                    {"GPUs and Slurm": "how-to/gpu-and-slurm.md"}]},
        {"Concepts": [{"The heads and their papers": "concepts/heads.md"},
                      {"The selection protocol": "concepts/selection.md"},
                      {"The noise ceiling": "concepts/noise-ceiling.md"},
                      {"Censoring": "concepts/censoring.md"},
                      {"Design: stages and artefacts": "DESIGN.md"}]},
        {"Results": ["results/index.md", *(_study_nav(s) for s in STUDIES),
                     {"The vLLM plugin campaign": "results/serving-plugin.md"}]},
        {"Reference": [{"Python API": ["reference/api/index.md",
                                       *({API_TITLES[n]: f"reference/api/{n}.md"} for n in API)]},
                       {"Configuration": "reference/config.md"},
                       {"How these docs are built": "reference/docs.md"}]},
        {"Log": ["log/index.md", {"Changes since the site": "log/changes.md"}, {"Serving notes": "log/serving-notes.md"},
                 {"Demo results, round 3": "log/demo-results.md"}]},
    ]


SETTINGS = {
    "site_name": "lengthpred",
    "site_description": "LLM output-length prediction from the serving model's own prefill, and what it buys a "
                        "length-aware scheduler",
    "docs_dir": "docs",
    "site_dir": "site",
    "strict": True,
    # no navigation.sections: a study's pages stay folded under it until opened
    "theme": {"name": "material", "features": ["navigation.tabs", "navigation.indexes", "navigation.top", "toc.integrate",
                                               "search.suggest", "content.code.copy"]},
    "extra_css": ["stylesheets/extra.css"],
    "markdown_extensions": ["admonition", "attr_list", "tables", "footnotes", {"toc": {"permalink": True}},
                            "pymdownx.superfences", "pymdownx.details"],
    "plugins": ["search", {"mkdocstrings": {"default_handler": "python", "handlers": {"python": {
        "paths": ["."],
        "options": {"docstring_style": "google", "show_source": False, "show_root_heading": True,
                    "show_root_full_path": True, "members_order": "source", "filters": ["!^_"],
                    "merge_init_into_class": True, "show_signature_annotations": True,
                    "separate_signature": True, "heading_level": 2, "show_submodules": False}}}}}],
    "validation": {"links": {"not_found": "warn", "absolute_links": "warn", "unrecognized_links": "warn",
                             "anchors": "warn"}},
    "exclude_docs": "results/data/KEYS.json\nresults/data/**/*.md\n",  # producers' fragments: pages include them
}


@page("mkdocs.yml", source="docsgen/pages/site.py")
def mkdocs_yml(res: Results) -> str:
    text = yaml.safe_dump({**SETTINGS, "nav": nav()}, sort_keys=False, allow_unicode=True, width=120)
    return header("docsgen/pages/site.py", comment="yaml") + text
