"""One small loader per local dataset: each yields unified prompt records (records.make_record).

A loader takes the datasets root and a BadInputLog and reads the MANIFEST files it names in `files`.
Message formatting here is frozen: it enters the ids that generations and the committed reference
trace are keyed by, so change it only together with a new reference trace.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lengthpred.data.readers import BadInputLog, field, iter_rows
from lengthpred.data.records import make_record, user
from lengthpred.models import serving_tokenizer
from lengthpred.registry import Registry

Record = dict[str, Any]
Loader = Callable[[Path, BadInputLog], Iterator[Record]]


@dataclass(frozen=True)
class Source:
    name: str
    files: tuple[str, ...]
    load: Loader


SOURCES: Registry[Source] = Registry("data source")


def source(name: str, *files: str) -> Callable[[Loader], Loader]:
    def deco(fn: Loader) -> Loader:
        SOURCES.register(name)(Source(name, tuple(files), fn))
        return fn

    return deco


def _rows(root: Path, rel: str, log: BadInputLog, *names: str) -> Iterator[tuple[str, dict, list]]:
    """(where, row, [values of names]) with missing fields reported through log."""
    for where, row in iter_rows(root / rel, log):
        vals = [field(row, n, where, log) for n in names]
        if any(v is None for v in vals):
            continue
        yield where, row, vals


def _join(*parts: str) -> str:
    return "\n\n".join(p.strip() for p in parts if p and p.strip())


# ---- math ----
@source("gsm8k", "gsm8k/test.jsonl", "gsm8k/train.jsonl")
def _gsm8k(root: Path, log: BadInputLog) -> Iterator[Record]:
    for rel in SOURCES.get("gsm8k").files:
        for _, _, (q, a) in _rows(root, rel, log, "question", "answer"):
            yield make_record("gsm8k", "math", user(q), category=f"gsm8k/{Path(rel).stem}", reference=a)


@source("math500", "math/math500_test.jsonl")
def _math500(root: Path, log: BadInputLog) -> Iterator[Record]:
    for _, row, (p, s) in _rows(root, "math/math500_test.jsonl", log, "problem", "solution"):
        yield make_record("math500", "math", user(p), category=f"math500/{row.get('type', '')}", reference=s)


@source("math", "math/math_test.jsonl")
def _math(root: Path, log: BadInputLog) -> Iterator[Record]:
    for _, row, (p, s) in _rows(root, "math/math_test.jsonl", log, "problem", "solution"):
        yield make_record("math", "math", user(p), category=f"math/{row.get('type', '')}", reference=s)


# ---- code ----
@source("humaneval", "humaneval/HumanEval.jsonl.gz")
def _humaneval(root: Path, log: BadInputLog) -> Iterator[Record]:
    for _, row, (p,) in _rows(root, "humaneval/HumanEval.jsonl.gz", log, "prompt"):
        text = f"Complete the following Python function.\n\n```python\n{p.rstrip()}\n```"
        yield make_record("humaneval", "code", user(text), reference=row.get("canonical_solution", ""))


@source("mbpp", "mbpp/mbpp.jsonl")
def _mbpp(root: Path, log: BadInputLog) -> Iterator[Record]:
    for _, row, (t,) in _rows(root, "mbpp/mbpp.jsonl", log, "text"):
        tests = "\n".join(row.get("test_list") or [])
        text = _join(t, f"Your code should pass these tests:\n\n{tests}" if tests else "")
        yield make_record("mbpp", "code", user(text), reference=row.get("code", ""))


@source("codealpaca", "codealpaca/code_alpaca_2k.json")
def _codealpaca(root: Path, log: BadInputLog) -> Iterator[Record]:
    for _, row, (ins, out) in _rows(root, "codealpaca/code_alpaca_2k.json", log, "instruction", "output"):
        yield make_record("codealpaca", "code", user(_join(ins, row.get("input", ""))), reference=out)


# ---- mixed / chat ----
DOLLY_DOMAIN = {
    "general_qa": "chat", "brainstorming": "chat", "classification": "chat",
    "open_qa": "qa", "closed_qa": "qa", "information_extraction": "qa",
    "creative_writing": "writing", "summarization": "summarization",
}


@source("dolly", "dolly/dolly_test.json", "dolly/dolly_validate.json")
def _dolly(root: Path, log: BadInputLog) -> Iterator[Record]:
    for rel in SOURCES.get("dolly").files:
        for where, row, (ins, cat) in _rows(root, rel, log, "instruction", "category"):
            if cat not in DOLLY_DOMAIN:
                log.bad("unknown category", where, f"dolly category {cat!r}")
                continue
            text = _join(ins, row.get("context", ""))
            yield make_record("dolly", DOLLY_DOMAIN[cat], user(text), category=f"dolly/{cat}",
                              reference=row.get("response", ""))


@source("sharegpt", "sharegpt/sharegpt_validate.json")
def _sharegpt(root: Path, log: BadInputLog) -> Iterator[Record]:
    """First human turn only: later turns depend on an assistant reply the serving model did not write."""
    for where, _, (conv,) in _rows(root, "sharegpt/sharegpt_validate.json", log, "conversations"):
        first = next((t for t in conv if t.get("from") == "human"), None)
        if first is None:
            log.bad("missing field", where, "no human turn in 'conversations'")
            continue
        nxt = conv[conv.index(first) + 1]["value"] if conv.index(first) + 1 < len(conv) else ""
        yield make_record("sharegpt", "chat", user(first.get("value", "")), reference=nxt)


@source("lima", "lima/lima.json")
def _lima(root: Path, log: BadInputLog) -> Iterator[Record]:
    """LIMA's multi-turn items keep their history as real (user, assistant) turns."""
    for _, row, (ins, out) in _rows(root, "lima/lima.json", log, "instruction", "output"):
        msgs: list[dict[str, str]] = []
        for pair in row.get("history") or []:
            msgs += [{"role": "user", "content": pair[0]}, {"role": "assistant", "content": pair[1]}]
        msgs.append({"role": "user", "content": _join(ins, row.get("input", ""))})
        yield make_record("lima", "chat", msgs, reference=out)


