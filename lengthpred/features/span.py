"""Which prompt tokens are the messages' own content, and which the chat template's.

Every prompt of a chat model starts with the same template tokens (SmolLM2 adds a 22-token default system
block), and role markers and the assistant header surround each message. A pooling that can put weight on
them pools a constant (AUDIT.md, "shared template tokens"); `features.span=content` pools over the
user/assistant content tokens only.

How the content is found, for any template: the template is rendered twice, once with the messages and
once with each content replaced by a sentinel. The sentinel rendering splits into the template's own text
pieces; walking the real rendering piece by piece gives each content's character span (as written, or
stripped, which is what templates that `trim` do). Token offsets from the tokenizer then mark the tokens
that overlap a content span. The offsets tokenization must reproduce the template's ids exactly, else
extraction stops with a one-line error.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from lengthpred.errors import ConfigError, DataError
from lengthpred.prompting import Overflow, encode_prompt, truncate

CONTENT_ROLES = ("user", "assistant")  # a system message, given or the template's default, is left out
_MARK = re.compile("\ue000(\\d+)\ue001")  # private-use code points: never in real text


def _rendered(tokenizer: Any, messages: Sequence[dict]) -> str:
    return tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)


def content_char_spans(tokenizer: Any, messages: Sequence[dict], prompt_id: str = "?") -> tuple[str, list[tuple[int, int]]]:
    """The templated text and the [start, end) character spans of its user/assistant contents."""
    text = _rendered(tokenizer, messages)
    skeleton = _rendered(tokenizer, [{**m, "content": f"\ue000{i}\ue001"} for i, m in enumerate(messages)])
    parts = _MARK.split(skeleton)  # [piece, index, piece, index, ..., piece]
    pieces, order = parts[0::2], [int(i) for i in parts[1::2]]
    spans, pos = [], 0
    for k, i in enumerate(order):
        if not text.startswith(pieces[k], pos):
            break
        pos += len(pieces[k])
        content = str(messages[i].get("content", ""))
        nxt = pieces[k + 1]
        for cand in (content, content.strip()):
            end = pos + len(cand)
            if text.startswith(cand, pos) and text.startswith(nxt, end):
                break
        else:
            break
        if messages[i].get("role") in CONTENT_ROLES and end > pos:
            spans.append((pos, end))
        pos = end
    else:
        if text[pos:] == pieces[-1]:
            return text, spans
    raise DataError(f"prompt {prompt_id}: cannot locate the message contents in the chat template's text "
                    "(it rewrites them); extract with features.span=all")


def content_span(tokenizer: Any, messages: Sequence[dict], prompt_id: str = "?") -> tuple[list[int], list[bool]]:
    """Untruncated template ids and, per id, whether it belongs to a user/assistant content."""
    text, spans = content_char_spans(tokenizer, messages, prompt_id)
    try:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    except (NotImplementedError, ValueError, TypeError) as e:
        raise ConfigError(f"features.span=content needs a tokenizer with offsets ({type(e).__name__}: {e}); "
                          "use features.span=all") from None
    inside = [any(s < e and t > b for b, e in spans) for s, t in enc["offset_mapping"]]
    return list(enc["input_ids"]), inside


def encode_with_span(
    tokenizer: Any,
    messages: Sequence[dict],
    *,
    max_prompt_tokens: int | None = None,
    overflow: Overflow = "reject",
    prompt_id: str = "?",
) -> tuple[list[int], list[bool]]:
    """`encode_prompt`'s ids and the content mask aligned with them (truncated the same way)."""
    ids = encode_prompt(tokenizer, messages, max_prompt_tokens=max_prompt_tokens, overflow=overflow,
                        prompt_id=prompt_id)
    full, inside = content_span(tokenizer, messages, prompt_id)
    if max_prompt_tokens is not None:
        full, inside = truncate(full, max_prompt_tokens), truncate(inside, max_prompt_tokens)
    if full != ids:
        raise ConfigError(f"prompt {prompt_id}: the tokenizer's offsets do not reproduce the chat template's ids, "
                          "so the content tokens cannot be found; use features.span=all")
    return ids, inside
