"""CASTILLO (prompts with 10 sampled output lengths per open model) as registry sources.

`castillo:<model>` reads that model's files of all seven datasets through the generic trace reader,
exactly as a user would with data=trace (prompt_text / output_sizes). Record source is `castillo` for
every model, so one prompt has one id whichever model's lengths come with it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lengthpred.data.readers import BadInputLog
from lengthpred.data.sources import DOLLY_DOMAIN, SOURCES, Source
from lengthpred.data.trace import read_trace

DATASETS = {"Alpaca": "chat", "Apps": "code", "BigCodeBench": "code", "DS1000": "code",
            "DollyDataset": "dolly", "Mbpp": "code", "ShareGPT": "chat"}
MODELS = ("Qwen--Qwen2.5-14B-Instruct", "Qwen--Qwen2.5-32B-Instruct", "Qwen--Qwen2.5-7B-Instruct-1M",
          "google--gemma-3-12b-it", "google--gemma-3-4b-it", "meta-llama--Llama-3.1-8B-Instruct",
          "meta-llama--Llama-3.2-1B-Instruct", "meta-llama--Llama-3.2-3B-Instruct",
          "meta-llama--Llama-3.3-70B-Instruct", "microsoft--Phi-4-mini-instruct",
          "mistralai--Ministral-8B-Instruct-2410", "mistralai--Mistral-7B-Instruct-v0.3",
          "mistralai--Mixtral-8x7B-Instruct-v0.1")
MISSING = {("Apps", "meta-llama--Llama-3.2-1B-Instruct"), ("ShareGPT", "meta-llama--Llama-3.2-1B-Instruct"),
           ("ShareGPT", "microsoft--Phi-4-mini-instruct")}


def castillo_domain(dataset: str, row: dict[str, Any]) -> str:
    dom = DATASETS.get(dataset, "chat")
    return DOLLY_DOMAIN.get(str(row.get("category")), "chat") if dom == "dolly" else dom


def _register(model: str) -> None:
    files = tuple(f"castillo/validate/{d}/{model}.jsonl" for d in DATASETS if (d, model) not in MISSING)

    def load(root: Path, log: BadInputLog) -> Iterator[dict[str, Any]]:
        for rel in files:
            dataset = rel.split("/")[2]
            for r in read_trace([root / rel], "prompt_text", "output_sizes", log, source="castillo",
                                length_model=f"castillo:{model}",
                                domain_map=lambda _d, row, ds=dataset: castillo_domain(ds, row)):
                r["category"] = f"castillo/{dataset}"
                yield r

    SOURCES.register(f"castillo:{model}")(Source(f"castillo:{model}", files, load))


for _m in MODELS:
    _register(_m)
