"""Two sweeps of the readout on a config's in-domain splits (fit on train, choose on val, score on test):

- `sweep_layers` (scripts/sweep_layers.py, `sweep=layer_curve`): each of `sweep.heads` on one pooling at
  every layer of `sweep.layers`; the layer with the best validation Spearman per head goes to
  `layer_choice.json`; writes `layers.csv`, `layers.md` and `layer_curves.png` (val and test curves).
- `sweep_poolings` (scripts/sweep_poolings.py, `sweep=pooling_heads`): each head on every pooling at one
  layer (`sweep.layer_choice`'s layer of `sweep.layer_head`, else `sweep.layers[0]`), with paired
  differences against the last token and against `sweep.reference_head`; writes `poolings.csv`,
  `pooling_diffs.csv` and `poolings.md`.

MLP cells run over `sweep.n_seeds` seeds (`lengthpred.heads.sweep.cell_seeds`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from lengthpred.errors import ConfigError
from lengthpred.eval.plots import layer_curves
from lengthpred.heads import layer_choice, pooling_table
from lengthpred.heads.sweep import fit_cell, fit_cells, grid
from lengthpred.stages.sweep import sweep_inputs
from lengthpred.stages.tracking import tracked


def _out(out_dir: str | Path) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return out


def sweep_layers(cfg: Any, out_dir: str | Path) -> tuple[pd.DataFrame, dict[str, dict[str, Any]]]:
    """Fit every (head, layer) of `cfg.sweep` on its one pooling, choose each head's layer on validation;
    write the files of the module docstring and return (rows, choice)."""
    s = cfg.sweep
    if len(s.poolings) != 1:
        raise ConfigError(f"sweep.poolings={list(s.poolings)}: a layer curve takes one pooling (e.g. [last])")
    cells = grid(list(s.heads), list(s.layers), list(s.poolings))
    df = fit_cells(cells, **sweep_inputs(cfg, cells), n_boot=int(s.n_boot), seed=int(cfg.seed),
                   n_seeds=int(s.get("n_seeds") or 1))
    choice = layer_choice.choose_layers(df)
    model, data = str(cfg.model.name), str(cfg.data.name)
    out = _out(out_dir)
    df.to_csv(out / "layers.csv", index=False)
    layer_choice.write_choice(choice, out, model=model, data=data)
    (out / "layers.md").write_text(layer_choice.render_choice(choice, model, data) + "\n")
    layer_curves(df, choice, out / "layer_curves.png", title=f"{model}, {data}: Spearman by layer "
                 f"(n test = {int(df['n_test'].iloc[0])})")
    return df, choice


def pooling_layer(s: Any) -> int:
    """The layer of the pooling table: `layer_choice`'s choice for `layer_head`, else `layers[0]`."""
    if s.get("layer_choice"):
        return layer_choice.read_layer(s.layer_choice, str(s.get("layer_head") or s.reference_head))
    if len(s.layers) != 1:
        raise ConfigError(f"sweep.layers={list(s.layers)}: the pooling table takes one layer (or sweep.layer_choice)")
    return int(s.layers[0])


def sweep_poolings(cfg: Any, out_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Fit every (head, pooling) of `cfg.sweep` at `pooling_layer`; write the files of the module docstring
    and return (rows, paired differences)."""
    s = cfg.sweep
    ref = str(s.reference_head)
    if ref not in s.heads:
        raise ConfigError(f"sweep.reference_head={ref!r} is not one of sweep.heads={list(s.heads)}")
    layer = pooling_layer(s)
    cells = grid(list(s.heads), [layer], list(s.poolings))
    df, diffs = fit_pooling_cells(cfg, cells, sweep_inputs(cfg, cells))
    out = _out(out_dir)
    df.to_csv(out / "poolings.csv", index=False)
    diffs.to_csv(out / "pooling_diffs.csv", index=False)
    (out / "poolings.md").write_text(render_poolings(df, diffs, cfg, layer) + "\n")
    return df, diffs


def fit_pooling_cells(cfg: Any, cells: list[tuple[str, int, str]], inputs: dict[str, Any], desc: str = "poolings",
                      ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Fit every (head, layer, pooling) cell on `inputs` (`sweep_inputs`' keys), MLP cells over `sweep.n_seeds`
    seeds; return the rows and their paired differences (against the last token, `sweep.reference_head` and
    `sweep.pooling_pairs`)."""
    s = cfg.sweep
    rows, preds = [], {}
    for c in tqdm(cells, desc=desc, unit="cell"):
        row, p = fit_cell(c, inputs["head_settings"][c[0]], inputs["ids"], inputs["by_id"], inputs["targets"],
                          inputs["features"], n_boot=int(s.n_boot), seed=int(cfg.seed),
                          n_seeds=int(s.get("n_seeds") or 1))
        rows.append(row)
        preds[(c[0], c[2])] = p
    df = pd.DataFrame(rows)
    diffs = pooling_table.paired_differences(df, preds, reference_head=str(s.reference_head), n_boot=int(s.n_boot),
                                             seed=int(cfg.seed), pairs=[list(p) for p in s.get("pooling_pairs") or []])
    return df, diffs


def render_poolings(df: pd.DataFrame, diffs: pd.DataFrame, cfg: Any, layer: int) -> str:
    """The pooling × head Markdown for this config's model and data."""
    return pooling_table.render(df, diffs, model=str(cfg.model.name), data=str(cfg.data.name), layer=layer,
                                reference_head=str(cfg.sweep.reference_head), poolings=list(cfg.sweep.poolings))


def run_sweep_layers(cfg: Any, out: str | Path) -> Path:
    """The layer sweep (scripts/sweep_layers.py): `sweep_layers` into `out`, logged to W&B, the validation
    choice printed. Returns the folder."""
    with tracked(cfg, "sweep_layers") as tracker:
        df, choice = sweep_layers(cfg, out)
        tracker.log_frame("layers", df)
    print(layer_choice.render_choice(choice, str(cfg.model.name), str(cfg.data.name)))
    return Path(out)


def run_sweep_poolings(cfg: Any, out: str | Path) -> Path:
    """The pooling sweep (scripts/sweep_poolings.py): `sweep_poolings` into `out`, logged to W&B and printed.
    Returns the folder."""
    with tracked(cfg, "sweep_poolings") as tracker:
        df, diffs = sweep_poolings(cfg, out)
        tracker.log_frame("poolings", df)
    print(render_poolings(df, diffs, cfg, pooling_layer(cfg.sweep)))
    return Path(out)
