"""The non-BERT parts of tests/tiny_encoders.py: tiny configs, tensor names and tokenizers of RoBERTa,
XLM-RoBERTa, DistilBERT, ModernBERT and MPNet. Weights come from the caller's seeded `normal`, so they are as fixed
as the BERT cases'."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

Normal = Callable[..., np.ndarray]  # normal(*shape, scale=...) float32 draws

# RoBERTa: byte-level BPE over the 256 byte symbols, whole-word merges for a few words (with and without the
# leading-space marker Ġ), RoBERTa's specials first and <mask> last as in roberta-base
BPE_WORDS = "the a man woman is eating food bread girl dog runs park what query passage".split()
BPE_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]

# XLM-RoBERTa: a SentencePiece-style unigram model ("▁" marks a word start), its specials at ids 0..3
UNIGRAM_WORDS = BPE_WORDS + "horse guitar baby book water cold car".split()
UNIGRAM_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'"


def bpe_model() -> tuple[list[str], list[tuple[str, str]]]:
    """(vocab, merges) of the tiny byte-level BPE: each listed word merged letter by letter, left to right."""
    from tokenizers import pre_tokenizers

    vocab = BPE_SPECIALS + sorted(pre_tokenizers.ByteLevel.alphabet())
    merges: list[tuple[str, str]] = []
    for word in BPE_WORDS:
        for form in (word, "Ġ" + word):
            cur = form[0]
            for ch in form[1:]:
                if (cur, ch) not in merges:
                    merges.append((cur, ch))
                cur += ch
                if cur not in vocab:
                    vocab.append(cur)
    return vocab + ["<mask>"], merges


def unigram_vocab() -> list[tuple[str, float]]:
    """(piece, log-probability) of the tiny unigram model: words beat their letters, every character exists."""
    pieces = [(s, 0.0) for s in BPE_SPECIALS]
    pieces += [("▁" + w, -2.0 - 0.01 * i) for i, w in enumerate(UNIGRAM_WORDS)]
    pieces += [("▁", -3.0)] + [(c, -5.0 - 0.01 * i) for i, c in enumerate(UNIGRAM_CHARS)]
    return pieces + [("<mask>", 0.0)]


def vocab_size(family: str) -> int:
    return len(bpe_model()[0]) if family == "roberta" else len(unigram_vocab())


def write_bpe_tokenizer(root: Path, max_length: int) -> None:
    """RoBERTa's tokenizer files: tokenizer.json (with vocab.json and merges.txt, as the Hub has them)."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers, processors
    from tokenizers.models import BPE

    vocab, merges = bpe_model()
    ids = {t: i for i, t in enumerate(vocab)}
    tok = Tokenizer(BPE(ids, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(BPE_SPECIALS + ["<mask>"])
    tok.save(str(root / "tokenizer.json"))
    (root / "vocab.json").write_text(json.dumps(ids))
    (root / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    _write_config(root, "RobertaTokenizer", max_length, add_prefix_space=False)


def write_unigram_tokenizer(root: Path, max_length: int) -> None:
    """XLM-RoBERTa's tokenizer.json: unigram pieces, Metaspace words, <s> A </s></s> B </s> for pairs."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers, processors
    from tokenizers.models import Unigram

    tok = Tokenizer(Unigram(unigram_vocab(), unk_id=3))
    tok.pre_tokenizer = pre_tokenizers.Sequence(  # as transformers' XLMRobertaTokenizer builds it
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")]
    )
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>",
        pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", 0), ("</s>", 2)],
    )
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tok.add_special_tokens(BPE_SPECIALS + ["<mask>"])
    tok.save(str(root / "tokenizer.json"))
    _write_config(root, "XLMRobertaTokenizer", max_length, add_prefix_space=True)


def _write_config(root: Path, cls: str, max_length: int, add_prefix_space: bool) -> None:
    config = dict(
        tokenizer_class=cls,
        model_max_length=max_length,
        bos_token="<s>",
        eos_token="</s>",
        sep_token="</s>",
        cls_token="<s>",
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token="<mask>",
        add_prefix_space=add_prefix_space,
    )
    (root / "tokenizer_config.json").write_text(json.dumps(config))


def mpnet_vocab(bert_vocab: list[str]) -> list[str]:
    """MPNet's WordPiece vocabulary: <s> <pad> </s> <unk> first (so <pad> is HF's fixed padding_idx 1), then
    BERT's (its [UNK] is the unknown token), <mask> last, as in all-mpnet-base-v2's vocab.txt."""
    return ["<s>", "<pad>", "</s>", "<unk>"] + list(bert_vocab) + ["<mask>"]


def write_mpnet_tokenizer(root: Path, vocab: list[str], max_length: int) -> None:
    """MPNetTokenizer's files: vocab.txt and tokenizer.json (BERT's normalizer and pre-tokenizer, WordPiece,
    <s> A </s> and <s> A </s></s> B </s> as RobertaProcessing makes them)."""
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece

    (root / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = Tokenizer(WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), add_prefix_space=False)
    tok.decoder = decoders.WordPiece()
    tok.add_special_tokens(["<s>", "<pad>", "</s>", "<unk>", "[UNK]", "<mask>"])
    tok.save(str(root / "tokenizer.json"))
    config = dict(
        tokenizer_class="MPNetTokenizer",
        do_lower_case=True,
        model_max_length=max_length,
        bos_token="<s>",
        eos_token="</s>",
        sep_token="</s>",
        cls_token="<s>",
        unk_token="[UNK]",
        pad_token="<pad>",
        mask_token="<mask>",
    )
    (root / "tokenizer_config.json").write_text(json.dumps(config))


def mpnet_weights(cfg: dict, normal: Normal) -> dict[str, np.ndarray]:
    """HF MPNetModel tensors, with the relative position bias (buckets, H) shared by every layer."""
    d, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    out = {
        "embeddings.word_embeddings.weight": normal(v, d, scale=0.5),
        "embeddings.position_embeddings.weight": normal(cfg["max_position_embeddings"], d, scale=0.3),
        "embeddings.LayerNorm.weight": 1 + normal(d, scale=0.1),
        "embeddings.LayerNorm.bias": normal(d, scale=0.1),
        "encoder.relative_attention_bias.weight": normal(
            cfg["relative_attention_num_buckets"], cfg["num_attention_heads"], scale=1.0
        ),
    }
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        for name in ("q", "k", "v", "o"):
            out[f"{p}attention.attn.{name}.weight"] = normal(d, d)
            out[f"{p}attention.attn.{name}.bias"] = normal(d, scale=0.1)
        out[p + "intermediate.dense.weight"], out[p + "intermediate.dense.bias"] = normal(f, d), normal(f)
        out[p + "output.dense.weight"], out[p + "output.dense.bias"] = normal(d, f), normal(d, scale=0.1)
        for norm in ("attention.LayerNorm", "output.LayerNorm"):
            out[f"{p}{norm}.weight"], out[f"{p}{norm}.bias"] = 1 + normal(d, scale=0.1), normal(d, scale=0.1)
    out["pooler.dense.weight"], out["pooler.dense.bias"] = normal(d, d), normal(d, scale=0.1)
    return out


def roberta_head(d: int, normal: Normal) -> dict[str, np.ndarray]:
    """RobertaForSequenceClassification's head (one label): dense + tanh + out_proj over <s>."""
    return {
        "classifier.dense.weight": normal(d, d),
        "classifier.dense.bias": normal(d, scale=0.1),
        "classifier.out_proj.weight": normal(1, d, scale=1.0),
        "classifier.out_proj.bias": normal(1, scale=0.1),
    }


def distilbert_weights(cfg: dict, normal: Normal) -> dict[str, np.ndarray]:
    """HF DistilBertModel (or DistilBertForSequenceClassification) tensors."""
    d, f, v = cfg["dim"], cfg["hidden_dim"], cfg["vocab_size"]
    out = {
        "embeddings.word_embeddings.weight": normal(v, d, scale=0.5),
        "embeddings.position_embeddings.weight": normal(cfg["max_position_embeddings"], d, scale=0.3),
        "embeddings.LayerNorm.weight": 1 + normal(d, scale=0.1),
        "embeddings.LayerNorm.bias": normal(d, scale=0.1),
    }
    for i in range(cfg["n_layers"]):
        p = f"transformer.layer.{i}."
        for name in ("q_lin", "k_lin", "v_lin", "out_lin"):
            out[f"{p}attention.{name}.weight"], out[f"{p}attention.{name}.bias"] = normal(d, d), normal(d)
        out[p + "ffn.lin1.weight"], out[p + "ffn.lin1.bias"] = normal(f, d), normal(f)
        out[p + "ffn.lin2.weight"], out[p + "ffn.lin2.bias"] = normal(d, f), normal(d, scale=0.1)
        for norm in ("sa_layer_norm", "output_layer_norm"):
            out[f"{p}{norm}.weight"], out[f"{p}{norm}.bias"] = 1 + normal(d, scale=0.1), normal(d, scale=0.1)
    if cfg["architectures"][0] == "DistilBertModel":
        return out
    out = {"distilbert." + k: a for k, a in out.items()}
    out["pre_classifier.weight"], out["pre_classifier.bias"] = normal(d, d), normal(d, scale=0.1)
    out["classifier.weight"], out["classifier.bias"] = normal(1, d, scale=1.0), normal(1, scale=0.1)
    return out


def modernbert_weights(cfg: dict, normal: Normal) -> dict[str, np.ndarray]:
    """HF ModernBertModel (or ModernBertForSequenceClassification) tensors; biases where the config has them."""
    d, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    norm_bias, attn_bias, mlp_bias = (cfg.get(k, False) for k in ("norm_bias", "attention_bias", "mlp_bias"))
    out: dict[str, np.ndarray] = {"embeddings.tok_embeddings.weight": normal(v, d, scale=0.5)}

    def linear(name: str, rows: int, cols: int, bias: bool) -> None:
        out[name + ".weight"] = normal(rows, cols)
        if bias:
            out[name + ".bias"] = normal(rows, scale=0.1)

    def norm(name: str) -> None:
        out[name + ".weight"] = 1 + normal(d, scale=0.1)
        if norm_bias:
            out[name + ".bias"] = normal(d, scale=0.1)

    norm("embeddings.norm")
    for i in range(cfg["num_hidden_layers"]):
        p = f"layers.{i}."
        if i:  # layer 0's attn_norm is an Identity
            norm(p + "attn_norm")
        linear(p + "attn.Wqkv", 3 * d, d, attn_bias)
        linear(p + "attn.Wo", d, d, attn_bias)
        norm(p + "mlp_norm")
        linear(p + "mlp.Wi", 2 * f, d, mlp_bias)
        linear(p + "mlp.Wo", d, f, mlp_bias)
    norm("final_norm")
    if cfg["architectures"][0] == "ModernBertModel":
        return out
    out = {"model." + k: a for k, a in out.items()}
    linear("head.dense", d, d, cfg.get("classifier_bias", False))
    norm("head.norm")
    out["classifier.weight"], out["classifier.bias"] = normal(1, d, scale=1.0), normal(1, scale=0.1)
    return out


def nomic_weights(cfg: dict, normal: Normal) -> dict[str, np.ndarray]:
    """NomicBERT's tensors as nomic's hub checkpoints name them (transformers renames them at load)."""
    d, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    out = {
        "embeddings.word_embeddings.weight": normal(v, d, scale=0.5),
        "embeddings.token_type_embeddings.weight": normal(cfg["type_vocab_size"], d, scale=0.3),
        "emb_ln.weight": 1 + normal(d, scale=0.1),
        "emb_ln.bias": normal(d, scale=0.1),
    }
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layers.{i}."
        out[p + "attn.Wqkv.weight"] = normal(3 * d, d)  # (3D, D): q, k, v rows
        out[p + "attn.out_proj.weight"] = normal(d, d)
        out[p + "mlp.fc11.weight"], out[p + "mlp.fc12.weight"] = normal(f, d), normal(f, d)  # up, gate
        out[p + "mlp.fc2.weight"] = normal(d, f)
        for norm in ("norm1", "norm2"):
            out[p + norm + ".weight"], out[p + norm + ".bias"] = (
                1 + normal(d, scale=0.1),
                normal(d, scale=0.1),
            )
    return out


def gte_weights(cfg: dict, normal: Normal) -> dict[str, np.ndarray]:
    """GTE's tensors as Alibaba's hub checkpoints name them (transformers renames them at load); a reranker's
    encoder under "new." with BERT's pooler and classifier."""
    d, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    out = {
        "embeddings.word_embeddings.weight": normal(v, d, scale=0.5),
        "embeddings.token_type_embeddings.weight": normal(cfg["type_vocab_size"], d, scale=0.3),
        "embeddings.LayerNorm.weight": 1 + normal(d, scale=0.1),
        "embeddings.LayerNorm.bias": normal(d, scale=0.1),
    }
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        out[p + "attention.qkv_proj.weight"] = normal(3 * d, d)  # (3D, D): q, k, v rows
        out[p + "attention.qkv_proj.bias"] = normal(3 * d, scale=0.1)
        out[p + "attention.o_proj.weight"], out[p + "attention.o_proj.bias"] = (
            normal(d, d),
            normal(d, scale=0.1),
        )
        out[p + "mlp.up_gate_proj.weight"] = normal(2 * f, d)  # (2F, D): up rows, then gate rows
        out[p + "mlp.down_proj.weight"], out[p + "mlp.down_proj.bias"] = normal(d, f), normal(d, scale=0.1)
        for norm in ("attn_ln", "mlp_ln"):
            out[p + norm + ".weight"], out[p + norm + ".bias"] = (
                1 + normal(d, scale=0.1),
                normal(d, scale=0.1),
            )
    if not cfg["architectures"][0].endswith("ForSequenceClassification"):
        return out
    out = {"new." + k: a for k, a in out.items()}
    out["new.pooler.dense.weight"], out["new.pooler.dense.bias"] = normal(d, d), normal(d, scale=0.1)
    out["classifier.weight"], out["classifier.bias"] = normal(1, d, scale=1.0), normal(1, scale=0.1)
    return out
