"""Build a `tokenizers.Tokenizer` from the vocabulary embedded in a GGUF file (`tokenizer.ggml.*` keys).

The vocabulary kinds: `gpt2` (byte-level BPE with explicit merges and a pre-tokenizer regex named by
`tokenizer.ggml.pre`) and `llama` (SentencePiece-style: pieces with scores, `▁` for spaces and `<0xXX>` byte
pieces) both become a Hugging Face BPE model; `bert` (WordPiece) a WordPiece model; `t5` (SentencePiece
unigram: XLM-RoBERTa, T5) a Unigram model. So encode/decode behave like `tokenizer.json`. In an encoder's file
(ENCODER_ARCHITECTURES) the special tokens around a text or a pair come from a post-processor, as in
`tokenizer.json`: the GGUF's add_bos / add_eos / add_sep flags laid out as llama.cpp lays them out.
"""

from __future__ import annotations

import warnings
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import BPE, Unigram, WordPiece

from blazr.errors import TokenizerError

# GGUF token_type values (llama.cpp `llama_token_type`).
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = 1, 2, 3, 4, 5, 6

SPM_SPACE = "\u2581"  # "▁", SentencePiece's visible space
# GGUF architectures of encoders (embedders, rerankers): their texts get special tokens from a post-processor
ENCODER_ARCHITECTURES = frozenset({"bert", "modern-bert", "nomic-bert"})

