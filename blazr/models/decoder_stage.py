"""Pipeline stages of a decoder: a model cut into runs of consecutive layers, one run per machine.

`keep_stage` trims a freshly built DecoderLM (before its weights load) to stage `index` of `count`: its layers,
the embeddings if it is the first stage, the final norm and head if it is the last (and the embeddings again
when the head is tied to them). build_model then reads only those weights, so each machine holds its share
of the model. A stage runs `model.stage(batch, cache, hidden)` (blazr.models.decoder): hidden states in,
hidden states (or, last, logits) out; its KV cache covers its own layers.
"""

from __future__ import annotations

from typing import Any

from blazr.errors import ConfigError, UnsupportedError


def stage_layers(num_layers: int, index: int, count: int) -> tuple[int, int]:
    """Layers [start, stop) of stage `index` of `count`, as even as integers allow (earlier stages smaller:
    the first also embeds, the last also runs the head)."""
    if not 0 <= index < count:
        raise ConfigError(f"pipeline stage {index} of {count} does not exist")
    if count > num_layers:
        raise ConfigError(
            f"{count} pipeline stages for a model of {num_layers} layers: at most one stage a layer"
        )
    return num_layers * index // count, num_layers * (index + 1) // count


def keep_stage(model: Any, index: int, count: int) -> None:
    """Trim `model` (a DecoderLM, weights not yet loaded) to pipeline stage `index` of `count`."""
    from blazr.models.decoder import DecoderLM

    own = ("_forward", "_logits", "children", "__call__", "make_cache")
    if (
        not isinstance(model, DecoderLM)
        or getattr(model, "stateful", False)
        or any(getattr(type(model), name) is not getattr(DecoderLM, name) for name in own)
    ):
        raise UnsupportedError(
            f"{type(model).__module__.rsplit('.', 1)[-1]} models do not split into pipeline stages: stages are "
            "built for the dense decoder families (embeddings, a stack of blocks, a norm and a head)"
        )
    start, stop = stage_layers(len(model.layers), index, count)
    model.layers = model.layers[start:stop]
    model.layer_offset = start
    model.first_stage, model.last_stage = index == 0, index == count - 1
    if not model.last_stage:
        model.lm_head = None  # neither loaded nor run here
