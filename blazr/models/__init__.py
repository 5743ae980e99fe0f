"""The one model registry: HF `architectures[0]`, HF `model_type` and GGUF `general.architecture` -> the family
module under blazr.models that runs it (imported lazily), and `build_model`.

A family module exports ModelArgs and Model, and for GGUF files `gguf_config(arch, get, config)` (its hparam
translation), GGUF_TENSOR_NAMES (its overrides of loaders.gguf.GGUF_TO_HF) and GGUF_QK_PERMUTED (the
architectures whose q/k rows llama.cpp's converter permuted).
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from blazr.errors import ConfigError, UnsupportedError


@dataclass(frozen=True)
class Family:
    module: str  # blazr.models.<module>
    architectures: tuple[str, ...]  # HF config architectures[0]
    model_types: tuple[str, ...]  # HF config model_type (read when a config names no architecture)
    gguf: tuple[str, ...]  # GGUF general.architecture


FAMILIES: tuple[Family, ...] = (
    Family(
        "llama",
        # the bare decoders (no LM head) are what decoder embedders like E5-Mistral are saved as
        (
            "LlamaForCausalLM",
            "MistralForCausalLM",
            "Qwen2ForCausalLM",
            "LlamaModel",
            "MistralModel",
            "Qwen2Model",
        ),
        ("llama", "mistral", "qwen2"),
        ("llama", "llama2", "llama3", "mistral", "qwen2"),
    ),
    Family("qwen3", ("Qwen3ForCausalLM", "Qwen3Model"), ("qwen3",), ("qwen3",)),
    Family("gemma3", ("Gemma3ForCausalLM",), ("gemma3_text",), ("gemma3",)),
    Family("phi3", ("Phi3ForCausalLM",), ("phi3",), ("phi3",)),
    Family("phi", ("PhiForCausalLM",), ("phi",), ("phi2",)),
    Family("gemma", ("GemmaForCausalLM",), ("gemma",), ("gemma",)),
    Family("gemma2", ("Gemma2ForCausalLM",), ("gemma2",), ("gemma2",)),
    Family("olmo2", ("Olmo2ForCausalLM",), ("olmo2",), ("olmo2",)),
    Family("granite", ("GraniteForCausalLM",), ("granite",), ("granite",)),
    Family("smollm3", ("SmolLM3ForCausalLM",), ("smollm3",), ("smollm3",)),
    Family("cohere", ("CohereForCausalLM",), ("cohere",), ("command-r",)),
    Family("internlm2", ("InternLM2ForCausalLM",), ("internlm2",), ("internlm2",)),
    Family("starcoder2", ("Starcoder2ForCausalLM",), ("starcoder2",), ("starcoder2",)),
    Family("gpt_neox", ("GPTNeoXForCausalLM",), ("gpt_neox",), ("gptneox",)),
    Family("falcon", ("FalconForCausalLM",), ("falcon",), ("falcon",)),
    # llama.cpp writes Mixtral as "llama" with an expert count: llama.gguf_config hands it on
    Family("mixtral", ("MixtralForCausalLM",), ("mixtral",), ()),
    Family("qwen2_moe", ("Qwen2MoeForCausalLM",), ("qwen2_moe",), ("qwen2moe",)),
    Family("olmoe", ("OlmoeForCausalLM",), ("olmoe",), ("olmoe",)),
    Family("qwen3_moe", ("Qwen3MoeForCausalLM",), ("qwen3_moe",), ("qwen3moe",)),
    Family("granitemoe", ("GraniteMoeForCausalLM",), ("granitemoe",), ("granitemoe",)),
    Family("gpt_oss", ("GptOssForCausalLM",), ("gpt_oss",), ("gpt-oss",)),
    Family(
        "deepseek2",
        ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM"),
        ("deepseek_v2", "deepseek_v3"),
        ("deepseek2",),
    ),
    # state-space models (blazr.models.cache: a state slot per running sequence, no paged KV)
    Family("mamba", ("MambaForCausalLM", "FalconMambaForCausalLM"), ("mamba", "falcon_mamba"), ("mamba",)),
    Family("mamba2", ("Mamba2ForCausalLM",), ("mamba2",), ("mamba2",)),
    Family("bamba", ("BambaForCausalLM",), ("bamba",), ("granitehybrid",)),
    Family("nemotron_h", ("NemotronHForCausalLM",), ("nemotron_h",), ("nemotron_h", "nemotron_h_moe")),
    Family("jamba", ("JambaForCausalLM",), ("jamba",), ("jamba",)),
    # attention and a Mamba2 mixer side by side in every layer (a ParallelCache per layer)
    Family("falcon_h1", ("FalconH1ForCausalLM",), ("falcon_h1",), ("falcon-h1",)),
    # llama.cpp writes Granite-4.0-H as granitehybrid too: bamba.gguf_config hands such files on
    Family("granitemoehybrid", ("GraniteMoeHybridForCausalLM",), ("granitemoehybrid",), ()),
    # encoders: sentence embedders and cross-encoder rerankers (blazr.tasks.embed), not causal LMs
    # (llama.cpp's converter writes RoBERTa, XLM-RoBERTa and DistilBERT as "bert": bert.gguf_config runs them)
    Family("bert", ("BertModel", "BertForMaskedLM", "BertForSequenceClassification"), ("bert",), ("bert",)),
    Family(
        "roberta",
        (
            "RobertaModel",
            "RobertaForMaskedLM",
            "RobertaForSequenceClassification",
            "XLMRobertaModel",
            "XLMRobertaForMaskedLM",
            "XLMRobertaForSequenceClassification",
        ),
        ("roberta", "xlm-roberta"),
        (),
    ),
    Family(
        "mpnet",
        ("MPNetModel", "MPNetForMaskedLM", "MPNetForSequenceClassification"),
        ("mpnet",),
        (),
    ),
    Family(
        "distilbert",
        ("DistilBertModel", "DistilBertForMaskedLM", "DistilBertForSequenceClassification"),
        ("distilbert",),
        (),
    ),
    Family(
        "modernbert",
        ("ModernBertModel", "ModernBertForMaskedLM", "ModernBertForSequenceClassification"),
        ("modernbert",),
        ("modern-bert",),
    ),
    # nomic-embed-text v1 / v1.5 (the hub's config says model_type nomic_bert with nomic's own key names)
    Family("nomic_bert", ("NomicBertModel",), ("nomic_bert",), ("nomic-bert",)),
    # Alibaba's GTE v1.5 / multilingual ("new" on the hub, with its own modelling code; transformers' gte)
    Family(
        "gte",
        ("NewModel", "GteModel", "NewForSequenceClassification", "GteForSequenceClassification"),
        ("new", "gte"),
        (),
    ),
    # speech recognition (blazr.tasks.transcribe); CTranslate2 and whisper.cpp files are read into this layout
    Family("whisper", ("WhisperForConditionalGeneration",), ("whisper",), ()),
    # speech synthesis (blazr.tasks.speak); Piper's ONNX voices are read into this layout (blazr.loaders.piper)
    Family("vits", ("VitsModel",), ("vits",), ()),
    # sound and text in one embedding space (blazr sound-review ranks sounds against their descriptions)
    Family("clap", ("ClapModel",), ("clap",), ()),
)

ARCHITECTURES = {name: f.module for f in FAMILIES for name in f.architectures}
MODEL_TYPES = {name: f.module for f in FAMILIES for name in f.model_types}
GGUF_ARCHITECTURES = {name: f.module for f in FAMILIES for name in f.gguf}

COMPUTE_DTYPES = ("f32", "f16", "bf16", "q8")


def supported() -> str:
    """The supported families, for error messages: 'llama (LlamaForCausalLM, ...), ...'."""
    return "; ".join(f"{f.module} ({', '.join(f.architectures)})" for f in FAMILIES)


def model_module_name(config: dict[str, Any], gguf_metadata: dict[str, Any] | None = None) -> str:
    """The blazr.models module for a config: by architectures[0], else by model_type / GGUF architecture."""
    architectures = config.get("architectures") or []
    if architectures:
        name = architectures[0]
        found = ARCHITECTURES.get(name)
    else:
        name = config.get("model_type") or (gguf_metadata or {}).get("general.architecture") or ""
        found = MODEL_TYPES.get(name) or GGUF_ARCHITECTURES.get(name)
    if found is None:
        raise UnsupportedError(
            f"model architecture {name or '(none given)'!r} is not supported; supported: {supported()}"
        )
    return found


def gguf_family(arch: str) -> ModuleType | None:
    """The family module for a GGUF general.architecture, or None when no family runs it."""
    module = GGUF_ARCHITECTURES.get(arch)
    return None if module is None else importlib.import_module(f"blazr.models.{module}")


def model_task(
    config: dict[str, Any], gguf_metadata: dict[str, Any] | None = None, directory: str | Path | None = None
) -> str:
    """What a checkpoint does: "generate" (a causal LM, run by the engine), "embed" (an encoder whose hidden
    states are pooled into sentence vectors) or "rerank" (a sequence classifier scoring query/document
    pairs). A family module says so with `task(config)`; without one it is a causal LM, unless its
    `directory` holds a sentence-transformers modules.json with a Pooling module, or it is a GGUF whose
    converter wrote a mean, CLS or last-token `{arch}.pooling_type` (llama.cpp's converter does so from that
    modules.json): then it is a decoder embedder (Qwen3-Embedding, E5-Mistral), whatever architecture its
    config names. A decoder GGUF of pooling type RANK is a yes/no reranker (llama.cpp's Qwen3-Reranker)."""
    task = getattr(get_model_module(config, gguf_metadata), "task", None)
    if task is not None:
        return task(config)
    if directory is not None and _has_pooling(Path(directory)):
        return "embed"
    pooling = _gguf_pooling(gguf_metadata)
    if pooling == GGUF_RANK_POOLING:
        return "rerank"  # a yes/no decoder reranker with its head rows (blazr.tasks.decoder_rerank)
    return "embed" if pooling in GGUF_EMBED_POOLING else "generate"


# llama.cpp's llama_pooling_type values of an embedder: mean, CLS, last token (0 is none); 4 is RANK, which
# its converter writes for Qwen3-Reranker with the "yes" / "no" rows of the LM head as cls.output
GGUF_EMBED_POOLING = (1, 2, 3)
GGUF_RANK_POOLING = 4


def _gguf_pooling(gguf_metadata: dict[str, Any] | None) -> int | None:
    if not gguf_metadata:
        return None
    value = gguf_metadata.get(f"{gguf_metadata.get('general.architecture', '')}.pooling_type")
    return None if value is None else int(value)


# model_task -> (what such a model is, how to use it): for errors when one is asked to do another's job
TASK_USES = {
    "generate": ("a text generation model", "`blazr generate` / `blazr serve`, or blazr.load(...).generate"),
    "embed": ("an embedding model", "`blazr embed`, or blazr.load(...).embed"),
    "rerank": ("a reranker", "`blazr rerank`, or blazr.load(...).rerank"),
    "transcribe": (
        "a speech recognition model (Whisper)",
        "`blazr transcribe`, or blazr.load(...).transcribe",
    ),
    "speak": ("a text-to-speech voice (VITS / Piper)", "`blazr speak`, or blazr.load(...).synthesize"),
    "review": ("a sound-text model (CLAP)", "`blazr sound-review DIR --model PATH`"),
}


def wrong_task(path: Any, task: str, wanted: str) -> str:
    """'<path> is an embedding model, not a text generation model: use `blazr embed` ...'."""
    what, use = TASK_USES.get(task, (f"a {task} model", "blazr.load"))
    return f"{path} is {what}, not {TASK_USES[wanted][0]}: use {use}"


def _has_pooling(directory: Path) -> bool:
    try:
        modules = json.loads((directory / "modules.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False  # no (readable) modules.json: not a sentence-transformers model
    return isinstance(modules, list) and any(
        isinstance(m, dict) and str(m.get("type", "")).endswith(".Pooling") for m in modules
    )


def get_model_module(config: dict[str, Any], gguf_metadata: dict[str, Any] | None = None) -> ModuleType:
    return importlib.import_module(f"blazr.models.{model_module_name(config, gguf_metadata)}")


def build_model(
    ckpt,
    backend,
    dtype: str | None = None,
    lm_head: bool = True,
    on_progress=None,
    stage: tuple[int, int] | None = None,
):
    """A loaded model for Checkpoint `ckpt` on `backend`, activations in `dtype` (default "f32"). A decoder
    built with lm_head=False (an embedder: hidden states only) neither expects nor loads its LM head; one
    built with stage=(index, count) is that pipeline stage (blazr.models.decoder_stage) and reads only its
    share of the weights. `on_progress(done, total)` is called as each checkpoint tensor is read.

    Fails before reading any weight when the backend lacks an op/dtype the model needs (UnsupportedError),
    and on a missing, unexpected or wrongly shaped tensor (CheckpointError).
    """
    from blazr.backends.base import check_supports

    if dtype is not None and dtype not in COMPUTE_DTYPES:
        raise ConfigError(f"--dtype {dtype!r} is unknown; use one of {', '.join(COMPUTE_DTYPES)}")
    # q8: float32 activations, rounded to int8 for the dot products with packed weights (a CPU backend
    # choice). Unset keeps each backend's default (the CPU rounds, as llama.cpp does); an explicit float
    # dtype asks for exact float activations everywhere.
    set_int8 = getattr(backend, "set_int8_activations", None)
    if dtype == "q8" and set_int8 is None:
        raise UnsupportedError(
            f"--dtype q8 (int8 activations) is a cpu backend option; device {backend.name} "
            "computes in f32 or f16"
        )
    if set_int8 is not None and dtype is not None:
        set_int8(dtype == "q8")
    dtype = "f32" if dtype in (None, "q8") else dtype
    module = get_model_module(ckpt.config, ckpt.gguf_metadata)
    model = module.Model(module.ModelArgs.from_dict(ckpt.config), backend, dtype)
    if not lm_head and hasattr(model, "without_head"):
        model.without_head()
    if stage is not None:
        from blazr.models.decoder_stage import keep_stage

        keep_stage(model, *stage)
    check_supports(backend, model.required_ops())
    weights = model.sanitize(dict(ckpt.tensors))
    if stage is not None:  # the other stages' tensors are theirs: never read here
        expected = model.weight_shapes()
        weights = {name: tensor for name, tensor in weights.items() if name in expected}
    if on_progress is not None:
        weights = _CountedTensors(weights, on_progress)
    fits = getattr(backend, "check_model_fits", None)
    if fits is not None:  # a backend that knows its memory refuses a model too big before any upload
        fits(weights, dtype)
    model.load_weights(weights, source=ckpt.path)
    return model


class _CountedTensors(dict):
    """Checkpoint tensors that report each read: (tensors read, tensors in all)."""

    def __init__(self, tensors: dict, report):
        super().__init__(tensors)
        self._report, self._read = report, 0

    def __getitem__(self, name):
        value = super().__getitem__(name)
        self._read += 1
        self._report(min(self._read, len(self)), len(self))
        return value
