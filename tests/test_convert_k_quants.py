"""`blazr convert -q q4_k_m|q4_k_s|q5_k_m|q5_k_s|q6_k` against llama-quantize: on two small random models wide
enough for 256-value blocks (a Llama with its own output matrix, a Qwen2 with tied embeddings and FFN rows of
320 values, which take the 32-value fallback), every tensor has the type llama-quantize gave it and the same
bytes. tests/data/k_mixtures.json holds, per model and mixture, llama-quantize's tensor types and the sha256 of
its tensor data in name order; llama-quantize (llama-cpp-python 0.3.36's llama_model_quantize) ran on blazr's
F32 conversion of the same weights."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from blazr.convert import convert
from blazr.loaders.gguf import read_gguf

REFERENCE = json.loads((Path(__file__).parent / "data" / "k_mixtures.json").read_text())
WIDE = {
    "llama": dict(model_type="llama", architectures=["LlamaForCausalLM"], intermediate_size=512, tie=False),
    "qwen2": dict(model_type="qwen2", architectures=["Qwen2ForCausalLM"], intermediate_size=320, tie=True),
}


def write_wide_model(name: str, directory: Path) -> Path:
    """A random 12-layer model of width 256 (past 10 layers: llama-quantize counts layers numerically) in HF layout (config.json + model.safetensors)."""
    from safetensors.numpy import save_file

    spec = WIDE[name]
    hidden, inter, layers, heads, kv, vocab = 256, spec["intermediate_size"], 12, 4, 2, 256
    head_dim = hidden // heads
    config = {
        "architectures": spec["architectures"], "model_type": spec["model_type"], "vocab_size": vocab,
        "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv, "max_position_embeddings": 512,
        "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": spec["tie"],
        "hidden_act": "silu", "torch_dtype": "float32",
    }  # fmt: skip
    rng = np.random.default_rng(256)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    tensors = {"model.embed_tokens.weight": w(vocab, hidden), "model.norm.weight": 1 + w(hidden)}
    if not spec["tie"]:
        tensors["lm_head.weight"] = w(vocab, hidden)
    for i in range(layers):
        p = f"model.layers.{i}."
        tensors |= {
            p + "input_layernorm.weight": 1 + w(hidden), p + "post_attention_layernorm.weight": 1 + w(hidden),
            p + "self_attn.q_proj.weight": w(hidden, hidden), p + "self_attn.k_proj.weight": w(kv * head_dim, hidden),
            p + "self_attn.v_proj.weight": w(kv * head_dim, hidden), p + "self_attn.o_proj.weight": w(hidden, hidden),
            p + "mlp.gate_proj.weight": w(inter, hidden), p + "mlp.up_proj.weight": w(inter, hidden),
            p + "mlp.down_proj.weight": w(hidden, inter),
        }  # fmt: skip
        if spec["model_type"] == "qwen2":
            for proj, rows in (("q", hidden), ("k", kv * head_dim), ("v", kv * head_dim)):
                tensors[p + f"self_attn.{proj}_proj.bias"] = w(rows)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    save_file(tensors, str(directory / "model.safetensors"))
    return directory


def tensor_summary(path: Path) -> tuple[dict[str, str], str]:
    """(tensor name -> ggml type name, sha256 of every tensor's bytes in name order)."""
    gf = read_gguf(path)
    digest = hashlib.sha256()
    for info in sorted(gf.tensors, key=lambda t: t.name):
        digest.update(bytes(gf.data[info.offset : info.offset + info.nbytes]))
    return {t.name: t.type_name for t in gf.tensors}, digest.hexdigest()


@pytest.mark.parametrize("name", sorted(WIDE))
@pytest.mark.parametrize("outtype", ["q4_k_m", "q4_k_s", "q5_k_m", "q5_k_s", "q6_k"])
def test_k_mixture_equals_llama_quantize(name, outtype, tmp_path):
    src = write_wide_model(name, tmp_path / "src")
    out = convert(src, tmp_path / f"{outtype}.gguf", "gguf", outtype)
    types, digest = tensor_summary(out)
    expected = REFERENCE[name][outtype]
    assert types == expected["types"]
    assert digest == expected["sha256"]
    assert read_gguf(out).metadata["general.file_type"] == expected["file_type"]
