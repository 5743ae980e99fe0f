"""Models end to end from quantized GGUF files with the weights kept packed, against the same files run from
weights dequantized at load (a backend that multiplies no packed format).

Activations stay float32, so the two runs use identical weights and differ only in float32 summation order:
greedy ids must be identical for Q8_0, and for the lower types we require an agreement of at least
AGREEMENT_FLOOR (lower types round the weights harder, which can bring two logits within rounding of a tie).
"""

from __future__ import annotations

import numpy as np
import pytest

from blazr.backends.cpu import HAS_NUMBA
from blazr.backends.cpu import Backend as CPUBackend
from blazr.loaders import load_checkpoint
from blazr.models import build_model
from blazr.models.batch import ForwardBatch
from blazr.quant import QuantRowStack, QuantWeight
from tests.gguf_writer import write_gguf
from tests.tiny_models import tiny_config, tiny_weights

# rerun by CI with the kernels compiled for other ISA levels (tools/isa_levels.py)
pytestmark = pytest.mark.isa

BLOCK = 16
STEPS = 24
AGREEMENT_FLOOR = 0.9
# 13 tokens: the prefill takes the tile + sgemm path (cpu_kernels.GEMM_MIN_TOKENS), decode the row path
PROMPT = [5, 17, 99, 3, 42, 7, 200, 11, 64, 8, 150, 31, 77]


@pytest.fixture(autouse=True)
def float32_activations(monkeypatch):
    """These tests check the f32-activation kernels; the int8 path (cpu_kernels.INT8_FORMATS) rounds x and
    has its own tests (tests/test_quant_int8.py)."""
    if HAS_NUMBA:
        from blazr.quant import cpu_kernels

        monkeypatch.setattr(cpu_kernels, "INT8_FORMATS", frozenset())


class DenseOnlyCPU(CPUBackend):
    """The CPU backend with no packed formats: the loader dequantizes every quantized tensor."""

    weight_formats = ()


def greedy_ids(model, prompt: list[int], steps: int) -> list[int]:
    cache = model.make_cache(8, BLOCK)
    table = list(range(8))
    logits = model.be.download(model(ForwardBatch.single(prompt, 0, table, BLOCK), cache))
    ids = [int(np.argmax(logits[-1]))]
    for _ in range(steps - 1):
        pos = len(prompt) + len(ids) - 1
        logits = model.be.download(model(ForwardBatch.single([ids[-1]], pos, table, BLOCK), cache))
        ids.append(int(np.argmax(logits[-1])))
    return ids


def packed_and_dense(tmp_path, name: str, qtype: str, fast: bool):
    path = write_gguf(
        tmp_path / f"{name}-{qtype}.gguf", tiny_config(name), tiny_weights(name), quantize=qtype
    )
    ckpt = load_checkpoint(path)
    packed = build_model(ckpt, CPUBackend(fast_kernels=fast))
    dense = build_model(load_checkpoint(path), DenseOnlyCPU(fast_kernels=False))
    return packed, dense


def kernel_paths():
    return [False, True] if HAS_NUMBA else [False]


@pytest.mark.parametrize("fast", kernel_paths(), ids=lambda f: "numba" if f else "numpy")
@pytest.mark.parametrize("name", ["llama", "qwen2"])
@pytest.mark.parametrize("qtype", ["Q8_0", "Q5_1", "Q5_0", "Q4_1", "Q4_0"])
def test_packed_model_matches_dequantized_model(tmp_path, name, qtype, fast):
    packed, dense = packed_and_dense(tmp_path, name, qtype, fast)
    layer = packed.layers[0]
    assert isinstance(layer.self_attn.qkv_proj, QuantWeight) and layer.self_attn.qkv_proj.format == qtype
    assert isinstance(layer.mlp.down_proj, QuantWeight)
    assert isinstance(dense.layers[0].mlp.down_proj, np.ndarray)
    got, want = greedy_ids(packed, PROMPT, STEPS), greedy_ids(dense, PROMPT, STEPS)
    agreement = np.mean(np.array(got) == np.array(want))
    if qtype == "Q8_0":
        assert got == want
    else:
        assert agreement >= AGREEMENT_FLOOR, f"{name} {qtype}: agreement {agreement:.2f}"


def test_mixed_formats_in_one_fused_projection(tmp_path):
    """A Q6_K-style mix: v in another format than q/k still loads packed, as a row stack."""
    cfg, weights = tiny_config("llama"), tiny_weights("llama")
    kinds = {k: "Q4_0" for k, v in weights.items() if v.ndim == 2}
    kinds["model.layers.0.self_attn.v_proj.weight"] = "Q8_0"
    path = write_gguf(tmp_path / "mixed.gguf", cfg, weights, quantize=kinds)
    packed = build_model(load_checkpoint(path), CPUBackend())
    dense = build_model(load_checkpoint(path), DenseOnlyCPU())
    qkv = packed.layers[0].self_attn.qkv_proj
    assert isinstance(qkv, QuantRowStack) and qkv.format == "Q4_0+Q8_0"
    assert greedy_ids(packed, PROMPT, 12) == greedy_ids(dense, PROMPT, 12)


@pytest.mark.registry
def test_real_q4_1_model_answers_paris(smollm2_gguf):
    import blazr

    llm = blazr.load(str(smollm2_gguf))
    assert isinstance(llm.model.layers[0].mlp.down_proj, QuantWeight)
    out = llm.generate("The capital of France is", temperature=0, max_tokens=4)
    assert out.startswith(" Paris.")
