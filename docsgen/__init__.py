"""The documentation's generator: `make docs` (`python -m docsgen`) renders README.md and every generated page
under docs/ from the committed result files, so no number in them is typed by hand.

It is tooling, not product: it lives beside `lengthpred`, not inside it, so an installed wheel does not carry
it, and it may read any layer of `lengthpred` while `lengthpred` never imports it (an import-linter contract).

- `registry`: the pages and the producers. A *page* is a Jinja template under `docsgen/templates/` (its path
  mirrors the file it writes) or a Python function; a *producer* runs a slow generator (a serve script over
  the committed run folders) and commits its output as result data, rerun only when its inputs' key changes.
- `results`: reading a committed result file on behalf of one page; a file missing or malformed stops the
  build with one line naming the file and the page.
- `mdtable`: Markdown tables to and from rows; `convert`: a page of tables into rows and a template.
- `build`: render everything in memory, then write it all (or, with `--check`, compare it with the tree).
"""
