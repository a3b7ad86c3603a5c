"""The sampled answers the decode features are read from: one per prompt, with its token ids."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lengthpred.errors import DataError


@dataclass(frozen=True)
class Answer:
    id: str
    token_ids: tuple[int, ...]  # the answer, EOS excluded
    capped: bool  # stopped by the cap (finish_reason "length"): its remaining length is the cap's, not its own
    prompt_tokens: int | None  # what generation encoded the prompt to (checked against the re-encoding)

    @property
    def length(self) -> int:
        return len(self.token_ids)


def _rows(answers: Any) -> Iterable[Mapping[str, Any]]:
    if hasattr(answers, "column_names"):
        if "token_ids" not in answers.column_names:
            raise DataError("answers have no token_ids column: regenerate them with scripts/generate.py "
                            "(generations store token ids since issue 27; the reference traces do not)")
        return answers
    return list(answers)


def select_answers(answers: Any, sample: int) -> dict[str, Answer]:
    """id → the answer with sample index `sample`; an answer without token ids is one line naming it."""
    out: dict[str, Answer] = {}
    for r in _rows(answers):
        if int(r.get("sample", 0)) != sample:
            continue
        pid = str(r["id"])
        toks = r.get("token_ids")
        if toks is None:
            raise DataError(f"answer {pid} (sample {sample}) has no token ids: decode features need them; "
                            "regenerate with scripts/generate.py")
        if pid in out:
            raise DataError(f"answer {pid} (sample {sample}) appears twice")
        if r.get("length") is not None and int(r["length"]) != len(toks):
            raise DataError(f"answer {pid}: length {r['length']} but {len(toks)} token ids")
        pt = r.get("prompt_tokens")
        out[pid] = Answer(pid, tuple(int(t) for t in toks), r.get("finish_reason") == "length",
                          None if pt is None else int(pt))
    if not out:
        raise DataError(f"no answers with sample index {sample}")
    return out


def answers_hash(answers: Mapping[str, Answer], ids: Iterable[str]) -> str:
    """sha1 over (id, token ids, capped) in id order: the answer half of the cache key."""
    h = hashlib.sha1()
    for pid in sorted(ids):
        a = answers[pid]
        h.update(json.dumps([pid, list(a.token_ids), a.capped]).encode())
    return h.hexdigest()
