"""The results tree: which study each table page belongs to, and where its rows and page live.

One folder per study under docs/results/ (the page a reader opens is its index.md); its tables' rows under
docs/results/data/<study>/ as CSV, next to the pages that render them, so the site serves the rows a reader can
download beside every table.
"""

from __future__ import annotations

from dataclasses import dataclass

RESULTS = "docs/results"
DATA = f"{RESULTS}/data"


@dataclass(frozen=True)
class Study:
    slug: str  # folder under docs/results/
    title: str
    question: str  # one line: what the study asks


STUDIES = {s.slug: s for s in (
    Study("t1-in-domain", "T1: in-domain prediction", "How well does each head rank and size answer lengths on "
          "prompts of the domains it was trained on, against baselines and the noise ceiling?"),
    Study("t2-cross-domain", "T2: cross-domain prediction", "How much does a head lose when it is trained on one "
          "domain and scored on another?"),
    Study("t3-online", "T3: online adaptation", "Does a readout updated by recursive least squares from completed "
          "requests recover what a domain shift costs?"),
    Study("t4-subsets", "T4: ForeLen-style subsets", "How large are the errors on long, reasoning and RL-style "
          "prompt subsets?"),
    Study("t5-scheduling", "T5: scheduling in the simulator", "What does each predictor buy a length-aware "
          "scheduler in a calibrated continuous-batching simulator, on synthetic and real traces?"),
    Study("t6-costs", "T6: costs", "What does each predictor cost: extraction overhead, prediction and update "
          "latency, size?"),
    Study("t7-castillo", "T7: CASTILLO, 13 serving models", "Which models' answer lengths are predictable from "
          "their own prefill, and how close to each model's ceiling?"),
    Study("serving", "Serving on a real vLLM engine", "What does predicted-SJF buy on a real vLLM engine, in "
          "median and tail, and does the simulator forecast it?"),
    Study("refinement", "Refinement while decoding", "Do predictions refreshed during decoding rank the remaining "
          "length better, and what do they buy a scheduler?"),
    Study("distributions", "Distributions instead of points", "Do censoring-aware distributional heads and "
          "uncertainty-using schedulers beat point predictions?"),
)}

# the flat docs/*.md pages of earlier rounds, by study (docsgen.convert moved them once)
FLAT_PAGES: dict[str, tuple[str, ...]] = {
    "t1-in-domain": ("bench_T1", "demo_T1", "bench_T1_protocol", "bench_selection", "demo_selection",
                     "bench_candidates", "demo_candidates", "bench_proxy_seeds", "bench_paired_seeds",
                     "bench_layer_curve", "bench_readout_sweep", "demo_readout_sweep", "bench_concat",
                     "bench_egtp_width", "bench_estp_width", "bench_attention_heads", "demo_attention_heads",
                     "bench_sweep", "demo_sweep", "bench_gap", "bench_lora", "bench_lora_pairs"),
    "t2-cross-domain": ("bench_T2", "demo_T2"),
    "t3-online": ("bench_T3", "demo_T3"),
    "t4-subsets": ("bench_T4", "demo_T4"),
    "t5-scheduling": ("bench_T5", "demo_T5", "bench_traces", "demo_traces", "bench_batching", "demo_batching",
                      "bench_spec", "spec_acceptance"),
    "t6-costs": ("bench_T6", "demo_T6", "bench_T6_lora"),
    "t7-castillo": ("castillo_T7", "castillo_T7_summary", "castillo_T7_datasets", "castillo_T7_ceilings",
                    "castillo_T7_median", "castillo_T7_pairs"),
    "serving": ("serve_summary", "serve_fidelity_overview", "serve_step_excess", "serve_workloads",
                "serve_stall_anatomy", "serve_steadiness", "serve_fidelity_tracking", "serve_demo_engine10",
                "serve_load08", "serve_load08_blas1", "serve_pf10", "serve_pf10_blas1", "serve_natural10",
                "serve_natural10_blas1", "serve_gamma10", "serve_trace10", "serve_trace10_blas1", "serve_cap8_10",
                "serve_cap16_10", "serve_cap16_120", "serve_bench_pool10", "serve_bench_pool10_pf", "serve_aging10",
                "serve_tie10"),
    "refinement": ("bench_decode_curve", "demo_decode_curve", "bench_decode_online", "demo_decode_online",
                   "bench_refined_measured", "demo_refined_measured", "demo_refined_sched"),
    "distributions": ("bench_dist", "demo_dist"),
}


def study_of(stem: str) -> str:
    """The study folder of a flat page's stem (`bench_T1` → `t1-in-domain`)."""
    for slug, stems in FLAT_PAGES.items():
        if stem in stems:
            return slug
    raise KeyError(f"{stem}: no study holds this page; known: {sorted(s for v in FLAT_PAGES.values() for s in v)}")


def page_path(stem: str) -> str:
    """Where a flat page now lives: docs/results/<study>/<stem>.md."""
    return f"{RESULTS}/{study_of(stem)}/{stem}.md"
