"""Write random-weight GGUF files with the shapes of real 0.5B- and 1B-class models, for speed benchmarks.

python benchmarks/make_shape_models.py OUT_DIR [--types Q4_0 Q4_K_M Q5_K_M Q6_K Q8_0 F16] [--models 0.5b 1b tiny]

Blocks are random bytes with small fixed scales (values do not matter for speed); the tensor-type mix of
the _M files follows llama.cpp's llama_tensor_get_type: Q6_K for the output, attn_v and ffn_down in the first
and last eighth and every third layer between, and its fallbacks for rows that are not whole 256-blocks.
A plain SentencePiece-style vocabulary of placeholder tokens lets both runtimes load the file.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import gguf
import numpy as np

from blazr.quant import block_info

SHAPES = {  # Qwen2.5-0.5B and Llama-3.2-1B shapes, written as llama architecture with tied embeddings
    "0.5b": dict(hidden=896, ffn=4864, layers=24, heads=14, kv_heads=2, vocab=151936),
    "1b": dict(hidden=2048, ffn=8192, layers=16, heads=32, kv_heads=8, vocab=128256),
    "tiny": dict(
        hidden=256, ffn=512, layers=2, heads=4, kv_heads=2, vocab=1024
    ),  # smoke tests of the scripts
    # Qwen3-MoE-like (qwen3moe: qk-norm, 3-D expert tensors, no shared expert): ~1.0B weights in all, ~0.3B
    # read per token (8 of 64 experts, attention, the tied 151,936-row head)
    "moe-1b": dict(
        hidden=1024, ffn=256, layers=16, heads=16, kv_heads=4, vocab=151936, experts=64, experts_used=8
    ),
    "moe-tiny": dict(
        hidden=256, ffn=256, layers=2, heads=4, kv_heads=2, vocab=40960, experts=8, experts_used=2
    ),
}
SCALE_FIELDS = {  # byte offsets of the f16 scale fields of each block
    "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,),
    "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,),
}  # fmt: skip
FALLBACK = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}  # llama.cpp, for rows not whole 256-blocks


def tensor_type(mix: str, name: str, layer: int, n_layers: int, cols: int) -> str:
    base = mix.removesuffix("_M")
    more_bits = layer < n_layers // 8 or layer >= 7 * n_layers // 8 or (layer - n_layers // 8) % 3 == 2
    if mix.endswith("_M") and (name == "output" or (name in ("attn_v", "ffn_down") and more_bits)):
        base = "Q6_K"
    if cols % block_info(base)[0]:
        base = FALLBACK[base]
    return base


def random_blocks(fmt: str, rows: int, cols: int, rng) -> np.ndarray:
    block_elems, block_bytes = block_info(fmt)
    blocks = rng.integers(0, 256, size=(rows, cols // block_elems, block_bytes), dtype=np.uint8)
    for offset in SCALE_FIELDS[fmt]:
        blocks[:, :, offset : offset + 2] = np.frombuffer(np.float16(2**-8).tobytes(), np.uint8)
    return blocks.reshape(rows, -1)


def write_model(path: Path, shape: dict, mix: str, rng) -> None:
    """A llama-architecture file, or a qwen3moe one when the shape has experts (ffn: one expert's width)."""
    d, f, n, v = shape["hidden"], shape["ffn"], shape["layers"], shape["vocab"]
    dh, experts = d // shape["heads"], shape.get("experts", 0)
    w = gguf.GGUFWriter(path, "qwen3moe" if experts else "llama")
    for add, value in [
        (w.add_context_length, 4096), (w.add_embedding_length, d), (w.add_block_count, n),
        (w.add_feed_forward_length, f), (w.add_head_count, shape["heads"]),
        (w.add_head_count_kv, shape["kv_heads"]), (w.add_layer_norm_rms_eps, 1e-6),
        (w.add_rope_freq_base, 10000.0), (w.add_vocab_size, v), (w.add_rope_dimension_count, dh),
    ]:  # fmt: skip
        add(value)
    if experts:
        w.add_expert_count(experts)
        w.add_expert_used_count(shape["experts_used"])
        w.add_expert_feed_forward_length(f)
        w.add_key_length(dh)
        w.add_value_length(dh)
    w.add_tokenizer_model("llama")
    w.add_token_list([f"<t{i}>" for i in range(v)])
    w.add_token_scores([0.0] * v)
    w.add_token_types([1] * v)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    def add(name: str, rows: int, cols: int, layer: int = 0, count: int = 0) -> None:
        """One weight (rows, cols), or `count` experts' weights as one 3-D (count, rows, cols) tensor."""
        full = f"blk.{layer}.{name}.weight" if name.startswith(("attn", "ffn")) else f"{name}.weight"
        if mix == "F16":  # dense half weights, small enough that activations stay finite
            values = rng.standard_normal((max(count, 1) * rows, cols), dtype=np.float32) * 0.02
            w.add_tensor(
                full, values.astype(np.float16).reshape((count, rows, cols) if count else (rows, cols))
            )
            return
        fmt = tensor_type(mix, name.removesuffix("_exps"), layer, n, cols)
        raw = random_blocks(fmt, max(count, 1) * rows, cols, rng)
        w.add_tensor(
            full, raw.reshape(count, rows, -1) if count else raw, raw_dtype=gguf.GGMLQuantizationType[fmt]
        )

    add("token_embd", v, d)  # tied: also the LM head
    w.add_tensor("output_norm.weight", np.ones(d, np.float32))
    for i in range(n):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(d, np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(d, np.float32))
        for name, rows, cols in [
            ("attn_q", d, d), ("attn_k", shape["kv_heads"] * dh, d), ("attn_v", shape["kv_heads"] * dh, d),
            ("attn_output", d, d),
        ]:  # fmt: skip
            add(name, rows, cols, i)
        for name, rows, cols in [("ffn_gate", f, d), ("ffn_up", f, d), ("ffn_down", d, f)]:
            add(name + "_exps" if experts else name, rows, cols, i, experts)
        if experts:
            w.add_tensor(f"blk.{i}.attn_q_norm.weight", np.ones(dh, np.float32))
            w.add_tensor(f"blk.{i}.attn_k_norm.weight", np.ones(dh, np.float32))
            router = rng.standard_normal((experts, d), dtype=np.float32) * 0.05  # (E, D)
            w.add_tensor(f"blk.{i}.ffn_gate_inp.weight", router)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--types", nargs="+", default=["Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0"])
    ap.add_argument("--models", nargs="+", default=["0.5b", "1b"])
    args = ap.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for model in args.models:
        for mix in args.types:
            path = args.out_dir / f"shape-{model}.{mix}.gguf"
            if not path.exists():
                write_model(path, SHAPES[model], mix, np.random.default_rng(0))
            print(path, f"{path.stat().st_size / 2**20:.0f} MB")


if __name__ == "__main__":
    main()
