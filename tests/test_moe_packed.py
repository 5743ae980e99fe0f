"""Mixture-of-experts weights kept packed (blazr.quant.experts.QuantExperts): `matmul_experts` on GGML blocks
against the float64 product of the dequantized experts on every backend, two projections of different formats
stacked, the wgpu upload split by whole experts, and the int8 CPU path equal to one packed matmul per expert.

Tolerance: as tests/test_quant_matmul.py, float32 activations make the packed product differ from the exact one
only by float32 rounding (NMSE ~1e-14); the bound 1e-10 leaves a wide margin.
"""

from __future__ import annotations

import numpy as np
import pytest

from blazr.errors import CheckpointError
from blazr.quant import QuantWeight
from blazr.quant.experts import QuantExperts
from blazr.quant.ggml_blocks import dequantize
from tests import reference
from tests.test_wgpu_quant import nmse, random_weight

FORMATS = ("Q8_0", "Q4_0", "Q5_1", "Q4_K", "Q6_K", "MXFP4", "IQ4_XS")
NMSE_MAX = 1e-10


@pytest.fixture
def float_activations(backend):
    """Exact float32 activations in the packed dot products (the int8 path is checked on its own below)."""
    before = getattr(backend, "int8_activations", None)
    if before is not None:
        backend.set_int8_activations(False)
    yield backend
    if before is not None:
        backend.set_int8_activations(before)


def dense_experts(w: QuantExperts) -> np.ndarray:
    """(E, N, K) float64: each part dequantized, the parts' rows stacked per expert."""
    parts = [dequantize(p.blocks, p.format, p.shape).reshape(w.experts, -1, p.shape[1]) for p in w.parts]
    return np.concatenate(parts, axis=1).astype(np.float64)


def run(be, x: np.ndarray, w: QuantExperts, ids: np.ndarray) -> np.ndarray:
    return be.download(be.matmul_experts(be.upload(x), w, be.upload(ids)))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("t, per_token", [(1, 2), (5, 3), (9, 1)])
def test_packed_experts_match_dequantized_f64(float_activations, fmt, t, per_token, rng):
    be, experts, n = float_activations, 4, 33
    w = QuantExperts((random_weight(fmt, experts * n, 512, rng),), experts)
    x = rng.standard_normal((t, w.shape[2])).astype(np.float32)  # (T, K)
    ids = rng.integers(0, experts, size=(t, per_token)).astype(np.int32)  # (T, k)
    got = run(be, x, w, ids)
    assert got.shape == (t, per_token, n)
    err = nmse(got.astype(np.float64), reference.matmul_experts(x, dense_experts(w), ids))
    assert err <= NMSE_MAX, f"{fmt}: NMSE {err:.2e}"


def test_gate_and_up_of_two_formats_stack_by_rows(float_activations, rng):
    """A Q4_K_M file's gate (Q4_K) and up (Q6_K) experts as one (E, 2F, K) weight: gate rows, then up rows."""
    be, experts, f = float_activations, 3, 40
    gate, up = random_weight("Q4_K", experts * f, 256, rng), random_weight("Q6_K", experts * f, 256, rng)
    w = QuantExperts((gate, up), experts)
    assert w.shape == (experts, 2 * f, 256) and w.format == "Q4_K+Q6_K"
    x = rng.standard_normal((6, 256)).astype(np.float32)
    ids = np.array([[0, 2], [2, 1], [1, 1], [0, 0], [2, 0], [1, 2]], np.int32)
    err = nmse(run(be, x, w, ids).astype(np.float64), reference.matmul_experts(x, dense_experts(w), ids))
    assert err <= NMSE_MAX


@pytest.mark.parametrize("formats", [("Q8_0",), ("Q4_K", "Q6_K"), ("Q4_0", "Q5_K")])
@pytest.mark.parametrize("tokens", [1, 3, 80])
def test_int8_cpu_path_is_one_packed_matmul_per_expert(formats, tokens, rng):
    """With int8 activations (the CPU's default for packed weights) each pair gives bit for bit what the packed
    matmul of its expert's tokens gives: decode steps in one call over every pair (the lane dots), prompts one
    matmul per expert (the int8 GEMM where an expert has enough tokens)."""
    from blazr.backends.cpu import HAS_NUMBA, Backend

    be, experts, n = Backend(), 4, 40
    w = QuantExperts(tuple(random_weight(f, experts * n, 256, rng) for f in formats), experts)
    x = rng.standard_normal((tokens, 256)).astype(np.float32)
    ids = np.stack([rng.permutation(experts)[:2] for _ in range(tokens)]).astype(np.int32)  # (T, 2)
    if HAS_NUMBA and be.int8_activations:
        assert be._lane_experts(w, ids.reshape(-1)) == (tokens < 4)  # a decode step's few tokens: one call
    got = be.matmul_experts(x, w, ids)  # (T, k, N)
    for e in range(experts):
        rows, slots = np.nonzero(ids == e)
        if len(rows):
            np.testing.assert_array_equal(got[rows, slots], be.matmul(x[rows], w.expert(e)))


