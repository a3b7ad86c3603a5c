"""The stage layer: every "X for this config" of the project, and the one package that reads a Hydra config.

Scripts (`scripts/*.py`) call these modules; the library packages below take arrays and plain settings
objects and never import hydra or omegaconf (`make lint` checks both directions: pyproject.toml's
import-linter contracts). Importing this package imports none of its modules: each pulls in only what its
stage needs (`stages.simulate` never imports torch).

Where things come from:
- `locations`: where every artefact and output lives (`experiment_dir` = `paths.experiment_dir`,
  `outputs/<experiment_name>/`; `reference_path`, `generations_dir`).
- `targets`: the per-prompt targets of a config (`load_targets`, the one resolver of `targets_from`),
  the simulator's sampled lengths (`request_targets`), the noise ceiling's samples, `export_reference`.
- `runs`: the saved heads an experiment holds (`find_head_runs`); `locations`: where every output is.
- `features`: a config's feature settings, store folder and `ensure_features`.
- `heads`: a head config's class (`params._target_`), `build`, the feature it reads, `head_config(name)`, and
  the constructors' defaults every `conf/head/*.yaml` starts from (`register_head_params`).
- one module per stage: `data` (prepare, fetch), `model`, `generate`, `train`, `sweep`, `readout_sweep`, `adapt`,
  `costs` (T6), `simulate` (T5 and the heads' request pools), `traces` (serving traces), `batching` (static
  batches), `acceptance` (measured n-gram acceptance), `spec` (speculative decoding), `decode`, `refined`,
  `dist`, `stack`, `serve`, `evaluate`, `tables` (T1–T6), `castillo`; `shards` (`shard=i/n`); `tracking` (W&B).
  The demo's stage list and cache are the glue's (`lengthpred.pipeline`).

The stage protocol: each stage's entry is `run_<stage>(cfg, out) -> Path` (the composed config, the run's own
folder; it returns its product's path, opens its W&B run and prints its summary where the stage has them), and each script's
body is that one call, `run_x(cfg, run_dir(cfg))` (`tests/test_stage_protocol.py`).
"""
