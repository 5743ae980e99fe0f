"""Tiny decoder embedders and a decoder reranker: the tiny Qwen3 of tests/tiny_models.py written as a
Qwen3-Embedding-style sentence-transformers directory (last-token or mean pooling, Normalize, prompts) and as a
Qwen3-Reranker-style causal LM.

As the real Qwen3-Embedding ships: config.json says Qwen3ForCausalLM while the weights are the bare decoder's
(Qwen3Model: no "model." prefix, no lm_head; the embedders here are untied so a missing head shows), and the
tokenizer's post-processor appends <|endoftext|>. The tokenizer is a small byte-level BPE (printable ASCII,
newline, a few whole words, "yes" and "no", Qwen's chat specials) that fits the tiny model's 256-token vocabulary.
tests/parity/make_decoder_embed_reference.py runs these directories through sentence-transformers and
transformers to make tests/golden/decoder_embed/<case>.npz; tests/test_embed_decoder.py runs them through blazr.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.tiny_encoders import POOLING_KEYS
from tests.tiny_models import tiny_config, tiny_weights

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
THINK = ["<think>", "</think>"]  # added tokens that are not special, as in Qwen3's tokenizer
WORDS = (
    "the man woman is eating food bread girl dog runs park what query passage horse guitar baby book water "
    "Query Document Instruct Judge whether requirements based answer relevant search"
).split()
ANSWERS = ["yes", "no"]  # whole tokens without the space marker: what a yes/no reranker reads
MAX_SEQ_LENGTH = 64  # the longest sentence is cut, and the next-longest once the query prompt is added
QUERY_PROMPT = "Instruct: search the query\nQuery:"  # Qwen3-Embedding's layout, a shorter task

# case -> sentence-transformers pipeline (None: a yes/no reranker, a plain causal LM); the case name's first
# word is the tiny model of tests/tiny_models.py
CASES = {
    "qwen3_embed_lasttoken": dict(pooling=("lasttoken",), include_prompt=True),
    "qwen3_embed_mean": dict(pooling=("mean",), include_prompt=False),
    "qwen3_reranker": None,
    # E5-Mistral's shape: a bare MistralModel (the tiny one has a 16-token sliding window), a Llama-style
    # SentencePiece-BPE tokenizer that puts <s> before and </s> after every input, last-token pooling
    "mistral_embed_lasttoken": dict(pooling=("lasttoken",), include_prompt=True),
}
LLAMA_SPECIALS = ["<unk>", "<s>", "</s>"]
EMBEDDERS = tuple(c for c, p in CASES.items() if p is not None)
RERANKERS = tuple(c for c, p in CASES.items() if p is None)


def bpe_model() -> tuple[list[str], list[tuple[str, str]]]:
    """(vocab, merges): byte-level symbols of printable ASCII and newline, then each word merged letter by
    letter (with the leading-space marker Ġ, and the answers also without it)."""
    # ByteLevel writes a newline as Ċ and a space as Ġ; the other printable ASCII bytes as themselves
    chars = ["Ċ", "Ġ"] + [chr(b) for b in range(33, 127)]
    vocab, merges = merged_words(SPECIALS + THINK + chars, ["Ġ" + w for w in WORDS + ANSWERS] + ANSWERS)
    assert len(vocab) <= tiny_config("qwen3")["vocab_size"], len(vocab)
    return vocab, merges


def merged_words(symbols: list[str], forms: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """(vocab, merges): `symbols`, then every prefix of each form merged letter by letter, left to right."""
    vocab, merges = list(symbols), []
    for form in forms:
        cur = form[0]
        for ch in form[1:]:
            if (cur, ch) not in merges:
                merges.append((cur, ch))
            cur += ch
            if cur not in vocab:
                vocab.append(cur)
    return vocab, merges


def model(case: str) -> str:
    return case.split("_")[0]


def config(case: str) -> dict:
    cfg = tiny_config(model(case))
    if CASES[case] is not None:  # untied with no head saved (as the bigger Qwen3-Embeddings)
        cfg["tie_word_embeddings"] = False
    if model(case) == "mistral":  # e5-mistral-7b-instruct's config names the bare decoder
        return cfg | {
            "architectures": ["MistralModel"],
            "bos_token_id": 1,
            "eos_token_id": 2,
            "pad_token_id": 2,
        }
    return cfg | {"eos_token_id": 2, "bos_token_id": None, "pad_token_id": 0}


def weights(case: str) -> dict:
    w = tiny_weights(model(case))
    if CASES[case] is None:
        return w
    return {k.removeprefix("model."): a for k, a in w.items() if not k.startswith("lm_head.")}


def write_case(case: str, directory: Path) -> Path:
    from safetensors.numpy import save_file

    root = Path(directory) / case
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(config(case), indent=1))
    save_file(weights(case), str(root / "model.safetensors"), metadata={"format": "pt"})
    pipeline = CASES[case]
    if model(case) == "mistral":
        _write_llama_tokenizer(root)
    else:
        _write_tokenizer(root, appends_eos=pipeline is not None)
    if pipeline is not None:
        _write_pipeline(root, pipeline)
    return root


def _write_tokenizer(root: Path, appends_eos: bool) -> None:
    from tokenizers import AddedToken, Tokenizer, decoders, pre_tokenizers, processors
    from tokenizers.models import BPE

    vocab, merges = bpe_model()
    ids = {t: i for i, t in enumerate(vocab)}
    tok = Tokenizer(BPE(ids, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    if appends_eos:  # Qwen3-Embedding's tokenizer.json: <|endoftext|> after every input
        tok.post_processor = processors.TemplateProcessing(
            single="$A:0 <|endoftext|>:0",
            pair="$A:0 <|endoftext|>:0 $B:1 <|endoftext|>:1",
            special_tokens=[("<|endoftext|>", 0)],
        )
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in THINK])
    tok.save(str(root / "tokenizer.json"))
    (root / "vocab.json").write_text(json.dumps(ids))
    (root / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    config = dict(
        tokenizer_class="Qwen2Tokenizer",
        model_max_length=131072,
        padding_side="left",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        add_prefix_space=False,
    )
    (root / "tokenizer_config.json").write_text(json.dumps(config))


def llama_bpe_model() -> tuple[list[str], list[tuple[str, str]]]:
    """(vocab, merges) of the tiny Llama-style tokenizer: its specials, "▁" and printable ASCII, then each word
    merged letter by letter after the word-start marker."""
    symbols = LLAMA_SPECIALS + ["▁"] + [chr(b) for b in range(33, 127)]
    vocab, merges = merged_words(symbols, ["▁" + w for w in WORDS + ANSWERS])
    assert len(vocab) <= tiny_config("mistral")["vocab_size"], len(vocab)
    return vocab, merges


def _write_llama_tokenizer(root: Path) -> None:
    """tokenizer.json as Llama / Mistral SentencePiece tokenizers convert: "▁" for spaces and one before the
    text, <unk> for what the pieces lack; <s> ... </s> around each input (E5-Mistral's add_eos_token)."""
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers, processors
    from tokenizers.models import BPE

    vocab, merges = llama_bpe_model()
    tok = Tokenizer(BPE({t: i for i, t in enumerate(vocab)}, merges, unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(
        single="<s>:0 $A:0 </s>:0",
        pair="<s>:0 $A:0 </s>:0 <s>:1 $B:1 </s>:1",
        special_tokens=[("<s>", 1), ("</s>", 2)],
    )
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in LLAMA_SPECIALS])
    tok.save(str(root / "tokenizer.json"))
    config = dict(
        tokenizer_class="LlamaTokenizerFast",
        model_max_length=32768,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="</s>",
        add_bos_token=True,
        add_eos_token=True,
    )
    (root / "tokenizer_config.json").write_text(json.dumps(config))


def _write_pipeline(root: Path, pipeline: dict) -> None:
    width = tiny_config("qwen3")["hidden_size"]
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    pooling = {key: mode in pipeline["pooling"] for mode, key in POOLING_KEYS.items()}
    pooling |= {"word_embedding_dimension": width, "include_prompt": pipeline["include_prompt"]}
    (root / "1_Pooling").mkdir(exist_ok=True)
    (root / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    (root / "modules.json").write_text(json.dumps(modules, indent=1))
    (root / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": MAX_SEQ_LENGTH, "do_lower_case": False})
    )
    st = {"prompts": {"query": QUERY_PROMPT, "document": ""}, "default_prompt_name": None}
    (root / "config_sentence_transformers.json").write_text(json.dumps(st | {"similarity_fn_name": "cosine"}))
