"""The stages a `lengthpred <stage>` command runs: its name (the script's, `scripts/<name>.py`) → the stage function
(`module:function`, called as `fn(cfg, run_dir)`), so an installed wheel, which has no `scripts/`, runs the same
stage as the script does (tests/test_command.py checks the table against every script). Plain strings: the
command imports only the stage it runs."""

from __future__ import annotations

STAGES: dict[str, str] = {
    "fetch_datasets": "lengthpred.stages.fetch:run_fetch_datasets",
    "prepare_model": "lengthpred.stages.model:run_prepare_model",
    "prepare_data": "lengthpred.stages.data:run_prepare_data",
    "generate": "lengthpred.stages.generate:run_generate",
    "extract": "lengthpred.stages.features:run_extract",
    "extract_decode": "lengthpred.stages.decode:run_extract_decode",
    "train": "lengthpred.stages.train:run_train",
    "stack": "lengthpred.stages.stack:run_stack",
    "sweep_features": "lengthpred.stages.sweep:run_sweep_features",
    "sweep_layers": "lengthpred.stages.readout_sweep:run_sweep_layers",
    "sweep_poolings": "lengthpred.stages.readout_sweep:run_sweep_poolings",
    "sweep_attention": "lengthpred.stages.attention_sweep:run_sweep_attention",
    "adapt": "lengthpred.stages.adapt:run_adapt",
    "decode_curve": "lengthpred.stages.decode:run_decode_curve",
    "decode_online": "lengthpred.stages.decode:run_decode_online",
    "measure_costs": "lengthpred.stages.costs:run_measure_costs",
    "measure_acceptance": "lengthpred.stages.acceptance:run_measure_acceptance",
    "simulate": "lengthpred.stages.simulate:run_simulate",
    "simulate_traces": "lengthpred.stages.traces:run_traces",
    "simulate_batching": "lengthpred.stages.batching:run_static_batching",
    "simulate_refined": "lengthpred.stages.refined:run_refined_sched",
    "simulate_spec": "lengthpred.stages.spec:run_spec",
    "evaluate": "lengthpred.stages.evaluate:run_evaluate",
    "evaluate_dist": "lengthpred.stages.dist:run_evaluate_dist",
    "make_tables": "lengthpred.stages.tables:run_make_tables",
    "castillo": "lengthpred.stages.castillo:run_castillo_stage",
    "castillo_within_bin": "lengthpred.stages.castillo_within_bin:run_castillo_within_bin",
    "serve": "lengthpred.stages.serve:run_serve",
    "serve_bench": "lengthpred.stages.serve_bench:run_serve_bench",
    "gap": "lengthpred.stages.gap:run_gap_stage",
    "demo": "lengthpred.pipeline:run_demo",  # every stage in order, cached (scripts/demo.py)
}
# what `lengthpred --help` says each group does
GROUPS: dict[str, tuple[str, ...]] = {
    "data and model": ("fetch_datasets", "prepare_model", "prepare_data", "generate"),
    "features": ("extract", "extract_decode"),
    "heads": ("train", "stack", "sweep_features", "sweep_layers", "sweep_poolings", "sweep_attention", "adapt",
              "decode_curve", "decode_online"),
    "scheduling and serving": ("simulate", "simulate_traces", "simulate_batching", "simulate_refined",
                               "simulate_spec", "measure_acceptance", "serve", "serve_bench"),
    "results": ("measure_costs", "evaluate", "evaluate_dist", "make_tables", "castillo", "castillo_within_bin",
                "gap"),
    "pipeline": ("demo",),
}
