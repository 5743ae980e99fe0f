"""A Hugging Face byte-level BPE tokenizer (tokenizer.json + tokenizer_config.json) as GGUF tokenizer fields, as
llama.cpp's converter writes them: tokens by id, token types (special added tokens CONTROL, other added tokens
USER_DEFINED, padding UNUSED), merges, the pre-tokenizer's name, BOS/EOS/PAD/UNK ids, add_bos / add_eos and the
chat template.

llama.cpp names the pre-tokenizer by hashing what the tokenizer makes of a test text; here it is named by the
regexes the tokenizer splits with (its Split patterns, Digits, ByteLevel's own regex), looked up in the table
blazr's GGUF reader builds tokenizers from (blazr.tokenizer.gguf_vocab), so reading the file back splits text
the same way. A model directory without tokenizer files gets tokenizer.ggml.model "none" (tiny test models);
SentencePiece and WordPiece tokenizers are refused by name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from blazr.errors import UnsupportedError
from blazr.tokenizer.gguf_vocab import (
    GPT2_REGEX,
    IGNORE_MERGES_PRE,
    PRE_TOKENIZER_REGEXES,
    TOKEN_CONTROL,
    TOKEN_NORMAL,
    TOKEN_UNUSED,
    TOKEN_USER_DEFINED,
)


def write_tokenizer(writer, directory: Path, config: dict[str, Any]) -> None:
    path = directory / "tokenizer.json"
    if not path.exists():
        if (directory / "tokenizer.model").exists():
            raise UnsupportedError(
                f"{directory}: SentencePiece tokenizers (tokenizer.model) are not converted yet"
            )
        writer.add_tokenizer_model("none")
        return
    data = json.loads(path.read_text(encoding="utf-8"))
    model = data.get("model") or {}
    if model.get("type") != "BPE" or not _byte_level(data.get("pre_tokenizer")):
        raise UnsupportedError(
            f"{path}: only byte-level BPE tokenizers are converted yet (this one is {model.get('type')!r})"
        )
    tokens, types = _vocabulary(model, data.get("added_tokens") or [], config.get("vocab_size"))
    side = _read_json(directory / "tokenizer_config.json")
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre_name(data, bool(model.get("ignore_merges"))))
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or []])
    ids = {token: i for i, token in enumerate(tokens)}
    for kind in ("bos", "eos", "pad", "unk"):
        token_id = _special_id(kind, config, side, ids)
        if token_id is not None:
            getattr(writer, f"add_{kind}_token_id")(token_id)
    for kind in ("bos", "eos"):
        if isinstance(side.get(f"add_{kind}_token"), bool):
            getattr(writer, f"add_add_{kind}_token")(side[f"add_{kind}_token"])
    template = _chat_template(directory, side)
    if template:
        writer.add_chat_template(template)


def pre_name(data: dict[str, Any], ignore_merges: bool) -> str:
    """The tokenizer.ggml.pre name whose regexes are the ones this tokenizer.json splits with."""
    regexes = _split_regexes(data.get("pre_tokenizer"))
    names = [name for name, listed in PRE_TOKENIZER_REGEXES.items() if listed == regexes]
    preferred = [name for name in names if (name in IGNORE_MERGES_PRE) == ignore_merges]
    if not (preferred or names):
        raise UnsupportedError(
            f"the tokenizer's pre-tokenizer (splits {regexes}) matches none llama.cpp names; it cannot be "
            "written so that llama.cpp splits text the same way"
        )
    return (preferred or names)[0]


def _split_regexes(node: dict[str, Any] | None) -> list[str]:
    if not node:
        return []
    kind = node.get("type")
    if kind == "Sequence":
        return [r for child in node.get("pretokenizers", []) for r in _split_regexes(child)]
    if kind == "Split":
        pattern = node.get("pattern") or {}
        return [pattern.get("Regex") or pattern.get("String")]
    if kind == "Digits":
        return [r"\p{N}"] if node.get("individual_digits") else [r"\p{N}+"]
    if kind == "ByteLevel":
        return [GPT2_REGEX] if node.get("use_regex", True) else []
    raise UnsupportedError(f"pre-tokenizer {kind!r} is not converted yet")


def _byte_level(node: dict[str, Any] | None) -> bool:
    if not node:
        return False
    if node.get("type") == "Sequence":
        return any(_byte_level(child) for child in node.get("pretokenizers", []))
    return node.get("type") == "ByteLevel"


def _vocabulary(model: dict, added: list[dict], vocab_size: int | None) -> tuple[list[str], list[int]]:
    """Tokens by id and their types; ids the vocabulary leaves out, up to the config's vocab_size, are padding."""
    by_id = {int(i): token for token, i in (model.get("vocab") or {}).items()}
    kinds = {}
    for entry in added:
        by_id[int(entry["id"])] = entry["content"]
        kinds[int(entry["id"])] = TOKEN_CONTROL if entry.get("special") else TOKEN_USER_DEFINED
    size = max(vocab_size or 0, max(by_id) + 1)
    tokens = [by_id.get(i, f"[PAD{i}]") for i in range(size)]
    types = [kinds.get(i, TOKEN_NORMAL if i in by_id else TOKEN_UNUSED) for i in range(size)]
    return tokens, types


def _special_id(kind: str, config: dict, side: dict, ids: dict[str, int]) -> int | None:
    value = config.get(f"{kind}_token_id")
    if isinstance(value, list):
        value = value[0] if value else None
    if isinstance(value, int):
        return value
    token = side.get(f"{kind}_token")
    token = token.get("content") if isinstance(token, dict) else token
    return ids.get(token) if isinstance(token, str) else None


def _chat_template(directory: Path, side: dict) -> str | None:
    if (directory / "chat_template.jinja").exists():
        return (directory / "chat_template.jinja").read_text(encoding="utf-8")
    template = side.get("chat_template")
    return template if isinstance(template, str) else None


def _read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}
