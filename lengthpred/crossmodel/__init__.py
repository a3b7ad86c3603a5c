"""Cross-model length prediction on CASTILLO (`experiment=castillo`, scripts/castillo.py).

One prompt union over 13 models × 7 datasets with a per-model length table (`table`, `union`); one split by
prompt, stratified by dataset, shared by every model (`split`); the mean-of-10 target and its
Spearman–Brown ceiling per model and dataset (`ceilings`); every head fitted per model and on the mean over
models, reading one feature store (`inputs`, `fits`); scores with CIs and the model × model transfer matrix
(`scoring`); T7 and figures (`tables`, `plots`). The run itself is a stage: `lengthpred.stages.castillo`.
"""

from lengthpred.crossmodel.table import ALL_MODELS, LengthTable, short_model
from lengthpred.crossmodel.union import PromptUnion, read_union

__all__ = ["ALL_MODELS", "LengthTable", "PromptUnion", "read_union", "short_model"]