# Pre-tokenizer regexes. Where Hugging Face's tokenizer.json has the original pattern we use it (the Rust
# regex engine in `tokenizers` supports it); otherwise llama.cpp's llama-vocab.cpp lists are the reference.
GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)
QWEN2_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)
GPT4O_REGEX = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
TEKKEN_REGEX = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
DEEPSEEK_LLM_REGEXES = [
    r"[\r\n]",
    r"\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",  # noqa: E501
    r"\s?[!-/:-~！-／：-～‘-‟　-。]+",
    r"\s+$",
    r"[一-龥ࠀ-一가-퟿]+",
    r"\p{N}+",
]
DEEPSEEK_CODER_REGEXES = [r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", r"[一-龥ࠀ-一가-퟿]+", r"\p{N}"]
DEEPSEEK_V3_REGEXES = [
    r"\p{N}{1,3}",
    r"[一-龥぀-ゟ゠-ヿ]+",
    r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
    r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
]
FALCON_REGEXES = [r"[\p{P}\$\+<=>\^~\|`]+", GPT2_REGEX, r"[0-9][0-9][0-9]"]
DEFAULT_REGEXES = [r"[\p{P}\$\+<=>\^~\|]+", GPT2_REGEX, r"\p{N}+", r"[0-9][0-9][0-9]"]

# tokenizer.ggml.pre value -> the regexes applied in order (each match isolated, as llama.cpp does).
PRE_TOKENIZER_REGEXES: dict[str, list[str]] = {
    **dict.fromkeys(
        ["llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "dbrx"],
        [LLAMA3_REGEX],
    ),
    **dict.fromkeys(["smaug-bpe", "chatglm-bpe", "glm4"], [LLAMA3_REGEX]),
    **dict.fromkeys(["qwen2", "deepseek-r1-qwen", "megrez", "stablelm2", "hunyuan"], [QWEN2_REGEX]),
    **dict.fromkeys(
        ["smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"],
        [r"\p{N}", GPT2_REGEX],
    ),
    **dict.fromkeys(
        ["gpt2", "gpt-2", "phi-2", "mpt", "olmo", "jais", "jina-es", "jina-de", "gigachat", "exaone4"]
        + ["roberta-bpe", "modern-bert", "jina-v1-en", "jina-v2-code"],  # encoders' (llama.cpp: GPT2)
        [GPT2_REGEX],
    ),
    **dict.fromkeys(["gpt-4o", "llama4"], [GPT4O_REGEX]),
    "tekken": [TEKKEN_REGEX],
    "deepseek-llm": DEEPSEEK_LLM_REGEXES,
    "deepseek-coder": DEEPSEEK_CODER_REGEXES,
    "deepseek-v3": DEEPSEEK_V3_REGEXES,
    "falcon": FALCON_REGEXES,
    "default": DEFAULT_REGEXES,
}
# Pre types whose vocab looks up a whole pre-token before merging, and whose BOS is added by default.
IGNORE_MERGES_PRE = {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"}
IGNORE_MERGES_PRE |= {"tekken"}
ADD_BOS_PRE = IGNORE_MERGES_PRE | {"chameleon"}
NFC_PRE = {"qwen2", "deepseek-r1-qwen"}  # Qwen2's tokenizer.json normalizes to NFC before splitting


def gguf_value(meta: dict[str, Any], key: str, default: Any = None) -> Any:
    """A `tokenizer.ggml.<key>` value (or a full key when it contains a dot after 'tokenizer.')."""
    return meta.get(key if key.startswith("tokenizer.") else f"tokenizer.ggml.{key}", default)


def build_gguf_tokenizer(meta: dict[str, Any]) -> Tokenizer:
    """The `tokenizers.Tokenizer` for a GGUF's embedded vocabulary; TokenizerError when there is none or its
    kind (`tokenizer.ggml.model`) is one blazr cannot build."""
    model = gguf_value(meta, "model")
    model = model.decode() if isinstance(model, bytes) else model
    tokens = gguf_value(meta, "tokens")
    if model is None or tokens is None or len(tokens) == 0:
        raise TokenizerError(
            "GGUF file has no embedded tokenizer (keys tokenizer.ggml.model and tokenizer.ggml.tokens)"
        )
    if model == "bert":
        return _build_wordpiece(meta)
    builders = {"gpt2": _build_byte_level_bpe, "llama": _build_sentencepiece_bpe, "t5": _build_unigram}
    if model not in builders:
        raise TokenizerError(
            f"GGUF tokenizer.ggml.model = {model!r} is not supported (blazr builds 'gpt2' byte-level BPE, "
            "'llama' SentencePiece, 't5' SentencePiece unigram and 'bert' WordPiece vocabularies)"
        )
    tok = builders[model](meta)
    if _embeds(meta):
        tok.post_processor = _encoder_template(meta, _strings(tokens))
    return tok


def _embeds(meta: dict[str, Any]) -> bool:
    """Whether the file is an encoder, or a decoder its converter marked as an embedder (a mean, CLS or
    last-token {arch}.pooling_type: Qwen3-Embedding's GGUF): llama.cpp then tokenizes every input with the
    special tokens its add_* flags name (Qwen3-Embedding's appended <|endoftext|>)."""
    arch = meta.get("general.architecture")
    return arch in ENCODER_ARCHITECTURES or meta.get(f"{arch}.pooling_type") in (
        1,
        2,
        3,
    )  # models.GGUF_EMBED_POOLING


def gguf_add_bos_default(meta: dict[str, Any]) -> bool:
    """Whether to prepend BOS: tokenizer.ggml.add_bos_token when present, else llama.cpp's defaults
    (SentencePiece vocabs and Llama-3-style BPE vocabs add it, other BPE vocabs do not)."""
    if gguf_value(meta, "model") == "bert" or _embeds(meta):
        return False  # [CLS] ... [SEP] (<s> ... </s>) come from the encoder tokenizer's post-processor
    explicit = gguf_value(meta, "add_bos_token")
    if explicit is not None:
        return bool(explicit)
    if gguf_value(meta, "model") == "llama":
        return True
    return gguf_value(meta, "pre", "default") in ADD_BOS_PRE


def _token_types(meta: dict[str, Any], count: int) -> list[int]:
    types = gguf_value(meta, "token_type")
    return [int(t) for t in types] if types is not None and len(types) else [TOKEN_NORMAL] * count


def _strings(values: Any) -> list[str]:
    """GGUF string arrays as str (a reader may hand back raw UTF-8 bytes)."""
    return [v.decode("utf-8", errors="replace") if isinstance(v, bytes) else str(v) for v in values]


def _vocab_dict(tokens: list[str]) -> dict[str, int]:
    """token -> id; a duplicated token string keeps its first id (the later copies are unreachable)."""
    vocab: dict[str, int] = {}
    for index, token in enumerate(tokens):
        vocab.setdefault(token, index)
    return vocab


def _add_marked_tokens(tok: Tokenizer, tokens: list[str], types: list[int]) -> None:
    """Control (and unknown) tokens become special added tokens, user-defined ones plain added tokens, so
    their text in a prompt encodes to the single id (as llama.cpp's special-token partition does)."""
    special = [
        AddedToken(tokens[i], special=True, normalized=False) for i, t in enumerate(types) if t in (2, 3)
    ]
    user = [AddedToken(tokens[i], special=False, normalized=False) for i, t in enumerate(types) if t == 4]
    if special:
        tok.add_special_tokens(special)
    if user:
        tok.add_tokens(user)


def _pre_tokenizer_regexes(pre: str) -> list[str]:
    if pre not in PRE_TOKENIZER_REGEXES:
        warnings.warn(
            f"GGUF tokenizer.ggml.pre = {pre!r} is not known to blazr; using llama.cpp's default "
            "pre-tokenizer, so tokenization may differ from the original model",
            stacklevel=3,
        )
    return PRE_TOKENIZER_REGEXES.get(pre, DEFAULT_REGEXES)


def _build_byte_level_bpe(meta: dict[str, Any]) -> Tokenizer:
    tokens = _strings(gguf_value(meta, "tokens"))
    merges = [tuple(m.split(" ", 1)) for m in _strings(gguf_value(meta, "merges", []))]
    if not merges:
        raise TokenizerError("GGUF gpt2 tokenizer has no tokenizer.ggml.merges")
    pre = str(gguf_value(meta, "pre", "default"))
    bpe = BPE(_vocab_dict(tokens), merges, ignore_merges=pre in IGNORE_MERGES_PRE)
    tok = Tokenizer(bpe)
    if pre in NFC_PRE:
        tok.normalizer = normalizers.NFC()
    splits = [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in _pre_tokenizer_regexes(pre)]
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.pre_tokenizer = pre_tokenizers.Sequence([*splits, byte_level])
    tok.decoder = decoders.ByteLevel()
    _add_marked_tokens(tok, tokens, _token_types(meta, len(tokens)))
    return tok


def spm_merges_from_scores(tokens: list[str], scores: list[float], mergeable: list[bool]) -> list[tuple]:
    """BPE merges equivalent to SentencePiece's score-ordered merging: every split (left, right) of a piece
    into two pieces, ordered by the merged piece's score, best first (as transformers' converter does)."""
    vocab = _vocab_dict(tokens)
    candidates = []
    for piece_id, piece in enumerate(tokens):
        if not mergeable[piece_id] or vocab[piece] != piece_id:
            continue
        local = []
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in vocab and right in vocab:
                local.append((vocab[left], vocab[right], left, right))
        local.sort()
        candidates.extend((scores[piece_id], left, right) for _, _, left, right in local)
    candidates.sort(key=lambda c: c[0], reverse=True)  # stable: ties keep id order
    return [(left, right) for _, left, right in candidates]


def _build_sentencepiece_bpe(meta: dict[str, Any]) -> Tokenizer:
    tokens = _strings(gguf_value(meta, "tokens"))
    types = _token_types(meta, len(tokens))
    scores = [float(s) for s in gguf_value(meta, "scores", [])] or [-float(i) for i in range(len(tokens))]
    mergeable = [t == TOKEN_NORMAL for t in types]
    merges = spm_merges_from_scores(tokens, scores, mergeable)
    unk_id = gguf_value(meta, "unknown_token_id", 0)
    unk = tokens[unk_id] if unk_id is not None and 0 <= unk_id < len(tokens) else None
    bpe = BPE(_vocab_dict(tokens), merges, unk_token=unk, fuse_unk=True, byte_fallback=True)
    tok = Tokenizer(bpe)
    add_space_prefix = bool(gguf_value(meta, "add_space_prefix", True))
    # Spaces become "▁"; like llama.cpp, a "▁" is prepended to each text run (also after a special token).
    space_rules = [normalizers.Replace(" ", SPM_SPACE)]
    if add_space_prefix:
        space_rules.insert(0, normalizers.Prepend(SPM_SPACE))
    tok.normalizer = normalizers.Sequence(space_rules)
    decode_rules = [decoders.Replace(SPM_SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    if add_space_prefix:
        decode_rules.append(decoders.Strip(" ", 1, 0))  # drop the space the prefix rule added
    tok.decoder = decoders.Sequence(decode_rules)
    _add_marked_tokens(tok, tokens, types)
    return tok


def _build_wordpiece(meta: dict[str, Any]) -> Tokenizer:
    """A BERT WordPiece tokenizer as HF's tokenizer.json has it. llama.cpp's converter stores the vocabulary in
    "phantom space" form (conversion/bert.py): a word-start piece gets a leading "▁", a "##" continuation loses
    its "##", control tokens ([CLS], [SEP], ...) stay as they are; this undoes it. Lower-casing (with accent
    stripping, as BertNormalizer ties them) follows tokenizer.ggml.normalizer.lowercase (llama.cpp lower-cases
    when it is absent); [CLS] / [SEP] are the cls / bos and separator / eos ids, else found by their text."""
    tokens = _strings(gguf_value(meta, "tokens"))
    types = _token_types(meta, len(tokens))
    pieces = [
        tok if kind == TOKEN_CONTROL else (tok[1:] if tok.startswith(SPM_SPACE) else "##" + tok)
        for tok, kind in zip(tokens, types, strict=True)
    ]
    unk = _special_text(meta, pieces, ("unknown_token_id",), "[UNK]")
    tok = Tokenizer(WordPiece(_vocab_dict(pieces), unk_token=unk or "[UNK]", continuing_subword_prefix="##"))
    lowercase = bool(gguf_value(meta, "normalizer.lowercase", True))
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase)  # accents stripped when lower-casing
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    _add_marked_tokens(tok, pieces, types)
    cls = _special_text(meta, pieces, ("cls_token_id", "bos_token_id"), "[CLS]")
    sep = _special_text(meta, pieces, ("seperator_token_id", "eos_token_id"), "[SEP]")
    if cls is None or sep is None:
        raise TokenizerError("GGUF bert vocabulary has no [CLS] / [SEP] token (cls/bos and sep/eos ids)")
    tok.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}",
        pair=f"{cls} $A {sep} $B:1 {sep}:1",
        special_tokens=[(cls, pieces.index(cls)), (sep, pieces.index(sep))],
    )
    return tok


def _special_text(meta: dict[str, Any], pieces: list[str], keys: tuple[str, ...], text: str) -> str | None:
    """The text of the first of `keys` (tokenizer.ggml.<key> ids) that names a piece, else `text` if the
    vocabulary has it, else None."""
    for key in keys:
        index = gguf_value(meta, key)
        if isinstance(index, int) and 0 <= index < len(pieces):
            return pieces[index]
    return text if text in pieces else None


def _build_unigram(meta: dict[str, Any]) -> Tokenizer:
    """A SentencePiece unigram vocabulary ("t5": XLM-RoBERTa's, T5's) as tokenizer.json has it: a Unigram model
    over tokenizer.ggml.tokens / scores, the model's own normalisation (its precompiled_charsmap, as the
    converter copied it from the SentencePiece model) and the Metaspace pre-tokenizer: words split at
    whitespace (removing runs of it, remove_extra_whitespaces) each with a leading "▁" (add_space_prefix)."""
    tokens = _strings(gguf_value(meta, "tokens"))
    types = _token_types(meta, len(tokens))
    scores = [float(s) for s in gguf_value(meta, "scores", [])] or [0.0] * len(tokens)
    unk_id = gguf_value(meta, "unknown_token_id")
    if unk_id is None:  # the first piece typed UNKNOWN (XLM-R: <unk> at 3)
        unk_id = next((i for i, t in enumerate(types) if t == TOKEN_UNKNOWN), None)
    byte_fallback = TOKEN_BYTE in types
    tok = Tokenizer(
        Unigram(list(zip(tokens, scores, strict=True)), unk_id=unk_id, byte_fallback=byte_fallback)
    )
    charsmap = gguf_value(meta, "precompiled_charsmap")
    if charsmap is not None and len(charsmap):
        raw = charsmap if isinstance(charsmap, bytes) else bytes(int(b) & 0xFF for b in charsmap)
        tok.normalizer = normalizers.Precompiled(raw)
    prepend = "always" if gguf_value(meta, "add_space_prefix", True) else "never"
    metaspace = pre_tokenizers.Metaspace(replacement=SPM_SPACE, prepend_scheme=prepend)
    if gguf_value(meta, "remove_extra_whitespaces", True):
        metaspace = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), metaspace])
    tok.pre_tokenizer = metaspace
    decode = [decoders.ByteFallback(), decoders.Fuse()] if byte_fallback else []
    tok.decoder = decoders.Sequence(
        [*decode, decoders.Metaspace(replacement=SPM_SPACE, prepend_scheme=prepend)]
    )
    _add_marked_tokens(tok, tokens, types)
    return tok


