"""The unified prompt record and its content-derived id (see docs/DESIGN.md "Prompt record")."""

from __future__ import annotations

import hashlib
import json
from typing import Any

DOMAINS = ("chat", "math", "code", "writing", "summarization", "qa", "long")
COLUMNS = ("id", "source", "domain", "category", "messages", "reference", "lengths", "length_model")


def canonical_messages(messages: list[dict[str, str]]) -> str:
    """Key-sorted, compact, non-ASCII-preserving JSON: the exact bytes that enter the id."""
    return json.dumps(messages, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def prompt_id(source: str, messages: list[dict[str, str]]) -> str:
    """16 hex chars of sha1(source + canonical JSON of messages); stable across runs and machines."""
    return hashlib.sha1((source + canonical_messages(messages)).encode("utf-8")).hexdigest()[:16]


def content_key(messages: list[dict[str, str]]) -> str:
    """Id of the prompt text alone (no source): finds the same prompt arriving from two sources."""
    return hashlib.sha1(canonical_messages(messages).encode("utf-8")).hexdigest()[:16]


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text.strip()}]


def make_record(
    source: str,
    domain: str,
    messages: list[dict[str, str]],
    *,
    category: str | None = None,
    reference: str = "",
    lengths: list[int] | None = None,
    length_model: str = "",
) -> dict[str, Any]:
    """One prompt record; contents are stripped so whitespace noise never changes an id."""
    msgs = [{"role": m["role"], "content": m["content"].strip()} for m in messages]
    return {
        "id": prompt_id(source, msgs),
        "source": source,
        "domain": domain,
        "category": category or source,
        "messages": msgs,
        "reference": (reference or "").strip(),
        "lengths": [int(x) for x in (lengths or [])],
        "length_model": length_model if lengths else "",
    }


def prompt_chars(record: dict[str, Any]) -> int:
    """Characters of all message contents: the demo's cheap proxy for prompt tokens."""
    return sum(len(m["content"]) for m in record["messages"])


def is_empty(record: dict[str, Any]) -> bool:
    return not record["messages"] or not any(m["content"] for m in record["messages"] if m["role"] == "user")
