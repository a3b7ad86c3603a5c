"""Lab instruments: diagnostics written to explain this machine's serving measurements (speed steadiness, stalls,
TTFT anatomy, step excess, gain fidelity, the fidelity overview). Not part of the product path; the scripts
`scripts/serve_*_anatomy.py`, `serve_step_excess.py`, `serve_fidelity_overview.py` and `serve_drift_sources.py`
and the steadiness benchmarks read them."""
