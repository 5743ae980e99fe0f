"""Write docs/models.md: every model family blazr runs, with the evidence the tests give for each format and
backend, generated from a test run (not written by hand).

    .venv/bin/python tools/models_table.py            # runs the tests, then writes docs/models.md
    .venv/bin/python tools/models_table.py --check    # exit 1 when docs/models.md lists other families

It runs tests/test_parity.py (tiny random-weight checkpoints against transformers) and
tests/test_real_model_reference.py (real GGUF files against their float reference; skipped where the registry
cannot be reached) with a JUnit report, and turns each test id into a cell: "pass", "FAIL" or "-" (no such test).
"""

from __future__ import annotations

import argparse
import datetime
import platform
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DOC = REPO / "docs" / "models.md"
TESTS = [
    "tests/test_parity.py",
    "tests/test_real_model_reference.py",
    "tests/test_embed.py",
    "tests/test_embed_minilm.py",
    "tests/test_embed_gguf.py",
    "tests/test_embed_nomic.py",
    "tests/test_whisper_model.py",
    "tests/test_vits_model.py",
    "tests/test_piper_voice.py",
    "tests/test_kokoro_model.py",
    "tests/test_kokoro_onnx.py",
    "tests/test_clap_model.py",
]
ENCODER_BACKENDS = ("cpu", "cpu-numpy", "wgpu")  # the `backend` fixture's ids in tests/test_embed*.py

# test_parity ids: test_tiny_model_matches_transformers[<model>-<format>-<dtype>], ..._on_wgpu_...[<model>]
COLUMNS = [
    ("safetensors-float32", "SafeTensors F32"),
    ("safetensors-float16", "SafeTensors F16"),
    ("safetensors-bfloat16", "SafeTensors BF16"),
    ("gguf-F32", "GGUF F32 (llama.cpp converter)"),
    ("gguf-F16", "GGUF F16 (llama.cpp converter)"),
    ("wgpu", "wgpu (lavapipe)"),
]


def run_tests(report: Path) -> int:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", *TESTS]
    return subprocess.run(cmd, cwd=REPO).returncode


def outcomes(report: Path) -> dict[str, str]:
    """test name with its parameters -> "pass" | "FAIL" | "skip"."""
    out = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        kids = {child.tag for child in case}
        out[case.get("name")] = (
            "FAIL" if kids & {"failure", "error"} else "skip" if "skipped" in kids else "pass"
        )
    return out


def tiny_cell(results: dict[str, str], model: str, column: str) -> str:
    if column == "wgpu":
        return results.get(f"test_tiny_model_on_wgpu_gives_the_cpu_greedy_ids[{model}]", "-")
    return results.get(f"test_tiny_model_matches_transformers[{model}-{column}]", "-")


# tests/test_real_model_reference.py: test name -> column title; the id's variant ("prompt", "int8", ...) follows
REAL_CHECKS = {
    "test_float32_activations_compute_the_reference_logits": "float32 logits",
    "test_int8_activations_stay_near_the_reference_logits": "int8 logits",
    "test_greedy_generation_parts_from_the_reference_only_at_a_near_tie": "greedy ids",
}


def real_models(results: dict[str, str]) -> tuple[list[str], dict[str, dict[str, str]]]:
    """(column titles, {real model: {column: outcome}}) of the real-model tests."""
    columns: list[str] = []
    table: dict[str, dict[str, str]] = {}
    for name, outcome in results.items():
        match = re.fullmatch(r"(test_\w+)\[([\w.-]+?)-(\w+)\]", name)
        if not match or match.group(1) not in REAL_CHECKS:
            continue
        test, model, variant = match.groups()
        column = f"{REAL_CHECKS[test]} ({variant})"
        if column not in columns:
            columns.append(column)
        table.setdefault(model, {})[column] = outcome
    return columns, table


