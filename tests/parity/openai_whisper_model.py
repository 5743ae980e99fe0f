"""openai-whisper's own model built from Whisper weights under transformers' names (blazr's readers give
those for every format), for the parity scripts that run openai-whisper as the reference.

Needs torch and the openai-whisper sdist (models.md) installed in the parity venv."""

from __future__ import annotations

import numpy as np


def openai_whisper_model(config: dict, weights: dict, alignment_heads=None):
    """A whisper.model.Whisper in float32 eval mode. config: HF WhisperConfig keys; weights: HF names (the k
    biases absent, as Whisper has none); alignment_heads: (layer, head) pairs, else config's."""
    import torch
    from whisper.model import ModelDimensions, Whisper

    from tests.whisper_ggml_writer import openai_name

    dims = ModelDimensions(
        n_mels=config["num_mel_bins"],
        n_audio_ctx=config["max_source_positions"],
        n_audio_state=config["d_model"],
        n_audio_head=config["encoder_attention_heads"],
        n_audio_layer=config["encoder_layers"],
        n_vocab=config["vocab_size"],
        n_text_ctx=config["max_target_positions"],
        n_text_state=config["d_model"],
        n_text_head=config["decoder_attention_heads"],
        n_text_layer=config["decoder_layers"],
    )
    model = Whisper(dims)
    state = {openai_name(k): torch.from_numpy(np.asarray(v, dtype=np.float32)) for k, v in weights.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all(m.endswith(".key.bias") for m in missing), (missing, unexpected)
    heads = torch.zeros(dims.n_text_layer, dims.n_text_head, dtype=torch.bool)
    for layer, head in alignment_heads or config["alignment_heads"]:
        heads[layer, head] = True
    model.register_buffer("alignment_heads", heads.to_sparse(), persistent=False)
    return model.eval()
