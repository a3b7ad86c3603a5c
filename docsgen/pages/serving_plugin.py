"""The slot for the vLLM plugin campaign's results page (`vllm serve` with lengthpred's plugin, measured by
`vllm bench serve`): docs/results/serving-plugin.md.

To fill it: commit the campaign's result rows under docs/results/data/serving-plugin/ (or a run folder under
data/reference/ with a `Producer` that turns it into rows, as docsgen/pages/serving.py does), and replace
`render` below with the page: tables through `docsgen.pages.helpers.table`, numbers through `Results.csv`, each
statistic's unit in its label. Until then the page says that no campaign is committed.
"""

from __future__ import annotations

from docsgen.registry import page
from docsgen.render import header
from docsgen.results import Results

OUT = "docs/results/serving-plugin.md"


@page(OUT)
def render(res: Results) -> str:
    return header("docsgen/pages/serving_plugin.py") + (
        "# The vLLM plugin campaign\n\n"
        "No campaign of the vLLM plugin is committed yet. When it is, this page renders its `vllm bench serve` "
        "results from the committed rows, beside the [engine experiments](serving/index.md) run with the "
        "project's own replay loop. How to run the plugin: [serving with vLLM](../how-to/serve-with-vllm.md).\n")
