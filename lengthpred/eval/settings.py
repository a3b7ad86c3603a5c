"""`EvalSettings`: how the evaluate stage scores (the scoring keys of `conf/eval/default.yaml`), a plain object
the stage layer builds (`EvalSettings.from_mapping`) so `evaluate_run` never reads a config."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lengthpred.settings import settings_from

# keys of the eval group that say where things are, or what the tables stage does: read by the stage layer
STAGE_KEYS = (
    "name",
    "experiment_dir",
    "input_dir",
    "results_file",
    "extra_results",
    "tables_dir",
    "reference",
    "ceiling_from_prompts",
    "splits_json",
    "tables",
    "plots",
    "print",
)


@dataclass(frozen=True)
class PairedSettings:
    """`eval.paired`: paired bootstraps against baselines of the same file, and across files on `splits`."""

    baselines: tuple[str, ...] = ("static",)
    metrics: tuple[str, ...] = ("spearman",)
    heads: tuple[str, ...] = ()
    splits: tuple[str, ...] = ("indomain/all/test",)


@dataclass(frozen=True)
class EvalSettings:
    """The scoring keys of `conf/eval/default.yaml` (all optional: these are the defaults)."""

    metrics: tuple[str, ...] | None = None  # None: every registered metric
    params: dict[str, Any] = field(default_factory=dict)
    n_boot: int = 1000
    confidence: float = 0.95
    seed: int = 0
    pool_indomain: bool = True
    paired: PairedSettings = PairedSettings()
    shift_key: str = "length_wasserstein"

    @classmethod
    def from_mapping(cls, group: Mapping[str, Any] | None) -> EvalSettings:
        """From the eval group as a plain resolved mapping; an unknown key is a ConfigError naming it."""
        g = dict(group or {})
        paired = settings_from(PairedSettings, g.pop("paired", None), group="eval.paired")
        return settings_from(cls, g, group="eval", skip=STAGE_KEYS, paired=paired)

    def scoring(self) -> dict[str, Any]:
        """The keywords of `lengthpred.eval.report.evaluate_run`."""
        p = self.paired
        return {
            "metrics": list(self.metrics) if self.metrics is not None else None,
            "n_boot": int(self.n_boot),
            "seed": int(self.seed),
            "confidence": float(self.confidence),
            "params": dict(self.params),
            "paired_baselines": list(p.baselines),
            "paired_metrics": list(p.metrics),
            "paired_heads": list(p.heads),
            "paired_splits": list(p.splits),
            "shift_key": str(self.shift_key),
            "pool_indomain": bool(self.pool_indomain),
        }
