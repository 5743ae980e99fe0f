"""Tokenizers: `load_tokenizer(checkpoint) -> Tokenizer`, from a Hugging Face `tokenizer.json` (+ its config
files) for SafeTensors checkpoints or from the vocabulary embedded in a GGUF file.

`Tokenizer` wraps a `tokenizers.Tokenizer` and adds what generation needs: the BOS rule, the full set of ids
that end generation, the model's chat template and a streaming decoder.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tokenizers

from blazr.errors import TokenizerError
from blazr.tokenizer.gguf_vocab import build_gguf_tokenizer, gguf_add_bos_default, gguf_value
from blazr.tokenizer.stream import StreamDecoder

if TYPE_CHECKING:
    from blazr.loaders import Checkpoint

__all__ = ["Tokenizer", "StreamDecoder", "load_tokenizer", "END_OF_TURN_TOKENS"]

# Special tokens that end a turn or the text in the common vocabularies; each one present in a vocabulary as a
# special token joins its EOS set, so generation stops on <|eot_id|> as well as <|end_of_text|>.
END_OF_TURN_TOKENS = (
    "<|eot_id|>",
    "<|end_of_text|>",
    "<|eom_id|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<end_of_turn>",
    "<eos>",
    "</s>",
    "<|end|>",
    "<\uff5cend\u2581of\u2581sentence\uff5c>",  # DeepSeek's fullwidth-bar token
    "<|end\u2581of\u2581sentence|>",
    "<|EOT|>",
    "<|return|>",
)

# tokenizer_config.json `tokenizer_class` values whose default is to prepend BOS.
BOS_BY_DEFAULT_CLASSES = {
    "LlamaTokenizer",
    "LlamaTokenizerFast",
    "CodeLlamaTokenizer",
    "CodeLlamaTokenizerFast",
}
BOS_BY_DEFAULT_CLASSES |= {"GemmaTokenizer", "GemmaTokenizerFast"}
# BOS texts of vocabularies whose models were all trained with a BOS first (Llama 3).
BOS_BY_DEFAULT_TOKENS = {"<|begin_of_text|>"}

HF_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
)


class Tokenizer:
    """A model's tokenizer: encode/decode, BOS rule, EOS set, chat template."""

    def __init__(
        self,
        inner: tokenizers.Tokenizer,
        *,
        bos_id: int | None,
        eos_ids: Iterable[int],
        add_bos: bool,
        chat_template: str | None = None,
        chat_templates: dict[str, str] | None = None,
        eos_id: int | None = None,
        vocab_size: int | None = None,
        model_type: str = "",
        source: str = "",
    ):
        self.inner = inner
        self.bos_id = bos_id
        self.eos_ids = frozenset(eos_ids)
        self.eos_id = eos_id if eos_id is not None else (min(self.eos_ids) if self.eos_ids else None)
        self.add_bos = add_bos
        self.chat_template = chat_template
        self.chat_templates = dict(chat_templates or {})  # named extra templates, e.g. "tool_use"
        self.vocab_size = (
            vocab_size if vocab_size is not None else inner.get_vocab_size(with_added_tokens=True)
        )
        self.model_type = model_type
        self.source = source  # where it was read from, for messages
        added = inner.get_added_tokens_decoder()
        self.special_ids = frozenset(i for i, tok in added.items() if tok.special)

    @property
    def bos_token(self) -> str:
        return (self.id_to_token(self.bos_id) or "") if self.bos_id is not None else ""

    @property
    def eos_token(self) -> str:
        return (self.id_to_token(self.eos_id) or "") if self.eos_id is not None else ""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`; special-token text (e.g. "<|im_start|>") becomes its id. With
        add_special_tokens, BOS is prepended when the model wants it, never doubling one already there."""
        ids = self.inner.encode(text, add_special_tokens=False).ids
        wants_bos = add_special_tokens and self.add_bos and self.bos_id is not None
        if wants_bos and (not ids or ids[0] != self.bos_id):
            ids.insert(0, self.bos_id)
        return ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self.inner.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def id_to_token(self, token_id: int) -> str | None:
        return self.inner.id_to_token(int(token_id))

    def token_to_id(self, token: str) -> int | None:
        return self.inner.token_to_id(token)

    def is_eos(self, token_id: int) -> bool:
        return token_id in self.eos_ids

    def stream(self, skip_special_tokens: bool = False) -> StreamDecoder:
        return StreamDecoder(self, skip_special_tokens=skip_special_tokens)

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool = True,
        tools: list[dict[str, Any]] | None = None,
        template: str | None = None,
        **kwargs: Any,
    ) -> str:
        """The prompt text for a conversation. `template` is a --chat-template spec (built-in name, file path,
        or Jinja source); None uses the model's own template (its "tool_use" variant when tools are given)."""
        from blazr.tokenizer.chat_template import render_chat_template, resolve_template

        if template is None and tools and "tool_use" in self.chat_templates:
            source = self.chat_templates["tool_use"]
        else:
            source = resolve_template(template, self)
        return render_chat_template(
            source,
            messages,
            add_generation_prompt=add_generation_prompt,
            tools=tools,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
            **kwargs,
        )

    def __repr__(self) -> str:
        return (
            f"Tokenizer(vocab_size={self.vocab_size}, bos_id={self.bos_id}, eos_ids={sorted(self.eos_ids)}, "
            f"add_bos={self.add_bos}, source={self.source!r})"
        )


def load_tokenizer(ckpt: Checkpoint) -> Tokenizer:
    """The tokenizer of a checkpoint: a GGUF's embedded vocabulary, else tokenizer.json and its config files
    in the checkpoint's directory. Raises TokenizerError naming the files looked for."""
    meta = ckpt.gguf_metadata or {}
    tokens = gguf_value(meta, "tokens")
    if ckpt.format == "gguf" and tokens is not None and len(tokens) > 0:
        return _from_gguf(meta, ckpt)
    directory = Path(ckpt.directory)
    if (directory / "tokenizer.json").is_file():
        return _from_hf_files(directory, ckpt)
    looked = ", ".join(str(directory / name) for name in HF_TOKENIZER_FILES[:1])
    embedded = " and the GGUF's tokenizer.ggml.tokens" if ckpt.format == "gguf" else ""
    raise TokenizerError(
        f"no tokenizer found for {ckpt.path}: looked for {looked}{embedded}. Put the model's tokenizer.json "
        "(with tokenizer_config.json) next to the weights"
    )


# ---- GGUF ----------------------------------------------------------------------------------------------


def _from_gguf(meta: dict[str, Any], ckpt: Checkpoint) -> Tokenizer:
    inner = build_gguf_tokenizer(meta)
    tokens = gguf_value(meta, "tokens")
    explicit = [gguf_value(meta, key) for key in ("eos_token_id", "eot_token_id", "eom_token_id")]
    eos_id = gguf_value(meta, "eos_token_id")
    named = {
        key[len("tokenizer.chat_template.") :]: value
        for key, value in meta.items()
        if key.startswith("tokenizer.chat_template.") and isinstance(value, str)
    }
    return Tokenizer(
        inner,
        bos_id=_valid_id(gguf_value(meta, "bos_token_id"), len(tokens)),
        eos_ids=_eos_set(inner, explicit, len(tokens)),
        eos_id=_valid_id(eos_id, len(tokens)),
        add_bos=gguf_add_bos_default(meta),
        chat_template=meta.get("tokenizer.chat_template"),
        chat_templates=named,
        vocab_size=len(tokens),
        model_type=ckpt.model_type,
        source=f"{ckpt.path} (embedded GGUF {gguf_value(meta, 'model')} vocabulary)",
    )


def _valid_id(value: Any, vocab_size: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value < vocab_size else None


def _eos_set(inner: tokenizers.Tokenizer, explicit: Iterable[Any], vocab_size: int) -> set[int]:
    """Explicit EOS ids plus every end-of-turn token that the vocabulary marks special."""
    ids = {i for i in (_valid_id(v, vocab_size) for v in explicit) if i is not None}
    special = {i for i, tok in inner.get_added_tokens_decoder().items() if tok.special}
    for text in END_OF_TURN_TOKENS:
        token_id = inner.token_to_id(text)
        if token_id is not None and token_id in special:
            ids.add(token_id)
    return ids


# ---- Hugging Face files --------------------------------------------------------------------------------


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise TokenizerError(f"cannot read {path}: {e}") from e
    return data if isinstance(data, dict) else {}


def _token_text(value: Any) -> str | None:
    """tokenizer_config writes special tokens as a string or as {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _from_hf_files(directory: Path, ckpt: Checkpoint) -> Tokenizer:
    path = directory / "tokenizer.json"
    try:
        inner = tokenizers.Tokenizer.from_file(str(path))
    except Exception as e:  # the Rust side raises a plain Exception for malformed files
        raise TokenizerError(f"cannot load {path}: {e}") from e
    config = _read_json(directory / "tokenizer_config.json")
    special_map = _read_json(directory / "special_tokens_map.json")
    generation = _read_json(directory / "generation_config.json")
    model_config = ckpt.config or {}
    size = inner.get_vocab_size(with_added_tokens=True)

    bos_text = _token_text(config.get("bos_token")) or _token_text(special_map.get("bos_token"))
    eos_text = _token_text(config.get("eos_token")) or _token_text(special_map.get("eos_token"))
    bos_id = inner.token_to_id(bos_text) if bos_text else None
    if bos_id is None:
        bos_id = _valid_id(generation.get("bos_token_id", model_config.get("bos_token_id")), size)
    eos_id = inner.token_to_id(eos_text) if eos_text else None
    explicit = [
        eos_id,
        *_as_list(generation.get("eos_token_id")),
        *_as_list(model_config.get("eos_token_id")),
    ]
    default, named = _hf_chat_templates(directory, config)
    return Tokenizer(
        inner,
        bos_id=bos_id,
        eos_ids=_eos_set(inner, explicit, size),
        eos_id=eos_id if eos_id is not None else _first_id(explicit, size),
        add_bos=_hf_add_bos(inner, config, bos_id, bos_text),
        chat_template=default,
        chat_templates=named,
        model_type=str(model_config.get("model_type", "")),
        source=str(path),
    )


def _first_id(values: Iterable[Any], size: int) -> int | None:
    return next((i for i in (_valid_id(v, size) for v in values) if i is not None), None)


def _hf_add_bos(
    inner: tokenizers.Tokenizer, config: dict[str, Any], bos_id: int | None, bos_text: str | None
) -> bool:
    """tokenizer_config add_bos_token; else the Llama-family class default; else whether tokenizer.json's
    post-processor inserts BOS; else the Llama 3 vocabulary (always trained with BOS)."""
    if bos_id is None:
        return False
    if isinstance(config.get("add_bos_token"), bool):
        return config["add_bos_token"]
    if config.get("tokenizer_class") in BOS_BY_DEFAULT_CLASSES:
        return True
    with_specials = inner.encode("a", add_special_tokens=True).ids
    if with_specials and with_specials[0] == bos_id:
        return True
    return bos_text in BOS_BY_DEFAULT_TOKENS


def _hf_chat_templates(directory: Path, config: dict[str, Any]) -> tuple[str | None, dict[str, str]]:
    """The default chat template and the named ones. A chat_template.jinja file wins over the config entry
    (newer transformers save it there); the entry may be a string or a list of {name, template}."""
    jinja_file = directory / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8"), {}
    entry = config.get("chat_template") or _read_json(directory / "chat_template.json").get("chat_template")
    if isinstance(entry, str):
        return entry, {}
    if isinstance(entry, list):
        named = {
            item["name"]: item["template"]
            for item in entry
            if isinstance(item, dict)
            and isinstance(item.get("name"), str)
            and isinstance(item.get("template"), str)
        }
        return named.get("default"), {k: v for k, v in named.items() if k != "default"}
    return None, {}
