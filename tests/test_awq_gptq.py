"""AWQ and GPTQ int4 SafeTensors checkpoints (blazr/loaders/awq_gptq.py, blazr/quant/int4.py): tiny
checkpoints are quantized and packed with numpy per each format's published layout (tests/int4_checkpoints.py), then

* the weights blazr loads, dense and as I4Z blocks, equal the unpacked reference (q - z) * s exactly;
* the packed matmul (numpy and numba on the CPU, WGSL on wgpu) matches the float64 product (NMSE 1e-10:
  only float32 rounding of the sums, as tests/test_quant_matmul.py explains) and the packed embed is exact;
* a model run from the int4 checkpoint picks the same greedy ids as the same model from its dequantized
  weights written as plain float32 SafeTensors (the weights are identical, only summation order differs);
* bad checkpoints fail with a CheckpointError or UnsupportedError naming the file and what is wrong.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from blazr.backends import get_backend
from blazr.backends.cpu import HAS_NUMBA
from blazr.backends.cpu import Backend as CPUBackend
from blazr.commands.models import info_rows
from blazr.errors import CheckpointError, UnsupportedError
from blazr.loaders import load_checkpoint
from blazr.model_dir import list_models, quantization_name
from blazr.models import build_model
from blazr.models.base import packed_weight
from blazr.quant import QuantRowStack, QuantWeight, int4, stack_rows
from blazr.quant.ggml_blocks import dequantize
from tests.conftest import AVAILABLE_BACKENDS
from tests.int4_checkpoints import (
    QUANTIZED,
    Int4Layer,
    pack_gptq,
    random_weights,
    wide_config,
    write_dense_checkpoint,
    write_int4_checkpoint,
)
from tests.test_quant_models import greedy_ids
from tests.tiny_models import tiny_config

NMSE_MAX = 1e-10
BLOCK, STEPS = 16, 24
WEIGHT = "model.layers.0.mlp.up_proj.weight"
PROMPT = [5, 17, 99, 3, 42, 7, 200, 11, 64, 8, 150, 31, 77]  # 13 tokens: a prompt kernel, not the row dots


@dataclass(frozen=True)
class Case:
    method: str
    group: int
    sym: bool = False
    act_order: bool = False
    v1: bool = True
    model: str = "llama"
    wide: bool = True  # hidden 128 / FFN 256, so groups of 128 fit

    def __str__(self) -> str:
        parts = [self.method, f"g{self.group}", self.model + ("-wide" if self.wide else "")]
        if self.method == "gptq":
            parts += [
                "sym" if self.sym else "asym",
                "act" if self.act_order else "",
                "v1" if self.v1 else "v2",
            ]
        return "-".join(p for p in parts if p)

    def config(self) -> dict:
        return wide_config(self.model) if self.wide else tiny_config(self.model)

    def write(self, directory, **kwargs) -> dict[str, np.ndarray]:
        cfg = self.config()
        weights = random_weights(cfg, seed=11 if self.model == "llama" else 23)
        return write_int4_checkpoint(
            directory, cfg, weights, self.method, self.group, self.sym, self.act_order, self.v1, **kwargs
        )


LAYER_CASES = [
    Case("awq", 32),
    Case("awq", 128),
    Case("awq", -1),
    Case("gptq", 32, sym=True),
    Case("gptq", 128, act_order=True),
    Case("gptq", 64, act_order=True, v1=False),
    Case("gptq", 128, sym=True, act_order=True, v1=False),
    Case("gptq", -1, sym=True),
]
MODEL_CASES = [
    Case("awq", 32, wide=False),
    Case("awq", 128, model="qwen2"),
    Case("gptq", 128, sym=True),
    Case("gptq", 32, act_order=True, model="qwen2", wide=False),
    Case("gptq", 64, act_order=True, v1=False),
    Case("gptq", -1, sym=True, wide=False),
]


def backends():
    """CPU with the numpy reference kernels, CPU with numba, and wgpu where there is an adapter."""
    out = [pytest.param(("cpu", False), id="cpu-numpy")]
    if HAS_NUMBA:
        out.append(pytest.param(("cpu", True), id="cpu-numba"))
    if "wgpu" in AVAILABLE_BACKENDS:
        out.append(pytest.param(("wgpu", None), id="wgpu"))
    return out


def make_backend(spec):
    """The exactness checks here run float32 activations; int8 ones (the CPU default where its int8 GEMM
    runs) have their own bounds for I4Z as for every format (tests/test_quant_int8*.py)."""
    name, fast = spec
    if name != "cpu":
        return get_backend("wgpu")
    backend = CPUBackend(fast_kernels=fast)
    backend.set_int8_activations(False)
    return backend


def quantized_names(reference: dict) -> list[str]:
    return [n for n in reference if n.endswith(".weight") and n.split(".")[-2] in QUANTIZED]


def nmse(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.sum((got - want) ** 2) / max(np.sum(want**2), 1e-300))


def unpermuted(blocks: np.ndarray, shape: tuple[int, int], perm) -> np.ndarray:
    """The I4Z rows decoded by the numpy spec, columns back in input order."""
    packed_order = dequantize(blocks, "I4Z", shape)  # (N, K)
    if perm is None:
        return packed_order
    out = np.empty_like(packed_order)
    out[:, perm] = packed_order
    return out


# ---- the weights --------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", LAYER_CASES, ids=str)
def test_dequantized_weights_equal_reference(tmp_path, case):
    reference = case.write(tmp_path)
    ckpt = load_checkpoint(tmp_path)
    assert not any(n.endswith((".qweight", ".qzeros", ".scales", ".g_idx")) for n in ckpt.tensors)
    assert set(ckpt.tensors) == set(reference)  # biases and unquantized layers pass through
    reordered = 0
    for name in quantized_names(reference):
        tensor, want = ckpt.tensors[name], reference[name]
        assert (tensor.dtype, tensor.shape) == ("I4Z", want.shape)
        np.testing.assert_array_equal(tensor.load(), want)
        perm = tensor.input_perm  # None also with act-order when a layer has one group (K = 128)
        reordered += perm is not None
        np.testing.assert_array_equal(unpermuted(tensor.load_blocks(), want.shape, perm), want)
    assert bool(reordered) == case.act_order


def test_awq_and_gptq_unpack_known_nibbles():
    """One word per layout, nibble by nibble: AWQ's interleaved order and GPTQ's z - 1 (even z = 16)."""
    word = np.array([[0x76543210]], dtype=np.uint32).view(np.int32)  # nibble i = i
    assert int4.unpack_along_cols(word, int4.AWQ_ORDER).tolist() == [[0, 4, 1, 5, 2, 6, 3, 7]]
    assert int4.unpack_along_rows(word).ravel().tolist() == list(range(8))
    layer = Int4Layer(
        np.zeros((8, 8), np.int64), np.arange(9, 17).reshape(1, 8), np.ones((1, 8), np.float16), np.zeros(8)
    )
    packed = pack_gptq(layer, v1=True)
    parts = int4.gptq_parts(packed["qweight"], packed["qzeros"], packed["scales"], np.zeros(8), 1)
    assert parts.zeros.tolist() == [list(range(9, 17))]  # stored 8..15, read back plus one, unmasked


# ---- the packed matmul --------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", backends())
@pytest.mark.parametrize("case", [LAYER_CASES[1], LAYER_CASES[4], LAYER_CASES[5]], ids=str)
def test_matmul_matches_float64(tmp_path, case, spec, rng):
    be = make_backend(spec)
    reference = case.write(tmp_path)
    ckpt = load_checkpoint(tmp_path)
    for name in ("model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.down_proj.weight"):
        w, want = packed_weight(ckpt.tensors[name]), reference[name].astype(np.float64)
        assert be.supports("matmul", "f32", w.format) and be.supports("embed", "f32", w.format)
        for t in (1, 5, 13):
            x = rng.standard_normal((t, want.shape[1])).astype(np.float32)
            got = be.download(be.matmul(be.upload(x), w))
            assert got.shape == (t, want.shape[0])
            err = nmse(got.astype(np.float64), x.astype(np.float64) @ want.T)
            assert err <= NMSE_MAX, f"{name} T={t}: NMSE {err:.2e}"
        ids = np.array([3, 0, want.shape[0] - 1, 3], dtype=np.int32)
        np.testing.assert_array_equal(be.download(be.embed(w, be.upload(ids))), want[ids].astype(np.float32))


@pytest.mark.parametrize("spec", backends())
def test_fused_rows_with_different_orders(tmp_path, spec, rng):
    """Act-order q, k and v each have their own input order: they stack as parts, one matmul call."""
    be = make_backend(spec)
    reference = Case("gptq", 32, act_order=True).write(tmp_path)
    ckpt = load_checkpoint(tmp_path)
    names = [f"model.layers.0.self_attn.{p}.weight" for p in ("q_proj", "k_proj", "v_proj")]
    parts = [packed_weight(ckpt.tensors[n]) for n in names]
    assert all(p.perm is not None for p in parts)
    fused = stack_rows(parts)
    assert isinstance(fused, QuantRowStack) and len(fused.parts) == 3
    same = stack_rows([parts[0], parts[0].rows(0, 32)])  # one order: concatenated into one weight
    assert isinstance(same, QuantWeight) and same.perm is parts[0].perm
    want = np.concatenate([reference[n] for n in names]).astype(np.float64)
    x = rng.standard_normal((3, want.shape[1])).astype(np.float32)
    got = be.download(be.matmul(be.upload(x), fused))
    assert nmse(got.astype(np.float64), x.astype(np.float64) @ want.T) <= NMSE_MAX


# ---- models ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", backends())
@pytest.mark.parametrize("case", MODEL_CASES, ids=str)
def test_model_matches_its_dequantized_weights(tmp_path, case, spec):
    reference = case.write(tmp_path / "int4")
    dense_dir = write_dense_checkpoint(tmp_path / "dense", case.config(), reference)
    be = make_backend(spec)
    packed = build_model(load_checkpoint(tmp_path / "int4"), be)
    dense = build_model(load_checkpoint(dense_dir), be)
    mlp, attn = packed.layers[0].mlp, packed.layers[0].self_attn
    assert isinstance(mlp.down_proj, QuantWeight) and mlp.down_proj.format == "I4Z"
    assert isinstance(attn.qkv_proj, QuantRowStack if case.act_order else QuantWeight)
    assert greedy_ids(packed, PROMPT, STEPS) == greedy_ids(dense, PROMPT, STEPS)


@pytest.mark.skipif(not HAS_NUMBA, reason="numba is not installed")
@pytest.mark.parametrize("case", [MODEL_CASES[0], MODEL_CASES[-1]], ids=str)
def test_int8_activations_stay_close_to_float(tmp_path, case):
    """I4Z with int8 activations (the CPU default where its int8 GEMM runs): the 13-token prompt's logits
    (int8 GEMM where the CPU has one) and 8 teacher-forced decode steps (int8 row dots) within 10% (relative
    L2) of the float32 path's, argmax agreeing on at least 80% of the positions, the floors of the GGUF int8
    tests (tests/test_quant_int8.py)."""
    from blazr.models.batch import ForwardBatch

    case.write(tmp_path)
    models = []
    for int8 in (True, False):
        backend = CPUBackend()
        backend.set_int8_activations(int8)
        models.append(build_model(load_checkpoint(tmp_path), backend))
    caches = [m.make_cache(8, 16) for m in models]
    prompt = [m.be.download(m(ForwardBatch.single(PROMPT, 0, list(range(8)), 16, all_logits=True), c))
              for m, c in zip(models, caches, strict=True)]  # fmt: skip
    rows, want_rows = [prompt[0]], [prompt[1]]
    token = int(np.argmax(prompt[1][-1]))
    for i in range(8):
        step = ForwardBatch.single([token], len(PROMPT) + i, list(range(8)), 16)
        got, want = (m.be.download(m(step, c))[-1] for m, c in zip(models, caches, strict=True))
        rows.append(got[None])
        want_rows.append(want[None])
        token = int(np.argmax(want))
    got, want = np.concatenate(rows), np.concatenate(want_rows)  # (13 + 8, V) each
    errors = np.linalg.norm(got - want, axis=1) / np.linalg.norm(want, axis=1)
    assert 0 < errors.max() <= 0.10, np.round(errors, 3)  # > 0: the int8 path did run
    assert np.mean(np.argmax(got, axis=1) == np.argmax(want, axis=1)) >= 0.80


class DenseOnlyCPU(CPUBackend):
    """The CPU backend with no packed formats: every int4 weight is dequantized at load."""

    weight_formats = ()


@pytest.mark.parametrize(
    "case, scales",
    [(Case("gptq", 16, act_order=True, wide=False), "F16"), (Case("awq", 32, wide=False), "F32")],
    ids=["group16", "f32-scales"],
)
def test_layouts_without_i4z_blocks_load_dense(tmp_path, case, scales):
    """Groups of 16 (a block would span two) and F32 scales (not exact in f16) load as exact float32."""
    reference = case.write(tmp_path / "int4")
    if scales == "F32":
        rewrite_tensors(tmp_path / "int4", lambda t: {k: v.astype(np.float32) if k.endswith(".scales") else v
                                                       for k, v in t.items()})  # fmt: skip
    ckpt = load_checkpoint(tmp_path / "int4")
    name = "model.layers.0.mlp.down_proj.weight"
    assert ckpt.tensors[name].dtype == "F32"
    np.testing.assert_array_equal(ckpt.tensors[name].load(), reference[name])
    model = build_model(ckpt, CPUBackend())
    dense = build_model(
        load_checkpoint(write_dense_checkpoint(tmp_path / "d", case.config(), reference)), CPUBackend()
    )
    assert greedy_ids(model, PROMPT, 8) == greedy_ids(dense, PROMPT, 8)


def test_backend_without_i4z_dequantizes_at_load(tmp_path):
    reference = Case("gptq", 32, act_order=True, wide=False).write(tmp_path)
    model = build_model(load_checkpoint(tmp_path), DenseOnlyCPU(fast_kernels=False))
    down = model.layers[1].mlp.down_proj
    assert isinstance(down, np.ndarray)
    np.testing.assert_array_equal(down, reference["model.layers.1.mlp.down_proj.weight"])


# ---- detection, reporting and errors -----------------------------------------------------------------


def rewrite_tensors(directory, change) -> None:
    path = directory / "model.safetensors"
    tensors = change(load_file(str(path)))
    save_file(tensors, str(path))


def rewrite_settings(directory, **changes) -> None:
    path = directory / "config.json"
    config = json.loads(path.read_text())
    config["quantization_config"] |= changes
    path.write_text(json.dumps(config))


@pytest.mark.parametrize(
    "method, settings_file",
    [("awq", "quant_config.json"), ("gptq", "quantize_config.json"), ("awq", None), ("gptq", None)],
)
def test_settings_from_side_files_and_tensor_names(tmp_path, method, settings_file):
    act_order = method == "gptq" and settings_file is not None  # without g_idx the groups are runs of K
    case = Case(method, 32, act_order=act_order, wide=False)
    reference = case.write(tmp_path, settings_file=settings_file or "none.json")
    if settings_file is None:
        (tmp_path / "none.json").unlink()  # no settings anywhere: the tensor names and shapes tell
        if method == "gptq":  # without g_idx too: a qweight as wide as its scales is packed along K
            rewrite_tensors(tmp_path, lambda t: {k: v for k, v in t.items() if not k.endswith(".g_idx")})
    elif method == "awq":  # AutoAWQ's own file names no quant_method
        settings = {"zero_point": True, "q_group_size": 32, "w_bit": 4, "version": "GEMM"}
        (tmp_path / settings_file).write_text(json.dumps(settings))
    ckpt = load_checkpoint(tmp_path)
    assert ckpt.tensors[WEIGHT].dtype == "I4Z"
    name = quantization_name(ckpt.config)
    assert name.startswith(f"{method} 4-bit") and (settings_file is None or "g32" in name)
    assert act_order == ("act-order" in name)
    if settings_file is None:  # the weights are still read right
        np.testing.assert_array_equal(ckpt.tensors[WEIGHT].load(), reference[WEIGHT])


def test_info_and_list_report_the_quantization(tmp_path):
    Case("awq", 32, wide=False).write(tmp_path / "tiny-awq")
    rows = dict(info_rows(load_checkpoint(tmp_path / "tiny-awq")))
    assert rows["quantization"].startswith("awq 4-bit g32 (")
    assert "I4Z x14" in rows["quantization"]  # 2 layers x 7 projections
    assert rows["parameters"].endswith(
        f"({sum(a.size for a in random_weights(tiny_config('llama'), 11).values()):,})"
    )
    [entry] = list_models(tmp_path)
    assert entry.quant == "awq 4-bit g32" and entry.error == ""


def test_bits_other_than_4_are_unsupported(tmp_path):
    Case("gptq", 32, wide=False).write(tmp_path)
    rewrite_settings(tmp_path, bits=8)
    with pytest.raises(UnsupportedError, match=r"config\.json: gptq weights of 8 bits are not supported"):
        load_checkpoint(tmp_path)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"quant_method": "bitsandbytes"}, "quant_method 'bitsandbytes' is not supported"),
        ({"version": "gemv"}, "AWQ version 'gemv' is not supported"),
    ],
)
def test_unknown_methods_and_layouts_are_unsupported(tmp_path, changes, message):
    Case("awq", 32, wide=False).write(tmp_path)
    rewrite_settings(tmp_path, **changes)
    with pytest.raises(UnsupportedError, match=message):
        load_checkpoint(tmp_path)


def test_gptq_marlin_format_is_unsupported(tmp_path):
    Case("gptq", 32, wide=False).write(tmp_path)
    rewrite_settings(tmp_path, checkpoint_format="marlin")
    with pytest.raises(UnsupportedError, match="checkpoint_format 'marlin' is not supported"):
        load_checkpoint(tmp_path)


def _drop_scales(t):
    return {k: v for k, v in t.items() if k != "model.layers.0.self_attn.o_proj.scales"}


def _short_scales(t):
    return t | {"model.layers.1.mlp.up_proj.scales": t["model.layers.1.mlp.up_proj.scales"][:1]}


def _narrow_qweight(t):
    return t | {"model.layers.0.mlp.gate_proj.qweight": t["model.layers.0.mlp.gate_proj.qweight"][:, :-1]}


@pytest.mark.parametrize("method", ["awq", "gptq"])
@pytest.mark.parametrize(
    "change, message",
    [
        (_drop_scales, r"model\.safetensors: model\.layers\.0\.self_attn\.o_proj\.scales is missing"),
        (_short_scales, r"model\.layers\.1\.mlp\.up_proj\.scales has shape \[1, \d+\], expected"),
        (_narrow_qweight, r"model\.layers\.0\.mlp\.gate_proj\.(scales|qzeros) has shape"),
    ],
    ids=["missing-scales", "short-scales", "narrow-qweight"],
)
def test_broken_checkpoints_name_the_tensor(tmp_path, method, change, message):
    Case(method, 32, wide=False).write(tmp_path)
    rewrite_tensors(tmp_path, change)
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(tmp_path)


def test_g_idx_outside_the_groups_fails_on_load(tmp_path):
    Case("gptq", 32, act_order=True, wide=False).write(tmp_path)
    name = "model.layers.0.self_attn.k_proj.g_idx"
    rewrite_tensors(tmp_path, lambda t: t | {name: t[name] + 5})
    tensor = load_checkpoint(tmp_path).tensors["model.layers.0.self_attn.k_proj.weight"]
    with pytest.raises(CheckpointError, match=r"k_proj\.g_idx names groups outside 0\.\.1"):
        tensor.load()
