"""LoRA adapters on the tiny models against transformers' PeftModel (tests/golden/lora, made by
tests/parity/make_lora_reference.py from adapters the peft package wrote), through the model and the engine."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from blazr.errors import LoraLoadError, LoraNotFoundError
from blazr.loaders.lora import read_lora
from blazr.models.batch import ForwardBatch
from blazr.models.lora import bind_adapter
from tests.tiny_lora import CASES, GOLDEN
from tests.tiny_models import NEW_TOKENS, PROMPT_IDS, weights_digest, write_safetensors

LOGIT_ATOL = 1e-3  # as tests/test_parity.py: float32 noise is <= 1.3e-4, the smallest margin here 1.5e-3
BLOCK_SIZE = 16
BLOCK_TABLE = [2, 0, 4, 1, 3]
GGUF_BASES = Path(__file__).parent / "golden" / "gguf"


def golden(case: str) -> dict[str, np.ndarray]:
    with np.load(GOLDEN / case / "reference.npz") as f:
        out = {k: f[k] for k in f.files}
    assert str(out["weights_sha256"]) == weights_digest(CASES[case].base, "f32"), (
        "tests/tiny_models.py no longer makes the base weights: rerun tests/parity/make_lora_reference.py"
    )
    return out


def base_model(name: str, backend, tmp_path: Path, fmt: str = "safetensors"):
    from blazr.loaders import load_checkpoint
    from blazr.models import build_model

    path = GGUF_BASES / f"{name}_f32.gguf" if fmt == "gguf" else write_safetensors(name, tmp_path, "float32")
    checkpoint = load_checkpoint(path if fmt == "gguf" else tmp_path)
    return build_model(checkpoint, backend)


def heads(model) -> dict[str, int]:
    return {"q_proj": model.args.num_attention_heads, "k_proj": model.args.num_key_value_heads}


def greedy(model, backend, adapter, new_tokens: int = NEW_TOKENS) -> tuple[np.ndarray, np.ndarray]:
    """ids (N,) and logits (P + N, V) of a greedy run with `adapter` on every step."""
    prompt = list(PROMPT_IDS)
    cache = model.make_cache(len(BLOCK_TABLE), BLOCK_SIZE)
    batch = ForwardBatch.single(prompt, 0, BLOCK_TABLE, BLOCK_SIZE, all_logits=True)
    batch.adapters = (adapter,)
    rows = [np.asarray(backend.download(model(batch, cache)), dtype=np.float32)]  # (P, V)
    ids: list[int] = []
    for step in range(new_tokens):
        ids.append(int(np.argmax(rows[-1][-1])))
        batch = ForwardBatch.single([ids[-1]], len(prompt) + step, BLOCK_TABLE, BLOCK_SIZE)
        batch.adapters = (adapter,)
        rows.append(np.asarray(backend.download(model(batch, cache)), dtype=np.float32))  # (1, V)
    return np.asarray(ids, dtype=np.int32), np.concatenate(rows)


def assert_matches(case: str, ids: np.ndarray, logits: np.ndarray, atol: float = LOGIT_ATOL) -> None:
    want = golden(case)
    assert ids.tolist() == want["ids"].tolist()
    np.testing.assert_allclose(logits, want["logits"], atol=atol, rtol=0)


@pytest.mark.parametrize("case", list(CASES))
def test_peft_adapter_matches_transformers(case, tmp_path):
    from blazr.backends import get_backend

    backend = get_backend("cpu")
    model = base_model(CASES[case].base, backend, tmp_path)
    adapter = bind_adapter(model, case, read_lora(GOLDEN / case))
    assert_matches(case, *greedy(model, backend, adapter))
    # the adapter changes the output: the base model alone gives other ids
    base_ids, _ = greedy(model, backend, None, 16)
    assert base_ids.tolist() != golden(case)["ids"][:16].tolist()


@pytest.mark.parametrize(
    "base_format, adapter_file",
    [("gguf", "adapter_f32.gguf"), ("gguf", "."), ("safetensors", "adapter_f32.gguf")],
    ids=["gguf-base-gguf-adapter", "gguf-base-peft-adapter", "safetensors-base-gguf-adapter"],
)
def test_gguf_adapter_and_base(base_format, adapter_file, tmp_path):
    """llama.cpp's convert_lora_to_gguf.py permutes q/k rows of lora_b as it does the base weights: read back."""
    from blazr.backends import get_backend

    backend = get_backend("cpu")
    model = base_model("llama", backend, tmp_path, base_format)
    lora = read_lora(GOLDEN / "llama_all" / adapter_file, heads(model))
    assert lora.format == ("gguf" if adapter_file.endswith(".gguf") else "peft")
    assert_matches("llama_all", *greedy(model, backend, bind_adapter(model, "a", lora)))


def test_adapter_on_every_backend(backend, tmp_path):
    model = base_model("llama", backend, tmp_path)
    adapter = bind_adapter(model, "a", read_lora(GOLDEN / "llama_all"))
    assert_matches("llama_all", *greedy(model, backend, adapter), atol=2e-3)


