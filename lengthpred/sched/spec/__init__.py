"""Speculative decoding: the n-gram drafter's measured acceptance (`acceptance`), its records file (`records`),
the LAPS-SD grid over acceptance regimes (`experiment`) and its report (`report`).
"""