def test_no_tokens_give_an_empty_result(backend, rng):
    w = QuantExperts((random_weight("Q8_0", 2 * 8, 64, rng),), 2)
    got = run(backend, np.zeros((0, 64), np.float32), w, np.zeros((0, 2), np.int32))
    assert got.shape == (0, 2, 8)


def test_experts_must_divide_the_rows():
    blocks = np.zeros((10, 34), np.uint8)  # 10 Q8_0 rows of 32 values
    with pytest.raises(CheckpointError, match="does not hold 3 experts"):
        QuantExperts((QuantWeight(blocks, "Q8_0", (10, 32)),), 3)


def test_wgpu_upload_splits_between_whole_experts(rng, monkeypatch):
    from tests.conftest import AVAILABLE_BACKENDS

    if "wgpu" not in AVAILABLE_BACKENDS:
        pytest.skip("no WebGPU adapter here")
    from blazr.backends import get_backend

    be, experts, n = get_backend("wgpu"), 5, 16
    w = QuantExperts((random_weight("Q4_0", experts * n, 256, rng),), experts)  # 144 bytes a row
    monkeypatch.setattr(be.rt, "max_binding", 2 * n * 144 + 100)  # two experts a buffer -> 3 buffers
    (part,) = be._device_experts(w)
    monkeypatch.undo()
    assert [(first, end) for first, end, _ in part.buffers] == [(0, 2), (2, 4), (4, 5)]
    x = rng.standard_normal((4, 256)).astype(np.float32)
    ids = np.array([[4, 0], [1, 2], [3, 4], [2, 2]], np.int32)
    err = nmse(run(be, x, w, ids).astype(np.float64), reference.matmul_experts(x, dense_experts(w), ids))
    assert err <= NMSE_MAX


# ---- whole models: a MoE GGUF with quantized experts against its dequantized self --------------------------

MOE = ("mixtral", "qwen2_moe", "olmoe", "qwen3_moe", "granitemoe", "granitemoehybrid", "jamba")


