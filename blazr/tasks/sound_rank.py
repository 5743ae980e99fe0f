"""Does each sound fit its own description best? CLAP ranks every sound against every description.

A ClapModel directory (config.json with model_type "clap", model.safetensors, preprocessor_config.json,
tokenizer.json) runs on a blazr backend (blazr.models.clap). Each sound is read as mono at the model's rate
(48 kHz), cut or padded into its log-mel features (blazr.audio.clap_features) and embedded; each description
is tokenized (<s> ... </s>, cut to the position table) and embedded. A sound's similarity to a description is
the cosine of the two embeddings (CLAP's logits without the temperature); its rank is 1 + the number of other
descriptions more similar to it than its own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from blazr.errors import CheckpointError

WEIGHTS = "model.safetensors"


def is_clap(path: str | Path) -> bool:
    """Whether `path` is a directory whose config.json says model_type "clap"."""
    config = Path(path) / "config.json"
    if not config.is_file():
        return False
    try:
        return json.loads(config.read_text(encoding="utf-8")).get("model_type") == "clap"
    except (ValueError, UnicodeDecodeError, AttributeError):
        return False


class ClapRanker:
    def __init__(self, model: Any, features: Any, tokenizer: Any, path: Path):
        self.model, self.features, self.tokenizer, self.path = model, features, tokenizer, path

    @classmethod
    def load(cls, path: str | Path, device: Any = "cpu") -> ClapRanker:
        import tokenizers

        from blazr.audio.clap_features import ClapFeatures
        from blazr.backends import get_backend
        from blazr.backends.base import check_supports
        from blazr.loaders.safetensors import read_config, read_safetensors_file
        from blazr.models.clap import Model, ModelArgs

        path = Path(path)
        features = ClapFeatures.load(path)
        for needed in (WEIGHTS, "tokenizer.json"):
            if not (path / needed).is_file():
                raise CheckpointError(f"{path}: no {needed} (a ClapModel directory holds it)")
        backend = get_backend(device) if isinstance(device, str) else device
        net = Model(ModelArgs.from_dict(read_config(path)), backend)
        check_supports(backend, net.required_ops())
        net.load_weights(net.sanitize(read_safetensors_file(path / WEIGHTS)), source=path / WEIGHTS)
        tokenizer = tokenizers.Tokenizer.from_file(str(path / "tokenizer.json"))
        tokenizer.no_truncation()
        tokenizer.no_padding()
        return cls(net, features, tokenizer, path)

    def token_ids(self, text: str) -> list[int]:
        """<s> text </s>, the middle cut so the whole fits the position table."""
        ids = self.tokenizer.encode(text).ids
        room = self.model.text_model.max_positions
        return ids if len(ids) <= room else ids[: room - 1] + ids[-1:]

    def embed_sound(self, path: Path) -> np.ndarray:
        """(P,) unit embedding of the sound file at `path`."""
        from blazr.audio.decode import load_audio

        wave = load_audio(path, sample_rate=self.features.sampling_rate)  # (N,) mono
        return self.model.embed_audio(self.features(wave))

    def embed_texts(self, texts: list[str]) -> np.ndarray:
        """(T, P) unit embeddings."""
        return self.model.embed_text([self.token_ids(t) for t in texts])

    def rank(self, sounds: list[Path], descriptions: list[str]) -> list[dict[str, Any]]:
        """For sound i (described by descriptions[i]): its rank among all descriptions, its similarity to its
        own, and the file whose description fits it best."""
        audio = np.stack([self.embed_sound(p) for p in sounds])  # (S, P)
        similarity = audio.astype(np.float64) @ self.embed_texts(descriptions).astype(np.float64).T  # (S, S)
        out = []
        for i, row in enumerate(similarity):
            best = int(np.argmax(row))
            out.append(
                {
                    "rank": 1 + int((row > row[i]).sum()),
                    "similarity": round(float(row[i]), 6),
                    "best_match": sounds[best].name,
                    "best_similarity": round(float(row[best]), 6),
                }
            )
        return out
