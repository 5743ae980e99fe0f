"""Tiny random-weight sentence-transformers models (BERT, RoBERTa, XLM-RoBERTa, DistilBERT and ModernBERT
encoders; the case name's first word is the family) written as complete model directories.

Each case is a directory sentence-transformers and transformers load as they are: config.json,
model.safetensors, a tokenizer (WordPiece: vocab.txt + tokenizer.json; RoBERTa's byte-level BPE and
XLM-RoBERTa's unigram from tests/tiny_encoder_families.py), and the sentence-transformers files of
the pipeline under test (modules.json, 1_Pooling, 2_Dense, prompts). tests/parity/make_encoder_reference.py
runs them through sentence-transformers to make tests/golden/encoders/<case>.npz; tests/test_embed.py writes
the same directories and runs them through blazr. Weights come from a fixed seed with numpy only: changing
anything here changes them, so rerun the reference script and commit the new golden files.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from tests import tiny_encoder_families as fam

LETTERS = "abcdefghijklmnopqrstuvwxyz"
WORDS = (
    "the a man woman child dog cat is are was eating food bread rides horse plays guitar music girl boy "
    "carrying baby sky blue red green car road fast slow reads book runs park water drinks cold hot "
    "query passage question answer what where who how why when search document relevant"
).split()
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
VOCAB = SPECIALS + list(LETTERS) + ["##" + c for c in LETTERS] + list(".,!?'") + WORDS

SENTENCES = (
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing the guitar.",
    "The dog runs in the park, fast!",
    "Two children read a book in the cold water of the blue sky and the green road.",
    "What?",
    # longer than the 32-token max_seq_length of every case: truncated as sentence-transformers does
    "the man reads the book and the woman plays music while the dog runs in the park and the cat drinks "
    "cold water near the red car on the slow road",
)
QUERY = "what is the man eating?"

_BERT = dict(
    architectures=["BertModel"],
    model_type="bert",
    vocab_size=len(VOCAB),
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    hidden_act="gelu",
    max_position_embeddings=64,
    type_vocab_size=2,
    layer_norm_eps=1e-12,
    pad_token_id=0,
    position_embedding_type="absolute",
)
# the other families at BERT's sizes, in their own configs' spelling; RoBERTa's position table has two more
# rows than the longest input (positions start at padding_idx + 1)
_ROBERTA = dict(
    _BERT,
    architectures=["RobertaModel"],
    model_type="roberta",
    vocab_size=fam.vocab_size("roberta"),
    max_position_embeddings=66,
    type_vocab_size=1,
    layer_norm_eps=1e-5,
    pad_token_id=1,
    bos_token_id=0,
    eos_token_id=2,
)
_XLMR = dict(
    _ROBERTA, architectures=["XLMRobertaModel"], model_type="xlm-roberta", vocab_size=fam.vocab_size("xlmr")
)
# MPNet: RoBERTa's position offset, no token types, a relative position bias (32 buckets) in every layer
_MPNET = dict(
    _BERT,
    architectures=["MPNetModel"],
    model_type="mpnet",
    vocab_size=len(fam.mpnet_vocab(VOCAB)),
    max_position_embeddings=66,
    layer_norm_eps=1e-5,
    relative_attention_num_buckets=32,
    pad_token_id=1,
    bos_token_id=0,
    eos_token_id=2,
)
_MPNET.pop("type_vocab_size")
_MPNET.pop("position_embedding_type")
_DISTILBERT = dict(
    architectures=["DistilBertModel"],
    model_type="distilbert",
    vocab_size=len(VOCAB),
    dim=64,
    hidden_dim=128,
    n_layers=2,
    n_heads=4,
    activation="gelu",
    max_position_embeddings=64,
    sinusoidal_pos_embds=False,
    pad_token_id=0,
)
# three layers: layer 0 global, 1 and 2 local with a window (|i - j| <= 4) shorter than most inputs
_MODERNBERT = dict(
    architectures=["ModernBertModel"],
    model_type="modernbert",
    vocab_size=len(VOCAB),
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=3,
    num_attention_heads=4,
    hidden_activation="gelu",
    max_position_embeddings=64,
    norm_eps=1e-5,
    norm_bias=False,
    attention_bias=False,
    mlp_bias=False,
    global_attn_every_n_layers=3,
    local_attention=8,
    global_rope_theta=160000.0,
    local_rope_theta=10000.0,
    pad_token_id=0,
    bos_token_id=2,
    cls_token_id=2,
    eos_token_id=3,
    sep_token_id=3,
)
# NomicBERT in both spellings, as a config saved by transformers and nomic's hub config (which llama.cpp's
# converter reads) would have them: 8192 positions trained to 2048, as nomic-embed-text-v1.5's config says
_NOMIC = dict(
    architectures=["NomicBertModel"],
    model_type="nomic_bert",
    vocab_size=len(VOCAB),
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    hidden_act="silu",
    max_position_embeddings=8192,
    type_vocab_size=2,
    layer_norm_eps=1e-12,
    rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
    pad_token_id=0,
)
_NOMIC_HUB = dict(
    n_embd=64,
    n_inner=96,
    n_layer=2,
    n_head=4,
    activation_function="swiglu",
    n_positions=8192,
    max_trained_positions=2048,
    layer_norm_epsilon=1e-12,
    rotary_emb_base=1000,
    rotary_emb_fraction=1.0,
    rotary_emb_interleaved=False,
    rotary_emb_scale_base=None,
    rotary_scaling_factor=None,
    qkv_proj_bias=False,
    mlp_fc1_bias=False,
    mlp_fc2_bias=False,
    prenorm=False,
    parallel_block=False,
    causal=False,
    use_rms_norm=False,
)
# GTE ("new" on the hub): its hub and transformers configs share most keys; the hub's rope_theta is given as
# transformers' rope_parameters too. Token types: BERT's two (the tiny WordPiece tokenizer gives pairs 0 / 1)
_GTE = dict(
    architectures=["GteModel"],
    model_type="gte",
    vocab_size=len(VOCAB),
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    hidden_act="gelu",
    max_position_embeddings=8192,
    type_vocab_size=2,
    layer_norm_eps=1e-12,
    rope_theta=500000.0,
    rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
    position_embedding_type="rope",
    layer_norm_type="layer_norm",
    logn_attention_scale=False,
    pack_qkv=True,
    pad_token_id=0,
)
# the hub's fixed-NTK rope of factor 2 as transformers runs it (blazr.models.gte's docstring): a linear factor of
# 2 ** (2 / head_dim) on a base twice rope_theta; tests/test_embed_gte.py gives blazr the hub's spelling
GTE_NTK = {"type": "ntk", "factor": 2.0}
_GTE_NTK = {"rope_parameters": {"rope_type": "linear", "factor": 2.0 ** (2 / 16), "rope_theta": 1_000_000.0}}
FAMILY_CONFIGS = {
    "bert": _BERT,
    "roberta": _ROBERTA,
    "xlmr": _XLMR,
    "distilbert": _DISTILBERT,
    "mpnet": _MPNET,
    "modernbert": _MODERNBERT,
    "nomic": dict(_NOMIC, **_NOMIC_HUB),
    "gte": _GTE,
}

# case -> (config overrides, sentence-transformers pipeline): "pooling" modes, "dense" (out, activation) or
# None, "normalize", "prompts", "include_prompt"
CASES = {
    "bert_mean_normalize": ({}, dict(pooling=("mean",), dense=None, normalize=True)),
    "bert_cls_max_dense": (
        dict(hidden_act="gelu_new"),
        dict(pooling=("cls", "max"), dense=(48, "torch.nn.modules.activation.Tanh"), normalize=False),
    ),
    "bert_prompts_weighted": (
        {},
        dict(
            pooling=("weightedmean",),
            dense=None,
            normalize=True,
            prompts={"query": "query: ", "passage": "passage: "},
            include_prompt=False,
        ),
    ),
    "bert_plain": ({}, None),  # no modules.json: sentence-transformers' default, mean pooling
    "bert_reranker": (dict(architectures=["BertForSequenceClassification"], num_labels=1), None),
    "roberta_mean_normalize": ({}, dict(pooling=("mean",), dense=None, normalize=True)),
    "roberta_reranker": (dict(architectures=["RobertaForSequenceClassification"], num_labels=1), None),
    "xlmr_cls": ({}, dict(pooling=("cls",), dense=None, normalize=True)),
    "xlmr_reranker": (dict(architectures=["XLMRobertaForSequenceClassification"], num_labels=1), None),
    "distilbert_mean": ({}, dict(pooling=("mean",), dense=None, normalize=False)),
    "mpnet_mean_normalize": ({}, dict(pooling=("mean",), dense=None, normalize=True)),  # all-mpnet-base-v2
    "distilbert_reranker": (dict(architectures=["DistilBertForSequenceClassification"], num_labels=1), None),
    "modernbert_mean_normalize": ({}, dict(pooling=("mean",), dense=None, normalize=True)),
    # biases everywhere and the mean-pooling head: the options real checkpoints leave at their defaults
    "modernbert_reranker": (
        dict(
            architectures=["ModernBertForSequenceClassification"],
            num_labels=1,
            norm_bias=True,
            attention_bias=True,
            mlp_bias=True,
            classifier_bias=True,
            classifier_pooling="mean",
        ),
        None,
    ),
    # nomic-embed-text's pipeline: mean pooling, unit vectors, task prefixes as prompts
    "nomic_mean_normalize": (
        {},
        dict(
            pooling=("mean",),
            dense=None,
            normalize=True,
            prompts={"query": "search_query: ", "document": "search_document: "},
        ),
    ),
    # gte-base-en-v1.5's pipeline: the CLS token; then the same with the hub's NTK-scaled rope
    "gte_cls_normalize": ({}, dict(pooling=("cls",), dense=None, normalize=True)),
    "gte_ntk_cls": (_GTE_NTK, dict(pooling=("cls",), dense=None, normalize=True)),
    "gte_reranker": (dict(architectures=["GteForSequenceClassification"], num_labels=1), None),
}
# cross-encoders (sequence classifiers, scored by CrossEncoder) and sentence embedders
RERANKERS = tuple(name for name in CASES if CASES[name][0].get("num_labels") is not None)
EMBEDDERS = tuple(name for name in CASES if name not in RERANKERS)
POOLING_KEYS = {
    "cls": "pooling_mode_cls_token",
    "max": "pooling_mode_max_tokens",
    "mean": "pooling_mode_mean_tokens",
    "mean_sqrt_len": "pooling_mode_mean_sqrt_len_tokens",
    "weightedmean": "pooling_mode_weightedmean_tokens",
    "lasttoken": "pooling_mode_lasttoken",
}
MAX_SEQ_LENGTH = 32


def family(case: str) -> str:
    return case.split("_")[0]


def hidden_size(case: str) -> int:
    cfg = config(case)
    return cfg.get("hidden_size") or cfg["dim"]  # DistilBERT: "dim"


def config(case: str) -> dict:
    overrides, _ = CASES[case]
    out = dict(FAMILY_CONFIGS[family(case)], **overrides)
    if "num_labels" in out:
        out["id2label"] = {str(i): f"LABEL_{i}" for i in range(out.pop("num_labels"))}
    return out


def weights(case: str) -> dict[str, np.ndarray]:
    """HF BertModel (or BertForSequenceClassification, or the other families' models: names as their HF
    classes have them) tensors from a seed that depends on the case name."""
    cfg = config(case)
    seed = int.from_bytes(hashlib.sha256(case.encode()).digest()[:4], "little")
    rng = np.random.default_rng(seed)

    def normal(*shape, scale=0.2):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    if family(case) == "distilbert":
        return fam.distilbert_weights(cfg, normal)
    if family(case) == "modernbert":
        return fam.modernbert_weights(cfg, normal)
    if family(case) == "mpnet":
        return fam.mpnet_weights(cfg, normal)
    if family(case) == "nomic":
        return fam.nomic_weights(cfg, normal)
    if family(case) == "gte":
        return fam.gte_weights(cfg, normal)
    d, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    is_classifier = cfg["architectures"][0].endswith("ForSequenceClassification")
    bert = family(case) == "bert"
    prefix = ("bert." if bert else "roberta.") if is_classifier else ""
    out = {
        "embeddings.word_embeddings.weight": normal(v, d, scale=0.5),
        "embeddings.position_embeddings.weight": normal(cfg["max_position_embeddings"], d, scale=0.3),
        "embeddings.token_type_embeddings.weight": normal(cfg["type_vocab_size"], d, scale=0.3),
        "embeddings.LayerNorm.weight": 1 + normal(d, scale=0.1),
        "embeddings.LayerNorm.bias": normal(d, scale=0.1),
    }
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        for name in ("attention.self.query", "attention.self.key", "attention.self.value"):
            out[p + name + ".weight"], out[p + name + ".bias"] = normal(d, d), normal(d, scale=0.1)
        out[p + "attention.output.dense.weight"] = normal(d, d)
        out[p + "attention.output.dense.bias"] = normal(d, scale=0.1)
        out[p + "intermediate.dense.weight"], out[p + "intermediate.dense.bias"] = normal(f, d), normal(f)
        out[p + "output.dense.weight"], out[p + "output.dense.bias"] = normal(d, f), normal(d, scale=0.1)
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            out[p + norm + ".weight"], out[p + norm + ".bias"] = (
                1 + normal(d, scale=0.1),
                normal(d, scale=0.1),
            )
    if bert or not is_classifier:  # RobertaForSequenceClassification has no pooler
        out["pooler.dense.weight"], out["pooler.dense.bias"] = normal(d, d), normal(d, scale=0.1)
    out = {prefix + k: a for k, a in out.items()}
    if is_classifier and bert:
        out["classifier.weight"], out["classifier.bias"] = normal(1, d, scale=1.0), normal(1, scale=0.1)
    elif is_classifier:
        out |= fam.roberta_head(d, normal)
    return out


def dense_weights(case: str) -> dict[str, np.ndarray]:
    _, pipeline = CASES[case]
    rng = np.random.default_rng(7)
    width = hidden_size(case) * len(pipeline["pooling"])
    out = pipeline["dense"][0]
    return {
        "linear.weight": (rng.standard_normal((out, width)) * 0.2).astype(np.float32),
        "linear.bias": (rng.standard_normal(out) * 0.1).astype(np.float32),
    }


def write_case(case: str, directory: Path) -> Path:
    """The complete model directory of `case` under `directory`; returns it."""
    from safetensors.numpy import save_file

    root = Path(directory) / case
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(config(case), indent=1))
    save_file(weights(case), str(root / "model.safetensors"))
    if family(case) == "roberta":
        fam.write_bpe_tokenizer(root, MAX_SEQ_LENGTH)
    elif family(case) == "xlmr":
        fam.write_unigram_tokenizer(root, MAX_SEQ_LENGTH)
    elif family(case) == "mpnet":
        fam.write_mpnet_tokenizer(root, fam.mpnet_vocab(VOCAB), MAX_SEQ_LENGTH)
    else:
        _write_tokenizer(root, case)
    _, pipeline = CASES[case]
    if pipeline is not None:
        _write_pipeline(root, case, pipeline)
    return root


def _write_tokenizer(root: Path, case: str) -> None:
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece

    (root / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    tok = Tokenizer(WordPiece({t: i for i, t in enumerate(VOCAB)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)],
    )
    tok.decoder = decoders.WordPiece()
    tok.save(str(root / "tokenizer.json"))
    # DistilBERT's and ModernBERT's tokenizers give the model no token_type_ids (model_input_names)
    classes = {"distilbert": "DistilBertTokenizer", "modernbert": "PreTrainedTokenizerFast"}
    config = dict(
        tokenizer_class=classes.get(family(case), "BertTokenizer"),
        do_lower_case=True,
        model_max_length=MAX_SEQ_LENGTH,
        unk_token="[UNK]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        mask_token="[MASK]",
    )
    if family(case) == "modernbert":
        config["model_input_names"] = ["input_ids", "attention_mask"]
    (root / "tokenizer_config.json").write_text(json.dumps(config))


def _write_pipeline(root: Path, case: str, pipeline: dict) -> None:
    from safetensors.numpy import save_file

    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    width = hidden_size(case)
    pooling = {key: mode in pipeline["pooling"] for mode, key in POOLING_KEYS.items()}
    pooling |= {"word_embedding_dimension": width, "include_prompt": pipeline.get("include_prompt", True)}
    (root / "1_Pooling").mkdir(exist_ok=True)
    (root / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    if pipeline["dense"] is not None:
        out, activation = pipeline["dense"]
        (root / "2_Dense").mkdir(exist_ok=True)
        dense = dict(in_features=width * len(pipeline["pooling"]), out_features=out, bias=True)
        (root / "2_Dense" / "config.json").write_text(json.dumps(dense | {"activation_function": activation}))
        save_file(dense_weights(case), str(root / "2_Dense" / "model.safetensors"))
        modules.append(
            {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}
        )
    if pipeline["normalize"]:
        modules.append(
            {
                "idx": len(modules),
                "name": str(len(modules)),
                "path": f"{len(modules)}_Normalize",
                "type": "sentence_transformers.models.Normalize",
            }  # fmt: skip
        )
    (root / "modules.json").write_text(json.dumps(modules, indent=1))
    (root / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": MAX_SEQ_LENGTH}))
    st = {"prompts": pipeline.get("prompts", {}), "default_prompt_name": None}
    (root / "config_sentence_transformers.json").write_text(json.dumps(st))
