import pytest

from lengthpred.errors import DataError
from lengthpred.prompting import PromptTooLong, encode_prompt

MSG = [{"role": "user", "content": "Write a long essay about the sea. " * 20}]


def test_encode_matches_chat_template(tokenizer):
    ids = encode_prompt(tokenizer, MSG)
    text = tokenizer.decode(ids)
    assert text.endswith("<|im_start|>assistant\n") and "essay about the sea" in text


def test_over_long_prompt_rejected_or_truncated(tokenizer):
    n = len(encode_prompt(tokenizer, MSG))
    with pytest.raises(PromptTooLong, match="prompt p1: .* > max_prompt_tokens=50"):
        encode_prompt(tokenizer, MSG, max_prompt_tokens=50, prompt_id="p1")
    ids = encode_prompt(tokenizer, MSG, max_prompt_tokens=50, overflow="truncate")
    assert len(ids) == 50 < n
    assert tokenizer.decode(ids).endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize("msgs", [[], [{"role": "user", "content": "   "}]])
def test_empty_prompt_rejected(tokenizer, msgs):
    with pytest.raises(DataError, match="empty prompt"):
        encode_prompt(tokenizer, msgs, prompt_id="e")