def family_rows(
    encoders: bool = False, speech: bool = False, synthesis: bool = False, review: bool = False
) -> list[tuple[str, str, str, list[str]]]:
    """(family module, HF architectures, GGUF architectures, tiny models of the family) of the decoder
    families, or with `encoders` of the encoder families (tiny cases of tests/tiny_encoders.py), with
    `speech` of the speech recognition models (tiny cases of tests/tiny_whisper.py), with `synthesis` of the
    text-to-speech models (tiny cases of tests/test_vits_model.py), with `review` of the sound-text models
    (CLAP: the tiny checkpoint of tests/test_clap_model.py)."""
    from blazr.models import FAMILIES, model_module_name, model_task
    from tests.test_vits_model import CASES as VITS_CASES
    from tests.tiny_encoders import CASES, config
    from tests.tiny_models import MODELS, tiny_config
    from tests.tiny_whisper import CASES as WHISPER_CASES

    tiny: dict[str, list[str]] = {}
    for model in MODELS:
        tiny.setdefault(model_module_name(tiny_config(model)), []).append(model)
    for case in CASES:
        tiny.setdefault(model_module_name(config(case)), []).append(case)
    tiny["whisper"] = list(WHISPER_CASES)
    tiny["vits"] = list(VITS_CASES)
    tiny["clap"] = ["tiny_clap"]
    want = "encoders" if encoders else "decoders"
    want = "review" if review else "synthesis" if synthesis else "speech" if speech else want
    kinds = {"transcribe": "speech", "speak": "synthesis", "review": "review", "generate": "decoders"}
    rows = []
    for f in FAMILIES:
        task = model_task({"architectures": [f.architectures[0]]})
        kind = kinds.get(task, "encoders")
        if kind == want:
            rows.append((f.module, ", ".join(f.architectures), ", ".join(f.gguf), tiny.get(f.module, [])))
    return rows


def encoder_cell(results: dict[str, str], case: str, backend: str) -> str:
    """test_embed.py's outcome for a tiny encoder case on a backend (the rerankers have their own test)."""
    from tests.tiny_encoders import RERANKERS

    if case in RERANKERS:
        return results.get(f"test_reranker_scores_equal_sentence_transformers[{backend}-{case}]", "-")
    return results.get(f"test_vectors_equal_sentence_transformers[{backend}-{case}]", "-")


def gguf_encoder_cells(results: dict[str, str]) -> list[str]:
    """test_embed_gguf.py's outcomes per file and backend, one line per tiny case."""
    from tests.test_embed_gguf import EMBEDDERS, RERANKERS

    # (case, test, the parameters before the file type, file types)
    files = [
        (
            "bert_mean_normalize",
            "test_gguf_embedder_equals_sentence_transformers",
            "",
            ("f32", "f16", "q8_0"),
        ),
        ("bert_reranker", "test_gguf_reranker_scores_as_llama_cpp_heads_them", "", ("f32", "f16")),
    ]
    files += [
        (c, "test_gguf_family_embedder_equals_sentence_transformers", f"{c}-", ("f32", "f16"))
        for c in EMBEDDERS
    ]
    files += [
        (c, "test_gguf_family_reranker_equals_transformers", f"{c}-", ("f32", "f16")) for c in RERANKERS
    ]
    files += [
        (c, "test_gguf_modernbert_equals_transformers_on_its_ids", f"{c}-", ("f32", "f16"))
        for c in ("modernbert_mean_normalize", "modernbert_reranker")
    ]
    files += [
        (
            "nomic_mean_normalize",
            "test_gguf_nomic_bert_equals_sentence_transformers",
            "",
            ("f32", "f16", "q8_0"),
        )
    ]
    return [
        f"- {case}: "
        + "; ".join(
            f"{t} "
            + ", ".join(f"{b} {results.get(f'{test}[{b}-{params}{t}]', '-')}" for b in ENCODER_BACKENDS)
            for t in types
        )
        for case, test, params, types in files
    ]


