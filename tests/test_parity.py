"""Parity with transformers on tiny random-weight checkpoints of every family (design.md §11.11).

Each model is written here as SafeTensors F32/F16/BF16, and read as GGUF F32/F16 files that llama.cpp's own
convert_hf_to_gguf.py made from the same weights (tests/golden/gguf/), loaded through blazr on the CPU backend
and run greedily for 64 tokens. The ids and logits transformers produced from the same stored weights
are committed in tests/golden/ (made by tests/parity/make_reference.py), so this test needs numpy only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.tiny_models import (
    MODELS,
    NEW_TOKENS,
    PROMPT_IDS,
    gguf_keeps_f32,
    weights_digest,
    write_safetensors,
)

pytestmark = pytest.mark.parity

GOLDEN = Path(__file__).parent / "golden"

# Two correct float32 runs differ by <= 7e-5 for the Llama family and 1.3e-4 for Qwen3 (transformers cached vs
# uncached, and blazr vs transformers; logits have std ~4). A wrong weight rounding moves logits by >= 2.7e-2
# (F16 vs GGUF-F16 norms) and the smallest greedy margin over 64 tokens is 4.7e-3. So 1e-3 sits 8x above the
# noise. Gemma 3's six sandwich-norm layers with peaked qk-normed attention amplify float32 rounding:
# transformers' own cached and uncached runs of it differ by 1.0e-3 and blazr's by up to 8.7e-4, so it gets
# 3e-3 (its smallest margin is 2.7e-2).
LOGIT_ATOL = 1e-3
LOGIT_ATOL_FOR = {"gemma3": 3e-3}
TOP_N = 5  # vLLM's check_logprobs_close: at the first differing id, each side's token in the other's top N

# (format, dtype on disk, golden storage): the GGUF F16 golden keeps 1-D tensors in F32, as llama.cpp does.
STORAGES = [
    ("safetensors", "float32", "f32"),
    ("safetensors", "float16", "f16"),
    ("safetensors", "bfloat16", "bf16"),
    ("gguf", "F32", "f32"),
    ("gguf", "F16", "gguf_f16"),
]
# llama.cpp's converter writes Mistral as "llama" without its sliding window, so a Mistral GGUF is a
# full-attention Llama (llama.cpp runs it so too): test_converted_mistral_has_no_window checks that instead.
# StarCoder2's converter drops the window too: tests/test_family_neox_falcon.py checks its GGUF files.
# Falcon-RW: the converter fails on its post_attention_layernorm (llama.cpp's falcon: parallel, no ALiBi).
NO_GGUF = {"mistral", "starcoder2", "falcon_rw"}
CASES = [
    pytest.param(m, *s, id=f"{m}-{s[0]}-{s[1]}")
    for m in MODELS
    for s in STORAGES
    if not (s[0] == "gguf" and m in NO_GGUF)
]

BLOCK_SIZE = 16
BLOCK_TABLE = [2, 0, 4, 1, 3]  # 80 slots for the 72 positions, out of order so paged addressing is exercised


def load_golden(name: str, storage: str) -> dict[str, np.ndarray]:
    path = GOLDEN / f"{name}_{storage}.npz"
    if not path.exists():
        pytest.fail(f"{path} is missing: run tests/parity/make_reference.py (see tests/parity/README.md)")
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


def write_checkpoint(name: str, fmt: str, dtype: str, tmp_path: Path) -> Path:
    """SafeTensors written here; GGUF as llama.cpp's own converter wrote it (committed, made by
    tests/parity/make_gguf.py from the same weights)."""
    if fmt == "safetensors":
        write_safetensors(name, tmp_path, dtype)
        return tmp_path
    path = GOLDEN / "gguf" / f"{name}_{dtype.lower()}.gguf"
    if not path.exists():
        pytest.fail(f"{path} is missing: run tests/parity/make_gguf.py (see tests/parity/README.md)")
    return path


def expected_disk_dtype(fmt: str, dtype: str, shape: tuple[int, ...], name: str = "") -> str:
    if fmt == "safetensors":
        return {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}[dtype]
    return "F32" if gguf_keeps_f32(shape, name) else dtype


def greedy_run(model, backend, prompt: list[int], new_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """Prefill the prompt, then decode one token at a time; returns ids (N,) and logits (P + N, V) of
    every prompt and generated position."""
    from blazr.models.batch import ForwardBatch

    cache = model.make_cache(len(BLOCK_TABLE), BLOCK_SIZE)
    batch = ForwardBatch.single(prompt, 0, BLOCK_TABLE, BLOCK_SIZE, all_logits=True)
    rows = [np.asarray(backend.download(model(batch, cache)), dtype=np.float32)]  # (P, V)
    ids: list[int] = []
    for step in range(new_tokens):
        ids.append(int(np.argmax(rows[-1][-1])))  # greedy; ties go to the lower id, as in torch
        batch = ForwardBatch.single([ids[-1]], len(prompt) + step, BLOCK_TABLE, BLOCK_SIZE)
        rows.append(np.asarray(backend.download(model(batch, cache)), dtype=np.float32))  # (1, V)
    return np.asarray(ids, dtype=np.int32), np.concatenate(rows)


def first_difference(got: np.ndarray, want: np.ndarray, got_logits, want_logits) -> str:
    """vLLM's report at the first differing greedy id: position, and each token's rank on the other side."""
    pos = int(np.flatnonzero(got != want)[0])
    row = len(PROMPT_IDS) - 1 + pos
    rank_in_ref = int((want_logits[row] > want_logits[row, got[pos]]).sum())
    rank_in_blazr = int((got_logits[row] > got_logits[row, want[pos]]).sum())
    close = rank_in_ref < TOP_N and rank_in_blazr < TOP_N
    return (
        f"greedy ids differ first at generated position {pos}: blazr {int(got[pos])}, transformers "
        f"{int(want[pos])}; blazr's token is rank {rank_in_ref} in transformers' logits and "
        f"transformers' is rank {rank_in_blazr} in blazr's ({'' if close else 'NOT '}within top {TOP_N})\n"
        f"blazr:        {got.tolist()}\ntransformers: {want.tolist()}"
    )


@pytest.mark.parametrize("name, fmt, dtype, storage", CASES)
def test_tiny_model_matches_transformers(name, fmt, dtype, storage, tmp_path):
    from blazr.backends import get_backend
    from blazr.loaders import load_checkpoint
    from blazr.models import build_model

    golden = load_golden(name, storage)
    assert str(golden["weights_sha256"]) == weights_digest(name, storage), (
        f"tests/tiny_models.py no longer makes the weights {name}_{storage}.npz was made from: "
        "rerun tests/parity/make_reference.py"
    )
    checkpoint = load_checkpoint(write_checkpoint(name, fmt, dtype, tmp_path))
    tensors = checkpoint.tensors.items()
    wrong = {k: t.dtype for k, t in tensors if t.dtype != expected_disk_dtype(fmt, dtype, t.shape, k)}
    assert not wrong, f"tensors stored in an unexpected dtype: {wrong}"

    backend = get_backend("cpu")
    ids, logits = greedy_run(build_model(checkpoint, backend), backend, list(PROMPT_IDS), NEW_TOKENS)

    want_ids, want_logits = golden["ids"], golden["logits"]  # (N,), (P + N, V)
    assert np.array_equal(ids, want_ids), first_difference(ids, want_ids, logits, want_logits)
    assert logits.shape == want_logits.shape
    err = np.abs(logits - want_logits)  # (P + N, V)
    pos, atol = int(err.max(axis=1).argmax()), LOGIT_ATOL_FOR.get(name, LOGIT_ATOL)
    assert err.max() <= atol, (
        f"logits differ by up to {err.max():.2e} (tolerance {atol:.0e}), worst at position {pos} "
        f"(prompt length {len(PROMPT_IDS)}); per-position max: {np.round(err.max(axis=1), 5).tolist()}"
    )


@pytest.mark.parametrize("name", MODELS)
def test_tiny_model_on_wgpu_gives_the_cpu_greedy_ids(name, tmp_path):
    """Every family on the WGSL backend (lavapipe in CI), float32: the golden ids the CPU test holds blazr to."""
    from blazr.backends import get_backend
    from blazr.loaders import load_checkpoint
    from blazr.models import build_model
    from tests.conftest import AVAILABLE_BACKENDS

    if "wgpu" not in AVAILABLE_BACKENDS:
        pytest.skip("no WebGPU adapter here")
    golden = load_golden(name, "f32")
    backend = get_backend("wgpu")
    model = build_model(load_checkpoint(write_checkpoint(name, "safetensors", "float32", tmp_path)), backend)
    ids, logits = greedy_run(model, backend, list(PROMPT_IDS), NEW_TOKENS)
    assert np.array_equal(ids, golden["ids"]), first_difference(ids, golden["ids"], logits, golden["logits"])
    assert np.abs(logits - golden["logits"]).max() <= LOGIT_ATOL_FOR.get(name, LOGIT_ATOL)


def test_converted_mistral_has_no_window():
    """A Mistral GGUF from llama.cpp's converter loses sliding_window: blazr reads it as full attention."""
    from blazr.backends import get_backend
    from blazr.loaders import load_checkpoint
    from blazr.models import build_model

    checkpoint = load_checkpoint(GOLDEN / "gguf" / "mistral_f32.gguf")
    assert not checkpoint.config.get("sliding_window")
    model = build_model(checkpoint, get_backend("cpu"))
    assert [layer.self_attn.window for layer in model.layers] == [0, 0]
