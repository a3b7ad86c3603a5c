"""The one error the docs build stops on: a result file a page needs is missing or malformed."""

from __future__ import annotations


class DocsInputError(Exception):
    """`<file>: <problem> (needed by <page>)`, printed as one line; the build then writes nothing."""

    def __init__(self, file: str, page: str, problem: str) -> None:
        super().__init__(f"{file}: {problem} (needed by {page})")
        self.file, self.page, self.problem = file, page, problem
