"""Write a random-weight GGUF file with the shapes of Mamba2-370M (state-spaces/mamba2-370m), for speed
benchmarks of state-space decoding against llama.cpp on the same file.

python benchmarks/make_ssm_models.py OUT_DIR [--types F16 Q8_0] [--models mamba2-370m mamba2-tiny]

As llama.cpp's converter writes Mamba2: architecture mamba2, ssm_in / ssm_out the only quantized matrices
(with the tied embeddings), the conv kernel, A, D, dt bias and norms in F32; A = -exp(A_log) of S4D's
1..H initialisation. Matrix values are random (values do not matter for speed), small enough to stay finite.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import gguf
import numpy as np
from make_shape_models import random_blocks  # benchmarks/, the script's own folder

SHAPES = {
    # d_model 1024, 48 layers, d_state 128, headdim 64, expand 2 (d_inner 2048, 32 heads), 1 group, GPT-NeoX's
    # vocabulary padded to 50,288
    "mamba2-370m": dict(hidden=1024, layers=48, state=128, head_dim=64, groups=1, conv=4, vocab=50288),
    "mamba2-tiny": dict(hidden=256, layers=2, state=16, head_dim=32, groups=1, conv=4, vocab=1024),
}


def write_model(path: Path, shape: dict, mix: str, rng) -> None:
    d, n, v, k = shape["hidden"], shape["layers"], shape["vocab"], shape["conv"]
    inner, state, groups = 2 * d, shape["state"], shape["groups"]
    heads, conv_dim = inner // shape["head_dim"], inner + 2 * groups * state
    w = gguf.GGUFWriter(path, "mamba2")
    for add, value in [
        (w.add_context_length, 1 << 20), (w.add_embedding_length, d), (w.add_block_count, n),
        (w.add_feed_forward_length, 0), (w.add_head_count, 0), (w.add_ssm_conv_kernel, k),
        (w.add_ssm_inner_size, inner), (w.add_ssm_state_size, state), (w.add_ssm_time_step_rank, heads),
        (w.add_ssm_group_count, groups), (w.add_layer_norm_rms_eps, 1e-5), (w.add_vocab_size, v),
    ]:  # fmt: skip
        add(value)
    w.add_tokenizer_model("llama")
    w.add_token_list([f"<t{i}>" for i in range(v)])
    w.add_token_scores([0.0] * v)
    w.add_token_types([1] * v)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    def matrix(name: str, rows: int, cols: int) -> None:
        if mix == "F16":
            w.add_tensor(
                name, (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)
            )
        else:
            raw = random_blocks(mix, rows, cols, rng)
            w.add_tensor(name, raw, raw_dtype=gguf.GGMLQuantizationType[mix])

    matrix("token_embd.weight", v, d)  # tied: also the LM head
    w.add_tensor("output_norm.weight", np.ones(d, np.float32))
    for i in range(n):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(d, np.float32))
        matrix(p + "ssm_in.weight", 2 * inner + 2 * groups * state + heads, d)
        w.add_tensor(p + "ssm_conv1d.weight", rng.standard_normal((conv_dim, k), dtype=np.float32) * 0.3)
        w.add_tensor(p + "ssm_conv1d.bias", np.zeros(conv_dim, np.float32))
        w.add_tensor(p + "ssm_dt.bias", np.full(heads, -2.0, np.float32))  # softplus: dt ~0.13
        w.add_tensor(p + "ssm_a", -np.arange(1, heads + 1, dtype=np.float32).reshape(heads, 1))
        w.add_tensor(p + "ssm_d", np.ones((heads, 1), np.float32))
        w.add_tensor(p + "ssm_norm.weight", np.ones((groups, inner // groups), np.float32))
        matrix(p + "ssm_out.weight", d, inner)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--types", nargs="+", default=["F16", "Q8_0"])
    ap.add_argument("--models", nargs="+", default=["mamba2-370m"])
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