def test_adapter_on_packed_quantized_base(tmp_path):
    """A Q8_0 base stays packed; the update runs beside its packed matmuls. Reference: the same adapter on the
    same file dequantized at load. Float activations on both sides: the int8 rounding of activations (the CPU
    default, as llama.cpp) moves logits by more than this adapter's smallest greedy margin."""
    from blazr.backends.cpu import Backend as CPUBackend
    from blazr.loaders import load_checkpoint
    from blazr.models import build_model
    from blazr.quant import QuantWeight
    from tests.gguf_writer import write_gguf
    from tests.tiny_models import tiny_config, tiny_weights

    class DenseOnlyCPU(CPUBackend):
        weight_formats = ()

    path = write_gguf(
        tmp_path / "llama-q8_0.gguf", tiny_config("llama"), tiny_weights("llama"), quantize="Q8_0"
    )
    packed = build_model(load_checkpoint(path), CPUBackend(), dtype="f32")
    assert isinstance(packed.layers[0].self_attn.qkv_proj, QuantWeight)
    dense = build_model(load_checkpoint(path), DenseOnlyCPU(fast_kernels=False))
    lora = read_lora(GOLDEN / "llama_all", heads(packed))
    got_ids, got = greedy(packed, packed.be, bind_adapter(packed, "a", lora), 16)
    want_ids, want = greedy(dense, dense.be, bind_adapter(dense, "a", lora), 16)
    assert got_ids.tolist() == want_ids.tolist()
    np.testing.assert_allclose(got, want, atol=LOGIT_ATOL)


def test_mixed_batch_equals_each_alone(tmp_path):
    """Three adapters and none in one engine: every sequence gets the tokens it gets alone (and
    transformers' PeftModel gives)."""
    from blazr.backends import get_backend
    from blazr.engine import Engine, SamplingParams

    backend = get_backend("cpu")
    model = base_model("llama", backend, tmp_path)
    engine = Engine(model, _IdTokenizer(), backend, num_ctx=128, block_size=BLOCK_SIZE, max_seqs=8)
    for case in ("llama_all", "llama_attn", "llama_mlp_rslora"):
        engine.loras.load(case, read_lora(GOLDEN / case))
    names = ["llama_all", None, "llama_attn", "llama_mlp_rslora"]

    def run(selected: list[str | None]) -> dict[str, list[int]]:
        for i, name in enumerate(selected):
            params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True, lora_adapter=name)
            engine.add_request(f"r{i}-{name}", list(PROMPT_IDS), params)
        out: dict[str, list[int]] = {}
        while engine.has_unfinished():
            for o in engine.step():
                out.setdefault(o.request_id.split("-", 1)[1], []).extend(o.token_ids)
        return out

    together = run(names)
    for name in names:
        alone = run([name])
        assert together[str(name)] == alone[str(name)], name
        if name is not None:
            assert together[name] == golden(name)["ids"][:24].tolist(), name


def test_prefix_cache_keeps_adapters_apart(tmp_path):
    """The same prompt with an adapter and without never shares KV blocks."""
    from blazr.backends import get_backend
    from blazr.engine import Engine, SamplingParams

    backend = get_backend("cpu")
    model = base_model("llama", backend, tmp_path)
    engine = Engine(model, _IdTokenizer(), backend, num_ctx=128, block_size=4, max_seqs=4)
    engine.loras.load("a", read_lora(GOLDEN / "llama_all"))
    results = {}
    for i, name in enumerate(["a", None, "a"]):
        params = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True, lora_adapter=name)
        engine.add_request(f"r{i}", list(PROMPT_IDS), params)
        outs = []
        while engine.has_unfinished():
            outs += engine.step()
        results[i] = (sum((o.token_ids for o in outs), []), outs[-1].cached_tokens)
    assert results[0][0] == golden("llama_all")["ids"][:8].tolist()
    assert results[1][1] == 0  # the base run found none of the adapter's blocks
    assert results[2][1] > 0  # the adapter's second run found its own
    assert results[1][0] != results[0][0] and results[2][0] == results[0][0]


def test_unloaded_adapter_stays_until_its_requests_end(tmp_path):
    from blazr.backends import get_backend
    from blazr.engine import Engine, SamplingParams

    backend = get_backend("cpu")
    model = base_model("llama", backend, tmp_path)
    engine = Engine(model, _IdTokenizer(), backend, num_ctx=128, block_size=BLOCK_SIZE, max_seqs=4)
    engine.loras.load("a", read_lora(GOLDEN / "llama_all"))
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True, lora_adapter="a")
    engine.add_request("r", list(PROMPT_IDS), params)
    tokens = list(engine.step()[0].token_ids)
    engine.loras.unload("a")
    with pytest.raises(LoraNotFoundError, match="'a' is not loaded"):
        engine.add_request("s", list(PROMPT_IDS), params)
    while engine.has_unfinished():
        tokens += sum((o.token_ids for o in engine.step()), [])
    assert tokens == golden("llama_all")["ids"][:12].tolist()  # the adapter applied to the end
    assert all(layer.self_attn.lora is None and layer.mlp.lora is None for layer in model.layers)


