"""Loading a quantized GGUF keeps resident memory close to the file size: the weights stay packed in the
memory-mapped file instead of being expanded to float32 (which would be about 7x the file for Q4_K).

A generated ~320 MB Q4_K llama-shaped file (and a ~350 MB Qwen3-MoE-shaped one, mostly 3-D expert tensors) is
loaded and run for a prefill and a decode step in a fresh
process; its peak RSS must stay under 1.3x the file size plus a fixed margin for the interpreter, numpy,
numba and the KV cache.
"""

from __future__ import annotations

import json
import subprocess
import sys

import gguf
import numpy as np
import pytest

from blazr.quant import block_info

MARGIN_MB = 250  # python + numpy + numba + blazr imports (~150 MB here) and one decoded sgemm tile
CONFIG = dict(hidden=2048, ffn=5632, layers=12, heads=16, kv_heads=4, vocab=32000)

CHILD = """
import json, sys
import numpy as np
from blazr.backends.cpu import Backend
from blazr.loaders import load_checkpoint
from blazr.models import build_model
from blazr.models.batch import ForwardBatch
from blazr.quant import QuantWeight, block_info
# Compile (or load from numba's cache) the Q4_K kernels first, then reset the peak-RSS mark (Linux
# clear_refs 5), so the measure is the model's memory, not LLVM's one-off compile (~400 MB).
warm = QuantWeight(np.zeros((8, block_info("Q4_K")[1]), np.uint8), "Q4_K", (8, 256))
Backend().matmul(np.ones((1, 256), np.float32), warm)
open("/proc/self/clear_refs", "w").write("5")
model = build_model(load_checkpoint(sys.argv[1]), Backend())
cache = model.make_cache(4, 16)
model(ForwardBatch.single(list(range(1, 10)), 0, [0, 1, 2, 3], 16), cache)
model(ForwardBatch.single([5], 9, [0, 1, 2, 3], 16), cache)
hwm_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"peak_rss_mb": hwm_kb / 1024}))
"""


def q4_k_blocks(rows: int, cols: int, rng) -> np.ndarray:
    """Random Q4_K blocks with small finite scales: d and dmin (the first 4 bytes) fixed at 2**-10."""
    block_elems, block_bytes = block_info("Q4_K")
    blocks = rng.integers(0, 256, size=(rows, cols // block_elems, block_bytes), dtype=np.uint8)
    blocks[:, :, 0:4] = np.frombuffer(np.array([2**-10, 2**-10], np.float16).tobytes(), np.uint8)
    return blocks.reshape(rows, -1)


def write_q4_k_model(path, rng) -> None:
    c = CONFIG
    w = gguf.GGUFWriter(path, "llama")
    w.add_context_length(512)
    w.add_embedding_length(c["hidden"])
    w.add_block_count(c["layers"])
    w.add_feed_forward_length(c["ffn"])
    w.add_head_count(c["heads"])
    w.add_head_count_kv(c["kv_heads"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(c["vocab"])
    q4k = gguf.GGMLQuantizationType.Q4_K
    d, f, dh = c["hidden"], c["ffn"], c["hidden"] // c["heads"]
    w.add_tensor("token_embd.weight", q4_k_blocks(c["vocab"], d, rng), raw_dtype=q4k)
    w.add_tensor("output_norm.weight", np.ones(d, np.float32))
    for i in range(c["layers"]):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(d, np.float32))
        w.add_tensor(p + "ffn_norm.weight", np.ones(d, np.float32))
        shapes = {"attn_q": (d, d), "attn_k": (c["kv_heads"] * dh, d), "attn_v": (c["kv_heads"] * dh, d)}
        shapes |= {"attn_output": (d, d), "ffn_gate": (f, d), "ffn_up": (f, d), "ffn_down": (d, f)}
        for name, (rows, cols) in shapes.items():
            w.add_tensor(p + name + ".weight", q4_k_blocks(rows, cols, rng), raw_dtype=q4k)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


MOE_CONFIG = dict(hidden=1024, expert_ffn=768, experts=32, used=4, layers=8, heads=8, kv_heads=4, vocab=32000)


def write_q4_k_moe(path, rng) -> None:
    """A Qwen3-MoE-shaped file whose weights are ~95% Q4_K experts (3-D ffn_*_exps tensors)."""
    c = MOE_CONFIG
    w = gguf.GGUFWriter(path, "qwen3moe")
    w.add_context_length(512)
    w.add_embedding_length(c["hidden"])
    w.add_block_count(c["layers"])
    w.add_feed_forward_length(4 * c["hidden"])
    w.add_head_count(c["heads"])
    w.add_head_count_kv(c["kv_heads"])
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(c["experts"])
    w.add_expert_used_count(c["used"])
    w.add_expert_feed_forward_length(c["expert_ffn"])
    w.add_vocab_size(c["vocab"])
    q4k = gguf.GGMLQuantizationType.Q4_K
    d, f, e, dh = c["hidden"], c["expert_ffn"], c["experts"], c["hidden"] // c["heads"]
    w.add_tensor("token_embd.weight", q4_k_blocks(c["vocab"], d, rng), raw_dtype=q4k)
    w.add_tensor("output_norm.weight", np.ones(d, np.float32))
    for i in range(c["layers"]):
        p = f"blk.{i}."
        for norm, width in (("attn_norm", d), ("ffn_norm", d), ("attn_q_norm", dh), ("attn_k_norm", dh)):
            w.add_tensor(p + norm + ".weight", np.ones(width, np.float32))
        w.add_tensor(p + "ffn_gate_inp.weight", rng.standard_normal((e, d)).astype(np.float32))  # router
        shapes = {"attn_q": (d, d), "attn_k": (c["kv_heads"] * dh, d), "attn_v": (c["kv_heads"] * dh, d)}
        shapes |= {"attn_output": (d, d)}
        for name, (rows, cols) in shapes.items():
            w.add_tensor(p + name + ".weight", q4_k_blocks(rows, cols, rng), raw_dtype=q4k)
        for name, (rows, cols) in (
            ("ffn_gate_exps", (f, d)),
            ("ffn_up_exps", (f, d)),
            ("ffn_down_exps", (d, f)),
        ):
            blocks = q4_k_blocks(e * rows, cols, rng).reshape(e, rows, -1)  # (E, rows, row_bytes)
            w.add_tensor(p + name + ".weight", blocks, raw_dtype=q4k)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.slow
@pytest.mark.parametrize("write", [write_q4_k_model, write_q4_k_moe], ids=["dense", "moe"])
def test_peak_rss_stays_near_the_file_size(write, tmp_path):
    path = tmp_path / "q4k.gguf"
    write(path, np.random.default_rng(0))
    file_mb = path.stat().st_size / 2**20
    assert file_mb > 250
    run = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-2000:]
    peak = json.loads(run.stdout.strip().splitlines()[-1])["peak_rss_mb"]
    limit = 1.3 * file_mb + MARGIN_MB
    assert peak <= limit, f"peak RSS {peak:.0f} MB > {limit:.0f} MB for a {file_mb:.0f} MB Q4_K file"
