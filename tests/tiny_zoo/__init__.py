"""Tiny random-weight checkpoints of the families beyond the first five, one module each.

A module exports CONFIG (the HF config.json fields over tests.tiny_models._SHAPE), SEED (int) and
weights(cfg, draw) -> {HF tensor name: float32 array}, drawing every tensor from `draw` (tests.tiny_models.Draw)
in a fixed order; optionally as_transformers(cfg, weights) (the checkpoint transformers' reference runs) and
ATTN_IMPLEMENTATION (transformers' attention for the reference; default "eager"). tests/tiny_models.py lists
every module here in MODELS; tests/parity/make_reference.py and tests/parity/make_gguf.py make its goldens.
"""