def _encoder_template(meta: dict[str, Any], tokens: list[str]) -> processors.TemplateProcessing:
    """An encoder's (or a GGUF embedder's) special tokens as llama.cpp adds them (llama-vocab.cpp's tokenize, the server's rerank
    prompt): [bos] A [eos] for a text, [bos] A [eos] [sep] B [eos] for a pair, each where its add_* flag says
    (RoBERTa / XLM-R: <s> A </s></s> B </s>; ModernBERT: [CLS] A [SEP] B [SEP]). Every token is segment 0:
    these families' tokenizers give the model no token type ids."""
    flags = {k: bool(gguf_value(meta, f"add_{k}_token", False)) for k in ("bos", "eos", "sep")}
    ids = {
        k: gguf_value(meta, f"{key}_token_id")
        for k, key in (("bos", "bos"), ("eos", "eos"), ("sep", "seperator"))
    }
    if flags["eos"] and ids["eos"] is None:
        ids["eos"] = ids["sep"]  # as the server falls back
    used = [k for k in ("bos", "eos", "sep") if flags[k]]
    missing = [k for k in used if not (isinstance(ids[k], int) and 0 <= ids[k] < len(tokens))]
    if missing:
        raise TokenizerError(
            f"GGUF encoder vocabulary adds {', '.join(missing)} tokens but names no valid id"
        )
    text = {k: tokens[ids[k]] for k in used}
    bos, eos, sep = ([text[k]] if flags[k] else [] for k in ("bos", "eos", "sep"))
    return processors.TemplateProcessing(
        single=[*bos, "$A", *eos],
        pair=[*bos, "$A", *eos, *sep, "$B", *eos],
        special_tokens=sorted({(text[k], ids[k]) for k in used}),
    )
