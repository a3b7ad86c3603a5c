"""The lora head's cost against a plain prefill of the same prompts (docs/results/t6-costs/bench_T6.md), rendered
from the committed record of benchmarks/bench_lora_head.py (its `--out` file), with the machine and its load."""

from __future__ import annotations

from docsgen.pages.scale import measured_where
from docsgen.registry import helper
from docsgen.results import Results
from docsgen.studies import DATA

LORA_COST = f"{DATA}/t6-costs/lora_head_cost.json"


@helper
def lora_head_cost(res: Results) -> str:
    rec = res.json(LORA_COST)
    parts = rec["result"]["parts"]
    plain = {(r["threads"], r["lora_layers"]): r["tokens_per_s"] for r in parts if r["part"].startswith("plain")}
    rows = ["| part | torch threads | adapted layers | prompts | prompt tokens | seconds | tokens/s | "
            "time per token against a plain prefill | load average before / after |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in parts:
        ratio = plain[(r["threads"], r["lora_layers"])] / r["tokens_per_s"]
        rows.append(f"| {r['part']} | {r['threads']} | {r['lora_layers']} | {r['prompts']} | {r['tokens']:,} | "
                    f"{r['seconds']:.1f} | {r['tokens_per_s']:.0f} | {ratio:.2f}× | {r['load_before']:.2f} / "
                    f"{r['load_after']:.2f} |")
    return (measured_where(rec) + f"; `benchmarks/bench_lora_head.py`, layer {rec['settings']['layer']}, batches of "
            f"{rec['settings']['batch_size']} prompts, one timing per part (an upper bound on a shared machine).\n\n"
            + "\n".join(rows) + "\n")