def cpu_model() -> str:
    """The CPU's model name (as lscpu shows it), else the machine type."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def render(results: dict[str, str]) -> str:
    cpu = cpu_model()
    lines = [
        "# Model families",
        "",
        "Generated by `tools/models_table.py` from a run of "
        + " and ".join(f"`{t}`" for t in TESTS)
        + f" ({datetime.date.today().isoformat()}, {cpu}); do not edit by hand.",
        "",
        "Each tiny checkpoint is a random-weight model of the family built by `tests/tiny_models.py` /",
        "`tests/tiny_zoo/` and run by transformers for the reference (`tests/golden/`): a cell passes when blazr's",
        "64 greedy ids equal transformers' and every logit is within the tolerance of `tests/test_parity.py`.",
        "GGUF cells read files written by llama.cpp's own `convert_hf_to_gguf.py`. The wgpu column runs the",
        "F32 SafeTensors checkpoint on the WGSL backend (lavapipe in CI) and must give the CPU's greedy ids.",
        "`-`: no such test (see the family's note).",
        "",
        "| family | HF architectures | GGUF architectures | tiny checkpoint | "
        + " | ".join(title for _, title in COLUMNS)
        + " |",
        "|" + "---|" * (4 + len(COLUMNS)),
    ]
    for module, archs, gguf_archs, models in family_rows():
        for model in models or ["(none)"]:
            cells = [tiny_cell(results, model, column) for column, _ in COLUMNS]
            lines.append(f"| {module} | {archs} | {gguf_archs} | {model} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Notes: llama.cpp's converter drops the sliding window of Mistral and StarCoder2, so their GGUF files run",
        "full attention, as llama.cpp runs them (tested separately, not against the windowed reference). It cannot",
        "convert Falcon-RW (ALiBi, sequential blocks) at all. transformers has no InternLM2 class: its reference",
        "runs the equivalent Llama checkpoint. Falcon-RW's reference is transformers' SDPA path (its eager path",
        "adds ALiBi twice). Mixtral GGUF files say `llama` with an expert count. Quantized MoE experts stay in",
        "their GGML blocks (tests/test_moe_packed.py: every MoE family's Q8_0-expert GGUF against its",
        "dequantized self, on the CPU and wgpu). DeepSeek-V2/V3 keep one latent of kv_lora_rank +",
        "qk_rope_head_dim values per token and layer in the KV cache (tests/test_family_deepseek.py). GPT-OSS's",
        "YaRN keeps its ramp's ends unrounded (transformers' truncate=False) in GGUF files too, where llama.cpp",
        "rounds them; its MXFP4 experts run packed (tests/test_moe_packed.py). The state-space families (Mamba,",
        "Falcon-Mamba, Mamba2) and hybrids (Jamba, Bamba, Granite-4.0-H, Nemotron-H, Falcon-H1) keep one conv window",
        "and one SSM state per running sequence and Mamba layer instead of per-token KV (tests/test_family_mamba.py:",
        "engine invariants, Q8_0 files against their dequantized selves); Falcon-H1 runs attention and a Mamba2 mixer",
        "side by side in every layer, its multipliers folded into the weights (as llama.cpp's converter folds them",
        "into its GGUF files). llama.cpp writes Bamba and Granite-4.0-H as",
        "`granitehybrid` (read by the bamba family, which hands Granite-4.0-H files on). Granite-4.0-H, Nemotron-H",
        "and Jamba attend without positions (NoPE), as",
        "released; transformers' cached decode of the tiny Nemotron-H drifts from its own full pass by 5.7e-2",
        "(the goldens are the full pass, which blazr's prompts and decode steps both match). Nemotron 3's mixture",
        "layers (tiny model nemotron_h_moe; llama.cpp's `nemotron_h_moe`, read by the nemotron_h family) route",
        "ungated squared-ReLU experts in a latent space by DeepSeek-V3's biased sigmoid router, beside a shared",
        "expert; their Q8_0 experts run packed (tests/test_family_mamba.py).",
        "",
        "## Encoders (embeddings and rerankers)",
        "",
        "Each tiny case of `tests/tiny_encoders.py` is a complete sentence-transformers model directory (random",
        "weights, the family's kind of tokenizer (WordPiece; RoBERTa's byte-level BPE, XLM-RoBERTa's unigram),",
        "the pipeline named by the case: pooling modes, Dense, Normalize, prompts) whose reference is",
        "sentence-transformers itself (`tests/golden/encoders/`): a cell passes when",
        "blazr gives the same token ids and vectors with cosine >= 0.99999 (rerankers: CrossEncoder scores",
        "within 1e-4), on each backend.",
        "",
        "| family | HF architectures | GGUF architectures | tiny case | "
        + " | ".join(ENCODER_BACKENDS)
        + " |",
        "|" + "---|" * (4 + len(ENCODER_BACKENDS)),
    ]
    for module, archs, gguf_archs, cases in family_rows(encoders=True):
        for case in cases or ["(none)"]:
            cells = [encoder_cell(results, case, b) for b in ENCODER_BACKENDS]
            lines.append(f"| {module} | {archs} | {gguf_archs or '-'} | {case} | " + " | ".join(cells) + " |")
    minilm = [results.get(f"test_minilm_equals_sentence_transformers[{b}]", "-") for b in ENCODER_BACKENDS]
    lines += [
        "",
        "Real: all-MiniLM-L6-v2 (catalog `all-minilm`) against sentence-transformers' vectors of 50 sentences",
        "(cosine >= 0.99999, the same similarity ranking of 25 pairs): "
        + ", ".join(f"{b} {r}" for b, r in zip(ENCODER_BACKENDS, minilm, strict=True))
        + ".",
        "",
        "GGUF (llama.cpp's converter, `tests/test_embed_gguf.py`; RoBERTa, XLM-RoBERTa and DistilBERT are written",
        "as `bert` and run as BERT; DistilBERT's reranker head keeps HF's ReLU where llama.cpp applies tanh;",
        "ModernBERT's run on its tokenizer's ids, as the converter writes the tiny WordPiece vocabulary as a",
        "merge-less BPE blazr refuses; NomicBERT's `nomic-bert` files in `tests/test_embed_nomic.py`, which also",
        "reads nomic's own hub config keys):",
        "",
        *gguf_encoder_cells(results),
        "",
        "## Speech recognition",
        "",
        "Each tiny case of `tests/tiny_whisper.py` is a random-weight Whisper (English-only, multilingual) run by",
        "transformers for the reference (`tests/golden/whisper/`): a cell passes when blazr's encoder output is",
        "within tolerance and its 40 greedy ids after Whisper's prompt equal transformers' on a random log-mel",
        "window (`tests/test_whisper_model.py`).",
        "",
        "| family | HF architectures | tiny case | " + " | ".join(ENCODER_BACKENDS) + " |",
        "|" + "---|" * (3 + len(ENCODER_BACKENDS)),
    ]
    for module, archs, _, cases in family_rows(speech=True):
        for case in cases:
            cells = [
                results.get(f"test_encoder_and_greedy_decoding_equal_transformers[{b}-{case}]", "-")
                for b in ENCODER_BACKENDS
            ]
            lines.append(f"| {module} | {archs} | {case} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Speech synthesis",
        "",
        "Each tiny case is a random-weight Hugging Face VitsModel (`tests/data/tiny_vits/`: stochastic duration",
        "predictor; several speakers) run by transformers with noise off for the reference (`tests/golden/vits/`):",
        "a cell passes when blazr's log durations, frame counts and waveform are within 1e-4",
        "(`tests/test_vits_model.py`). Piper voices are VITS exported to ONNX: blazr reads the file's weights",
        "into this layout.",
        "",
        "| family | HF architectures | tiny case | " + " | ".join(ENCODER_BACKENDS) + " |",
        "|" + "---|" * (3 + len(ENCODER_BACKENDS)),
    ]
    for module, archs, _, cases in family_rows(synthesis=True):
        for case in cases:
            cells = [
                results.get(f"test_waveform_and_durations_equal_transformers[{b}-{case}]", "-")
                for b in ENCODER_BACKENDS
            ]
            lines.append(f"| {module} | {archs} | {case} | " + " | ".join(cells) + " |")
    piper = [
        results.get(name, "-")
        for name in ("test_waveform_equals_onnxruntime", "test_phonemes_equal_piper_phonemize")
    ]
    lines += [
        "",
        "Real: Piper en_US joe medium (catalog `piper-joe`): waveform against onnxruntime running the same file",
        f"(every sample within 2e-4) {piper[0]}; phonemes against piper-phonemize {piper[1]}",
        "(`tests/test_piper_voice.py`).",
        "",
        "Kokoro-82M (StyleTTS2 with an iSTFTNet decoder): a tiny random Kokoro (`tests/data/tiny_kokoro/`) against",
        "the `kokoro` package's KModel with the harmonic source's noise off (`tests/golden/kokoro/tiny.npz`): a",
        "cell passes when the durations are identical, F0 and energy within float32 agreement, and the waveform",
        "close end to end (`tests/test_kokoro_model.py`).",
        "",
        "| family | checkpoint | tiny case | " + " | ".join(ENCODER_BACKENDS) + " |",
        "|" + "---|" * (3 + len(ENCODER_BACKENDS)),
    ]
    for case, test in (
        ("prosody", "test_prosody_matches_kmodel"),
        ("waveform", "test_waveform_matches_kmodel_end_to_end"),
    ):
        cells = [results.get(f"{test}[{b}]", "-") for b in ENCODER_BACKENDS]
        lines.append(f"| kokoro | KModel (SafeTensors) | {case} | " + " | ".join(cells) + " |")
    kokoro = [
        results.get(name, "-")
        for name in (
            "test_durations_within_one_frame",
            "test_same_spectrogram",
            "test_japanese_text_is_read_by_kokoros_g2p_and_spoken",
        )
    ]
    lines += [
        "",
        "Real: Kokoro-82M int8 ONNX with five Japanese voices (catalog `kokoro-ja`) against onnxruntime running the",
        f"same file: durations within one frame {kokoro[0]}; the same spectrogram {kokoro[1]}; Japanese text read by",
        f"misaki (Kokoro's own G2P) and spoken {kokoro[2]} (`tests/test_kokoro_onnx.py`).",
        "",
        "## Sound and text (CLAP, for `blazr sound-review`)",
        "",
        "A tiny random transformers ClapModel (`tests/data/tiny_clap/`: RoBERTa text tower, a three-stage HTSAT",
        "audio tower, unfused) run by transformers for the reference (`tests/golden/clap.npz`): a cell passes when",
        "blazr's audio and text embeddings and logits are within tolerance (`tests/test_clap_model.py`).",
        "",
        "| family | HF architectures | tiny case | " + " | ".join(ENCODER_BACKENDS) + " |",
        "|" + "---|" * (3 + len(ENCODER_BACKENDS)),
    ]
    for module, archs, _, cases in family_rows(review=True):
        for case in cases:
            cells = [
                results.get(f"test_embeddings_and_logits_equal_transformers[{b}]", "-")
                for b in ENCODER_BACKENDS
            ]
            lines.append(f"| {module} | {archs} | {case} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Real checkpoints",
        "",
        "Real GGUF files from the package registries against their float reference (transformers loading the same",
        "file dequantized, `tests/golden/*_float.npz`); `skip` where the registry could not be reached.",
        "",
    ]
    columns, table = real_models(results)
    lines += ["| model | " + " | ".join(columns) + " |", "|" + "---|" * (1 + len(columns))]
    lines += [f"| {m} | " + " | ".join(row.get(c, "-") for c in columns) + " |" for m, row in table.items()]
    return "\n".join(lines) + "\n"


def listed_families(text: str) -> set[str]:
    return {
        line.split("|")[1].strip()
        for line in text.splitlines()[1:]
        if line.startswith("| ") and "|" in line[2:]
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check docs/models.md lists every family")
    args = parser.parse_args()
    if args.check:
        rows = (
            family_rows()
            + family_rows(encoders=True)
            + family_rows(speech=True)
            + family_rows(synthesis=True)
            + family_rows(review=True)
        )
        want = {module for module, *_ in rows}
        have = listed_families(DOC.read_text()) if DOC.exists() else set()
        missing = sorted(want - have)
        if missing:
            print(f"docs/models.md lacks {missing}: run tools/models_table.py", file=sys.stderr)
            return 1
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.xml"
        code = run_tests(report)
        DOC.write_text(render(outcomes(report)))
    print(f"wrote {DOC.relative_to(REPO)} (pytest exit {code})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