ALPACA_EVAL_MODELS = ("gpt4_1106_preview", "gpt4_1106_preview_concise", "gpt4_1106_preview_verbose",
                      "Meta-Llama-3-8B-Instruct", "alpaca-7b", "Mistral-7B-Instruct-v0.2")


def token_counts(texts: list[str]) -> list[int]:
    """Output lengths in tokens of the embedded SmolLM2 tokenizer (not the generating model's own)."""
    tok = serving_tokenizer()
    return [len(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"]] if texts else []


def _alpaca_eval(name: str, model: str) -> None:
    """The 805 instructions (same ids from every model file); lengths: that model's output, SmolLM2 tokens."""
    rel = f"alpaca_eval/{model}.json"

    @source(name, rel)
    def _load(root: Path, log: BadInputLog) -> Iterator[Record]:
        rows = [(row, ins, out) for _, row, (ins, out) in _rows(root, rel, log, "instruction", "output")]
        for (row, ins, out), n in zip(rows, token_counts([str(o) for _, _, o in rows]), strict=True):
            yield make_record("alpaca_eval", "chat", user(ins), category=f"alpaca_eval/{row.get('dataset', '')}",
                              reference=out, lengths=[n], length_model=f"alpaca_eval:{model}@smollm2-tokens")


_alpaca_eval("alpaca_eval", ALPACA_EVAL_MODELS[0])
for _m in ALPACA_EVAL_MODELS:
    _alpaca_eval(f"alpaca_eval:{_m}", _m)


@source("mt_bench", "mt_bench/question.jsonl")
def _mt_bench(root: Path, log: BadInputLog) -> Iterator[Record]:
    """First turn only (the second asks about the model's own first answer)."""
    for _, row, (turns,) in _rows(root, "mt_bench/question.jsonl", log, "turns"):
        yield make_record("mt_bench", "chat", user(turns[0]), category=f"mt_bench/{row.get('category', '')}")


def _arena(name: str, rel: str, domains: dict[str, str]) -> None:
    @source(name, rel)
    def _load(root: Path, log: BadInputLog) -> Iterator[Record]:
        for _, row, (p,) in _rows(root, rel, log, "prompt"):
            sub = row.get("subcategory") or row.get("category") or ""
            yield make_record(name, domains.get(sub, "chat"), user(p), category=f"{name}/{sub}")


_arena("arena_hard_v0.1", "arena_hard/v0.1_question.jsonl", {})
_arena("arena_hard_v2", "arena_hard/v2_question.jsonl",
       {"coding": "code", "math": "math", "creative_writing": "writing"})


# ---- writing ----
def _longbench_write(name: str, rel: str) -> None:
    # both files emit source "longbench_write", so the English prompts get the same ids from either
    @source(name, rel)
    def _load(root: Path, log: BadInputLog) -> Iterator[Record]:
        for _, row, (p,) in _rows(root, rel, log, "prompt"):
            yield make_record("longbench_write", "writing", user(p),
                              category=f"longbench_write/{row.get('type', '')}")


_longbench_write("longbench_write_en", "longwriter/longbench_write_en.jsonl")
_longbench_write("longbench_write", "longwriter/longbench_write.jsonl")


# ---- summarization ----
def _prompt_completion(name: str, rel: str, domain: str) -> None:
    @source(name, rel)
    def _load(root: Path, log: BadInputLog) -> Iterator[Record]:
        for _, row, (p,) in _rows(root, rel, log, "prompt"):
            ref = str(row.get("completion", "")).replace("<|endoftext|>", "")
            yield make_record(name, domain, user(p), reference=ref)


_prompt_completion("cnn_dailymail", "summarization/cnn_dailymail_news_summary.jsonl", "summarization")
_prompt_completion("multi_news", "summarization/multi_news_distill.jsonl", "summarization")
_prompt_completion("gigaword", "summarization/gigaword_tldr.jsonl", "summarization")


LEVAL = {"gov_report_summ": "summarization", "news_summ": "summarization",
         "multidoc_qa": "qa", "financial_qa": "qa"}


@source("leval", *(f"leval/{t}.jsonl" for t in LEVAL))
def _leval(root: Path, log: BadInputLog) -> Iterator[Record]:
    """One prompt per (document, instruction): the long input, then the question."""
    for task, domain in LEVAL.items():
        for _, _, (doc, ins, outs) in _rows(root, f"leval/{task}.jsonl", log, "input", "instructions", "outputs"):
            for i, q in enumerate(ins):
                yield make_record("leval", domain, user(_join(doc, q)), category=f"leval/{task}",
                                  reference=outs[i] if i < len(outs) else "")


# ---- qa ----
@source("truthfulqa", "truthfulqa/TruthfulQA.csv")
def _truthfulqa(root: Path, log: BadInputLog) -> Iterator[Record]:
    for _, row, (q,) in _rows(root, "truthfulqa/TruthfulQA.csv", log, "Question"):
        yield make_record("truthfulqa", "qa", user(q), category=f"truthfulqa/{row.get('Category', '')}",
                          reference=row.get("Best Answer", ""))


@source("nq_open", "nq_open/NQ-open.dev.jsonl")
def _nq_open(root: Path, log: BadInputLog) -> Iterator[Record]:
    for _, _, (q, a) in _rows(root, "nq_open/NQ-open.dev.jsonl", log, "question", "answer"):
        yield make_record("nq_open", "qa", user(q), reference=a[0] if a else "")


def manifest_files(root: Path) -> list[str]:
    """The `file` entries of root/MANIFEST.json."""
    return [e["file"] for e in json.loads((root / "MANIFEST.json").read_text())]
