"""Prefill features: hidden states pooled per layer (last, mean, entropy, attention, fused) from one forward."""

from lengthpred.features.extract import ensure_features, extract_features, feature_dir, settings_from_cfg
from lengthpred.features.settings import FeatureSettings
from lengthpred.features.store import FeatureSet, load_features

__all__ = [
    "FeatureSet",
    "FeatureSettings",
    "ensure_features",
    "extract_features",
    "feature_dir",
    "load_features",
    "settings_from_cfg",
]
