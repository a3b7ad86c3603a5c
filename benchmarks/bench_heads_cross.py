"""Cost of the train stage's cross-domain fits at demo scale: shared vs per-pair fits, BLAS threads.

    .venv/bin/python benchmarks/bench_heads_cross.py                        # linear and egtp
    .venv/bin/python benchmarks/bench_heads_cross.py --heads linear --mode single

Reads the demo's prepared prompts, splits, reference targets and cached features (run `make demo` or the
data/features stages first), then times lengthpred.heads.cross.fit_cross over splits.json's pairs
(a) sharing one fit per distinct train/val ids (what train.py does), (b) fitting every pair, and (c) (a)
with BLAS left at its default thread count, next to the in-domain fit on the pooled train split.
"""

from __future__ import annotations

import argparse
import time

from omegaconf import OmegaConf

from lengthpred.heads.assemble import indomain_ids
from lengthpred.heads.cross import fit_cross, select_cross
from lengthpred.heads.settings import HeadSettings
from lengthpred.heads.training import run_training
from lengthpred.stages.train import load_stage_inputs


def compose(head: str):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    import lengthpred.cli  # noqa: F401  (${lp.*} resolvers)
    from lengthpred.paths import REPO_ROOT

    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        return hydra_compose("config", overrides=["experiment=demo", f"head={head}", "logger=disabled"])


def bench(head: str, mode: str) -> None:
    cfg = compose(head)
    data = load_stage_inputs(cfg)
    hcfg = HeadSettings.from_mapping(OmegaConf.to_container(cfg.head, resolve=True) | {"feature": data.feature})
    if "progress" in hcfg.params:
        hcfg = hcfg.replace(params=hcfg.params | {"progress": False})
    ids = indomain_ids(data.splits)
    sets = [data.labeled(ids[p], p) for p in ("train", "val", "test")]
    t = time.perf_counter()
    run_training(head, hcfg, *sets)
    indomain = time.perf_counter() - t
    pairs = select_cross(data.splits.get("cross") or [], mode)
    runs = {
        "shared, 1 BLAS thread": dict(share=True, blas_threads=1),
        "per pair, 1 BLAS thread": dict(share=False, blas_threads=1),
        "shared, default BLAS": dict(share=True, blas_threads=None),
    }
    print(f"{head}: in-domain fit (n_train {len(sets[0])}) {indomain:.2f} s; {len(pairs)} cross pairs ({mode})")
    for label, kw in runs.items():
        res = fit_cross(head, hcfg, pairs, data.labeled_or_none, **kw)
        print(
            f"  {label:26s} {res.n_fits:3d} fits  {res.seconds:7.2f} s  (fitting {res.fit_seconds:6.2f} s)  "
            f"median spearman {res.summary(mode)['spearman_median']:.3f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heads", nargs="+", default=["linear", "egtp"])
    ap.add_argument("--mode", default="all", choices=["all", "single", "mix"])
    args = ap.parse_args()
    for head in args.heads:
        bench(head, args.mode)


if __name__ == "__main__":
    main()
