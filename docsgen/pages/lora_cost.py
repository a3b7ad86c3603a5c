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


LORA_FIT = f"{DATA}/t6-costs/lora_head_fit.json"


def planned_seeds(res: Results) -> int:
    """The seeds the lora head's bench fit runs over: `n_seeds` of conf/head/lora.yaml."""
    import yaml

    from docsgen.pages.configref import conf_dir

    return int(yaml.safe_load((conf_dir(res.root) / "head" / "lora.yaml").read_text())["n_seeds"])


@helper
def lora_head_fit(res: Results) -> str:
    """The lora head's bench fit per seed against the 90-minute goal and a plain prefill of its train prompts
    (benchmarks/record_lora_fit.py's record of the train runs)."""
    rec = res.json(LORA_FIT)
    r = rec["result"]
    rows = ["| seed | fit (min) | train prompt tokens per second of fit | fit in plain prefills of the train prompts | "
            "chosen on val | val Spearman | test Spearman | load average at its start |",
            "|---:|---:|---:|---:|---|---:|---:|---:|"]
    for s in r["seeds"]:
        chosen = ", ".join(f"{k} {v}" for k, v in sorted(s["selected"].items()))
        rows.append(f"| {s['random_state']} | {s['fit_minutes']:.1f} | {s['train_tokens_per_s']:.0f} | "
                    f"{s['plain_prefills_of_train']:.1f}× | {chosen} | {s['val_spearman']:.3f} | "
                    f"{s['test_spearman']:.3f} | {s['load_at_start']:.2f} |")
    runs = ("The seeds ran in one process: the later ones reuse the frozen layers' states the first computed, so the "
            "first seed's time is what one seed costs alone. " if r["one_process"] else
            "Each seed ran as its own process (a seed's time is what it costs alone). ")
    verdict = "met" if r["goal_met"] else "not met"
    return (measured_where(rec) + f"; {r['threads']} torch threads, {r['train_prompts']:,} train prompts "
            f"({r['train_prompt_tokens']:,} prompt tokens), {r['n_candidates']} candidates searched per seed on "
            f"{r['search']['n_search_train'] if r['search'] else 'every'} train prompts, then the chosen one refitted on "
            f"all. A plain prefill runs {r['plain_prefill_tokens_per_s']:.0f} prompt tokens/s on this machine (the "
            f"cost table above, median of its plain rows). {runs}Goal: at most {r['goal_minutes_per_seed']:.0f} min "
            f"per seed: **{verdict}** (slowest seed {r['max_minutes_per_seed']:.1f} min, {len(r['seeds'])} of {planned_seeds(res)} "
            "seeds fitted).\n\n" + "\n".join(rows) + "\n")
