"""Make tests/golden/<model>_<storage>.npz: transformers' greedy ids and float32 logits for the tiny models.

Needs torch and transformers (not needed by CI); see tests/parity/README.md. Run from the repo root:
    .venv-parity/bin/python tests/parity/make_reference.py [MODEL ...]
Each storage rounds the weights as that file format stores them, then runs the model in float32, which is
what blazr's CPU backend does with the same file.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import torch
import transformers

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.tiny_models import (  # noqa: E402
    MODELS,
    NEW_TOKENS,
    PROMPT_IDS,
    STORAGES,
    ZOO,
    round_weights,
    tiny_weights,
    transformers_checkpoint,
    weights_digest,
)

GOLDEN = REPO / "tests" / "golden"


def build_hf_model(name: str, storage: str) -> torch.nn.Module:
    """The transformers model of tiny model `name` holding its weights rounded through `storage`."""
    hf_config, weights = transformers_checkpoint(name, round_weights(tiny_weights(name), storage))
    config = transformers.AutoConfig.for_model(**hf_config)
    # eager unless the zoo module names another (Falcon-RW: eager adds its ALiBi twice)
    zoo = importlib.import_module(f"tests.tiny_zoo.{name}") if name in ZOO else None
    attn = getattr(zoo, "ATTN_IMPLEMENTATION", "eager")
    model = transformers.AutoModelForCausalLM.from_config(
        config, attn_implementation=attn, dtype=torch.float32
    )
    state = {k: torch.from_numpy(a.copy()) for k, a in weights.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = ["lm_head.weight"] if config.tie_word_embeddings else []
    if sorted(missing) != tied or unexpected:
        raise SystemExit(
            f"{name}: weights do not fit the HF model: missing {missing}, unexpected {unexpected}"
        )
    if (
        config.tie_word_embeddings
        and model.lm_head.weight.data_ptr() != model.get_input_embeddings().weight.data_ptr()
    ):
        raise SystemExit(f"{name}: lm_head is not tied to embed_tokens")
    model.generation_config.eos_token_id = None  # always 32 new tokens, never stopped early
    model.generation_config.pad_token_id = 0
    return model.eval()


@torch.no_grad()
def reference(name: str, storage: str) -> dict[str, np.ndarray]:
    """Greedy ids from generate() and the logits (T, V) of every prompt and generated position."""
    model = build_hf_model(name, storage)
    prompt = torch.tensor([PROMPT_IDS])  # (1, P)
    out = model.generate(
        prompt, max_new_tokens=NEW_TOKENS, do_sample=False, output_logits=True, return_dict_in_generate=True
    )
    ids = out.sequences[0, len(PROMPT_IDS) :].numpy().astype(np.int32)  # (N,)
    step_logits = torch.cat(out.logits).numpy()  # (N, V) from the cached decode loop
    full = model(out.sequences).logits[0].float().numpy()  # (P + N, V) one pass, no cache
    used = full[len(PROMPT_IDS) - 1 : -1]  # (N,) rows that chose the N new tokens
    if len(ids) != NEW_TOKENS or not np.array_equal(used.argmax(-1), ids):
        raise SystemExit(f"{name}/{storage}: generate() ids are not the argmax of the logits")
    top2 = np.sort(used, axis=-1)[:, -2:]  # (N, 2)
    margin = np.min(top2[:, 1] - top2[:, 0])
    print(
        f"{name:8s} {storage:9s} ids {ids[:8].tolist()}..  min greedy margin {margin:.4f}"
        f"  logit std {full.std():.2f}  cache-vs-full max diff {np.abs(step_logits - used).max():.2e}"
    )
    return {
        "prompt_ids": np.asarray(PROMPT_IDS, dtype=np.int32),
        "ids": ids,
        "logits": full.astype(np.float32),
        "weights_sha256": np.asarray(weights_digest(name, storage)),
        "versions": np.asarray(f"transformers {transformers.__version__}, torch {torch.__version__}"),
    }


def main() -> None:
    torch.set_num_threads(1)  # reproducible summation order, and the machine is shared
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name in sys.argv[1:] or MODELS:  # default: every model
        for storage in STORAGES:
            np.savez_compressed(GOLDEN / f"{name}_{storage}.npz", **reference(name, storage))


if __name__ == "__main__":
    main()
