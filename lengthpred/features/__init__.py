"""Prefill features: hidden states pooled per layer (last, mean, entropy, attention, fused) from one forward.

A config's settings, store folder and `ensure_features` live in `lengthpred.stages.features`.
"""

from lengthpred.features.extract import extract_features
from lengthpred.features.settings import FeatureSettings
from lengthpred.features.store import FeatureSet, FeatureStores, load_features

__all__ = ["FeatureSet", "FeatureSettings", "FeatureStores", "extract_features", "load_features"]
