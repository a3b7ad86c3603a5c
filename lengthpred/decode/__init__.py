"""Refine while decoding (issue 27): the serving model's states at checkpoints of its own sampled answers,
remaining-length readouts on them, and their curve against the prompt-only head.

A config's store folder and stages live in `lengthpred.stages.decode`.
"""

from lengthpred.decode.answers import Answer, select_answers
from lengthpred.decode.extract import extract_decode
from lengthpred.decode.settings import DecodeSettings, checkpoints
from lengthpred.decode.store import DecodeSet, load_decode

__all__ = ["Answer", "DecodeSet", "DecodeSettings", "checkpoints", "extract_decode", "load_decode", "select_answers"]
