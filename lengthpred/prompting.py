"""Turn a prompt record's chat messages into the serving model's input ids, identically for every stage.

Generation and feature extraction must see the same tokens, so both call `encode_prompt`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypeVar

from lengthpred.errors import DataError

Overflow = Literal["reject", "truncate"]
T = TypeVar("T")


class PromptTooLong(DataError):
    """A templated prompt longer than the allowed budget under overflow='reject'."""


def encode_prompt(
    tokenizer,
    messages: Sequence[dict],
    *,
    max_prompt_tokens: int | None = None,
    overflow: Overflow = "reject",
    prompt_id: str = "?",
) -> list[int]:
    """Chat-template `messages` (generation prompt appended) into token ids.

    Over-long prompts: `reject` raises PromptTooLong naming the id; `truncate` keeps the first
    `max_prompt_tokens - 32` ids of the templated text and the last 32 (the assistant header and the
    end of the user turn), so the model still sees where its answer starts.
    """
    if not messages or not any(str(m.get("content", "")).strip() for m in messages):
        raise DataError(f"prompt {prompt_id}: empty prompt")
    ids = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    ids = list(ids)
    if max_prompt_tokens is None or len(ids) <= max_prompt_tokens:
        return ids
    if overflow == "reject":
        raise PromptTooLong(f"prompt {prompt_id}: {len(ids)} tokens > max_prompt_tokens={max_prompt_tokens}")
    if overflow != "truncate":
        raise DataError(f"overflow={overflow!r}: use 'reject' or 'truncate'")
    return truncate(ids, max_prompt_tokens)


def truncate(seq: Sequence[T], max_prompt_tokens: int) -> list[T]:
    """The positions `encode_prompt` keeps of an over-long prompt (ids, or anything aligned with them)."""
    if len(seq) <= max_prompt_tokens:
        return list(seq)
    tail = min(32, max_prompt_tokens // 2)
    return list(seq[: max_prompt_tokens - tail]) + list(seq[len(seq) - tail :])