# ---- errors ----------------------------------------------------------------------------------------------


def test_adapter_for_another_model_is_refused(tmp_path):
    from blazr.backends import get_backend

    model = base_model("llama", get_backend("cpu"), tmp_path)
    with pytest.raises(LoraLoadError, match=r"q_proj.weight has A \(4, 64\).*another base model"):
        bind_adapter(model, "x", read_lora(GOLDEN / "qwen3_patterns"))
    with pytest.raises(LoraLoadError, match=r"qkv_proj.weight.*does not have.*another base model"):
        bind_adapter(model, "x", read_lora(GOLDEN / "phi3_fused"))


def _copy(case: str, tmp_path: Path, **config) -> Path:
    out = tmp_path / "adapter"
    shutil.copytree(GOLDEN / case, out)
    data = json.loads((out / "adapter_config.json").read_text()) | config
    (out / "adapter_config.json").write_text(json.dumps(data))
    return out


@pytest.mark.parametrize(
    "config, message",
    [
        ({"use_dora": True}, "use_dora is set; DoRA"),
        ({"modules_to_save": ["lm_head"]}, "modules_to_save"),
        ({"peft_type": "IA3"}, "peft_type 'IA3'"),
        ({"lora_alpha": -1}, "lora_alpha=-1"),
    ],
)
def test_unsupported_peft_options_are_named(config, message, tmp_path):
    with pytest.raises(LoraLoadError, match=message):
        read_lora(_copy("llama_all", tmp_path, **config))


def test_broken_adapter_files_are_named(tmp_path):
    with pytest.raises(LoraLoadError, match="does not exist"):
        read_lora(tmp_path / "nothing")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(LoraLoadError, match="no adapter_model.safetensors"):
        read_lora(empty)
    with pytest.raises(LoraLoadError, match="not a LoRA adapter"):
        read_lora(GGUF_BASES / "llama_f32.gguf")
    cut = _copy("llama_all", tmp_path)
    weights = cut / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    with pytest.raises(LoraLoadError, match="truncated"):
        read_lora(cut)


class _IdTokenizer:
    """Token ids as text, one per token: enough for the engine's detokenizer."""

    eos_ids = (2,)

    def decode(self, ids) -> str:
        return "".join(f"<{i}>" for i in ids)

    def stream(self):
        return _IdStream()


class _IdStream:
    def push(self, token: int) -> str:
        return f"<{token}>"

    def flush(self) -> str:
        return ""


# ---- the Python API and the CLI ----------------------------------------------------------------------------


def test_api_and_cli_apply_an_adapter(tmp_path, monkeypatch):
    """LLM.load(lora=) and `blazr generate --lora` give the PeftModel's tokens; --lora's problems are named."""
    from typer.testing import CliRunner

    from blazr.api import LLM
    from blazr.cli import app
    from tests.server.conftest import write_tiny_gguf

    monkeypatch.setenv("BLAZR_CONFIG", str(tmp_path / "config.yaml"))
    path = write_tiny_gguf(tmp_path / "tiny.gguf")
    llm = LLM.load(path, lora=GOLDEN / "llama_all")
    want = golden("llama_all")["ids"][:8].tolist()
    text = llm.generate(list(PROMPT_IDS), max_tokens=8, temperature=0.0, ignore_eos=True)
    assert text == llm.detokenize(want)
    assert llm.generate(list(PROMPT_IDS), max_tokens=8, temperature=0.0, lora_adapter=None) != text
    llm.load_lora("attn", GOLDEN / "llama_attn")
    attn = llm.generate(list(PROMPT_IDS), max_tokens=8, temperature=0.0, lora_adapter="attn")
    assert attn == llm.detokenize(golden("llama_attn")["ids"][:8].tolist())

    runner = CliRunner()
    base = ["generate", "-m", str(path), "-p", "hello", "--max-tokens", "6", "--temperature", "0"]
    with_lora = runner.invoke(app, [*base, "--lora", str(GOLDEN / "llama_all")])
    assert with_lora.exit_code == 0, with_lora.stderr
    plain = runner.invoke(app, base)
    assert (
        with_lora.stdout.strip()
        == LLM.load(path, lora=GOLDEN / "llama_all").generate("hello", max_tokens=6, temperature=0.0).strip()
    )
    assert with_lora.stdout != plain.stdout
    missing = runner.invoke(app, [*base, "--lora", str(tmp_path / "none")])
    assert missing.exit_code == 2 and "--lora" in missing.stderr
    wrong = runner.invoke(app, [*base, "--lora", str(GOLDEN / "qwen3_patterns")])
    assert wrong.exit_code == 1 and "another base model" in wrong.stderr