def requantized_gguf(
    src, dst, experts_type: str, dequantized: bool, down_type: str | None = None, suffixes=("_exps.weight",)
) -> None:
    """Copy GGUF src to dst with the expert tensors (`*_exps`, or the names ending in `suffixes`) quantized to
    experts_type (the down projection to down_type when given); with `dequantized`, stored back as the F32
    values those blocks decode to."""
    import gguf

    reader = gguf.GGUFReader(src)
    writer = gguf.GGUFWriter(dst, reader.fields["general.architecture"].contents())
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        sub = field.types[-1] if len(field.types) > 1 else None
        writer.add_key_value(field.name, field.contents(), field.types[0], sub)
    for t in reader.tensors:
        data = np.array(t.data)
        if not t.name.endswith(suffixes):
            writer.add_tensor(
                t.name, data, raw_shape=list(reversed(t.shape.tolist())), raw_dtype=t.tensor_type
            )
            continue
        qtype = gguf.GGMLQuantizationType[down_type if down_type and "down" in t.name else experts_type]
        blocks = gguf.quants.quantize(data.astype(np.float32), qtype)  # (E, N, row_bytes)
        if dequantized:
            writer.add_tensor(t.name, gguf.quants.dequantize(blocks, qtype).astype(np.float32))
        else:
            writer.add_tensor(t.name, blocks, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def packed_and_dense_runs(name: str, be, tmp_path, experts_type: str, down_type: str | None = None):
    from blazr.loaders import load_checkpoint
    from blazr.models import build_model
    from blazr.models.layers.moe import SparseMoE
    from blazr.models.layers.moe_oai import ClampedSwiGLUMoE
    from tests.test_parity import GOLDEN, PROMPT_IDS, greedy_run

    runs = []
    for dequantized in (False, True):
        path = tmp_path / f"{name}_{experts_type}_{dequantized}.gguf"
        requantized_gguf(GOLDEN / "gguf" / f"{name}_f32.gguf", path, experts_type, dequantized, down_type)
        model = build_model(load_checkpoint(path), be)
        moe = next(layer.mlp for layer in model.layers if isinstance(layer.mlp, SparseMoE | ClampedSwiGLUMoE))
        assert isinstance(moe.gate_up_proj, QuantExperts) != dequantized  # never widened to float
        assert isinstance(moe.down_proj, QuantExperts) != dequantized
        runs.append(greedy_run(model, be, list(PROMPT_IDS), 16))
    return runs


@pytest.mark.parametrize("name", MOE)
def test_quantized_experts_run_packed_as_their_dequantized_self(name, tmp_path):
    """Q8_0 experts multiplied in their blocks (float32 activations) give the ids and logits of the same file
    with the experts stored as the F32 values those blocks decode to."""
    from blazr.backends.cpu import Backend

    be = Backend()
    be.set_int8_activations(False)
    (ids, logits), (want_ids, want_logits) = packed_and_dense_runs(name, be, tmp_path, "Q8_0")
    np.testing.assert_array_equal(ids, want_ids)
    assert np.abs(logits - want_logits).max() <= 1e-4


def test_a_fresh_backends_first_forward_is_the_same_as_its_later_ones(tmp_path):
    """A file with float32 attention and packed experts: the first request a new process serves gives the
    bits every later one does. The CPU backend's dense matmuls joined numba's pool only at the first packed
    matmul, so the first layer's router ran on OpenBLAS in the first prefill alone (CPUBackend.hold_packed)."""
    from blazr.backends.cpu import Backend
    from blazr.loaders import load_checkpoint
    from blazr.models import build_model
    from tests.test_parity import GOLDEN, PROMPT_IDS, greedy_run

    path = tmp_path / "granitemoe_q8_0.gguf"
    requantized_gguf(GOLDEN / "gguf" / "granitemoe_f32.gguf", path, "Q8_0", dequantized=False)
    be = Backend()
    model = build_model(load_checkpoint(path), be)
    runs = [greedy_run(model, be, list(PROMPT_IDS), 4) for _ in range(2)]
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    np.testing.assert_array_equal(runs[0][1], runs[1][1])


def test_quantized_experts_of_two_formats_on_int8_activations(tmp_path):
    """Q4_0 gate/up with Q8_0 down, on the CPU's default int8 activations: the greedy ids of the dequantized
    file. Rounding the activations to int8 moves the logits of this random model by about 2% (relative RMS;
    the kernels themselves are checked bit for bit above)."""
    from blazr.backends.cpu import Backend

    (ids, logits), (want_ids, want_logits) = packed_and_dense_runs(
        "qwen3_moe", Backend(), tmp_path, "Q4_0", "Q8_0"
    )
    np.testing.assert_array_equal(ids, want_ids)
    relative_rms = np.sqrt(np.mean((logits - want_logits) ** 2) / np.mean(want_logits**2))
    assert relative_rms <= 0.05, relative_rms


@pytest.mark.parametrize("name", ["qwen2_moe", "mixtral"])
def test_quantized_experts_on_wgpu(name, tmp_path):
    from tests.conftest import AVAILABLE_BACKENDS

    if "wgpu" not in AVAILABLE_BACKENDS:
        pytest.skip("no WebGPU adapter here")
    from blazr.backends import get_backend

    (ids, logits), (want_ids, want_logits) = packed_and_dense_runs(
        name, get_backend("wgpu"), tmp_path, "Q8_0"
    )
    np.testing.assert_array_equal(ids, want_ids)
    assert np.abs(logits - want_logits).max() <= 1e-4


@pytest.mark.parametrize("name", MOE)
def test_quantized_experts_are_never_read_dense(name, tmp_path):
    """Building the model reads the experts' blocks only: their dequantizing load() is never called."""
    import dataclasses

    from blazr.backends.cpu import Backend
    from blazr.loaders import load_checkpoint
    from blazr.models import build_model
    from tests.test_parity import GOLDEN

    def never_read():
        raise AssertionError("a quantized expert tensor was dequantized")

    path = tmp_path / "q8.gguf"
    requantized_gguf(GOLDEN / "gguf" / f"{name}_f32.gguf", path, "Q8_0", dequantized=False)
    checkpoint = load_checkpoint(path)
    checkpoint.tensors = {
        k: dataclasses.replace(t, _read=never_read) if "experts" in k else t
        for k, t in checkpoint.tensors.items()
    }
    build_model(checkpoint, Backend())


@pytest.mark.parametrize("name", ["qwen3_moe", "deepseek_v2"])
def test_engine_invariants_with_packed_experts(name, tmp_path):
    """Q8_0 experts on the CPU's int8 activations: decode steps take the one-call lane dots over every pair,
    prompts one packed matmul per expert, the F32 router numba's pool at every token count; batch == alone,
    chunked == one-shot, prefix hit == cold and preempted == uninterrupted still hold exactly."""
    from blazr.backends.cpu import Backend
    from blazr.engine import Engine
    from blazr.loaders import load_checkpoint
    from blazr.models import build_model
    from tests.test_batching_invariants import IdTokenizer, check_invariants
    from tests.test_parity import GOLDEN

    path = tmp_path / "q8.gguf"
    requantized_gguf(GOLDEN / "gguf" / f"{name}_f32.gguf", path, "Q8_0", dequantized=False)
    model = build_model(load_checkpoint(path), Backend())

    def make(num_ctx=64, **kw):
        return Engine(model, IdTokenizer(), model.be, num_ctx=num_ctx, **kw)

    prompts = [[1, 17, 99, 3, 250], [1, 64], [1, 5, 9, 11, 13, 17, 19, 23, 29, 31, 37], [1, 2, 3]]
    check_invariants(make, prompts, shared=list(range(40, 72)), max_tokens=10)


@pytest.mark.parametrize("device", ["cpu", "wgpu"])
def test_gpt_oss_mxfp4_experts_run_packed_as_their_dequantized_self(device, tmp_path):
    """GPT-OSS files carry their experts in MXFP4: kept packed, they give the ids and logits of the same file
    with the experts stored as the F32 values the MXFP4 blocks decode to."""
    from blazr.backends import get_backend
    from tests.conftest import AVAILABLE_BACKENDS

    if device not in AVAILABLE_BACKENDS:
        pytest.skip(f"no {device} here")
    from blazr.backends.cpu import Backend

    be = get_backend("wgpu") if device == "wgpu" else Backend()  # a CPU backend of its own: int8 off below
    if device == "cpu":
        be.set_int8_activations(False)
    (ids, logits), (want_ids, want_logits) = packed_and_dense_runs("gpt_oss", be, tmp_path, "MXFP4")
    np.testing.assert_array_equal(ids, want_ids)
    assert np.abs(logits - want_logits).max() <= 1e-4


def _released_mxfp4(ggml_rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """GGML MXFP4 rows (..., K/32 * 17) -> the released SafeTensors layout: blocks (..., K/32, 16) with value
    2i in the low and 2i + 1 in the high nibble of byte i, scales (..., K/32)."""
    blocks = ggml_rows.reshape(*ggml_rows.shape[:-1], k // 32, 17)
    scales, qs = blocks[..., 0], blocks[..., 1:]
    values = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)  # (..., K/32, 32) in order
    return (values[..., 0::2] | (values[..., 1::2] << 4)).astype(np.uint8), np.ascontiguousarray(scales)


def test_gpt_oss_released_mxfp4_safetensors_equal_the_mxfp4_gguf(tmp_path):
    """The released checkpoints' *_blocks / *_scales experts, repacked at load, are the very blocks a GGUF
    holds: the tiny GPT-OSS written both ways gives identical logits."""
    import json

    import gguf
    from safetensors.numpy import save_file

    from blazr.backends.cpu import Backend
    from blazr.loaders import load_checkpoint
    from blazr.models import build_model
    from tests.test_parity import GOLDEN, PROMPT_IDS, greedy_run
    from tests.tiny_models import tiny_config, tiny_weights

    cfg, w = tiny_config("gpt_oss"), tiny_weights("gpt_oss")
    q = gguf.GGMLQuantizationType.MXFP4
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}.mlp.experts."
        gate_up = w.pop(p + "gate_up_proj").transpose(0, 2, 1)  # (E, 2F, D) rows interleaved
        down = w.pop(p + "down_proj").transpose(0, 2, 1)  # (E, D, F)
        for name, rows in (("gate_up_proj", gate_up), ("down_proj", down)):
            ggml = gguf.quants.quantize(np.ascontiguousarray(rows), q)  # (E, R, K/32 * 17)
            w[p + name + "_blocks"], w[p + name + "_scales"] = _released_mxfp4(ggml, rows.shape[-1])
    hf = tmp_path / "hf"
    hf.mkdir()
    save_file({k: np.ascontiguousarray(a) for k, a in w.items()}, str(hf / "model.safetensors"))
    (hf / "config.json").write_text(json.dumps(cfg | {"quantization_config": {"quant_method": "mxfp4"}}))
    gguf_path = tmp_path / "mxfp4.gguf"
    requantized_gguf(GOLDEN / "gguf" / "gpt_oss_f32.gguf", gguf_path, "MXFP4", dequantized=False)
    runs = []
    for path in (hf, gguf_path):
        be = Backend()
        be.set_int8_activations(False)
        model = build_model(load_checkpoint(path), be)
        assert isinstance(model.layers[0].mlp.gate_up_proj, QuantExperts)
        runs.append(greedy_run(model, be, list(PROMPT_IDS), 16))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    np.testing.assert_allclose(runs[0][1], runs[1][1], atol=1e-5)
