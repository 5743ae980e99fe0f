"""Kokoro as a voice (blazr/tasks/speak_kokoro.py) on the tiny random Kokoro (tests/data/tiny_kokoro), and its
text reading (blazr/tasks/kokoro_g2p.py): Synthesizer.load and is_voice find it; its voices, their languages
and the default; phonemes -> ids in Kokoro's layout; each sentence spoken by the network with the voice pack's
row for its length and the seeded noise; reproducible with a seed; sentences over the context cut at a break;
every client mistake a clear error. The readers' phonemes for each language family are pinned (misaki's own
output, so a reader wired to the wrong language or function shows), and a missing reader names the extra."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from blazr.errors import ConfigError, InputError, UnsupportedError
from blazr.tasks import kokoro_g2p
from blazr.tasks.kokoro_g2p import LANGUAGES, KokoroPhonemizer, cut, language_of, split_sentences
from blazr.tasks.speak import Synthesizer, is_voice
from blazr.tasks.speak_kokoro import KokoroSynthesizer, is_kokoro, kokoro_onnx_file

TINY = Path(__file__).resolve().parent / "data" / "tiny_kokoro"
pytest.importorskip("misaki")


@pytest.fixture(scope="module")
def tiny() -> KokoroSynthesizer:
    synth = Synthesizer.load(TINY)
    assert isinstance(synth, KokoroSynthesizer)
    return synth


# ---- reading text -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("voice", "tag"),
    [
        ("af_heart", "en-us"),
        ("bm_george", "en-gb"),
        ("jf_alpha", "ja"),
        ("zf_xiaobei", "zh"),
        ("ff_siwis", "fr-fr"),
    ],
)
def test_a_voice_speaks_the_language_its_name_says(voice, tag):
    assert language_of(voice).tag == tag


@pytest.mark.parametrize("voice", ["tiny", "xf_nobody", "a_b"])
def test_a_voice_without_kokoros_code_speaks_american_english(voice):
    assert language_of(voice).tag == "en-us"


def test_sentences_split_at_their_ends_in_latin_and_cjk_text():
    assert split_sentences("Hello there. How are you?\nFine!") == ["Hello there.", "How are you?", "Fine!"]
    assert split_sentences("こんにちは。元気ですか？はい") == ["こんにちは。", "元気ですか？", "はい"]
    assert split_sentences("  \n ") == []


def test_cut_keeps_pieces_within_the_limit_at_breaks():
    text = "abc def, ghi jkl. mnopqrstuvwxyz"
    pieces = cut(text, 10)
    assert all(0 < len(p) <= 10 for p in pieces)
    assert pieces[:3] == ["abc def,", "ghi jkl.", "mnopqrstuv"]  # a stretch without a break: at the limit
    assert "".join(pieces).replace(" ", "") == text.replace(" ", "")
    assert cut("short", 10) == ["short"] and cut("", 10) == []


@pytest.mark.parametrize(
    ("code", "text", "phonemes"),
    [
        ("a", "Hello world.", "həlˈO wˈɜɹld."),
        ("b", "Hello there.", "həlˈQ ðˈAə."),
        ("e", "Hola, mundo.", "ˈola, mˈundo."),
        ("j", "こんにちは、世界。", "koɲɲiʨiβa, sekai."),
        ("z", "你好，世界。", "ni↓xau↓, ʂɨ↘ʨje↘."),
    ],
)
def test_each_language_reads_with_its_own_reader(code, text, phonemes):
    assert kokoro_g2p.reader(LANGUAGES[code])(text) == phonemes


def test_a_missing_reader_names_the_extra(monkeypatch):
    import misaki

    monkeypatch.delattr(misaki, "ja", raising=False)
    monkeypatch.setitem(sys.modules, "misaki.ja", None)  # importing it now raises ImportError
    with pytest.raises(UnsupportedError, match=r"Japanese.*pip install 'blazr\[kokoro\]'"):
        kokoro_g2p.reader(LANGUAGES["j"])


def test_phonemes_outside_the_vocab_are_dropped_and_long_sentences_cut():
    phonemizer = KokoroPhonemizer({ch: i for i, ch in enumerate("abcdefghijklmnopqrstuvwxyz ,.", 1)}, 12)
    pieces = phonemizer.phonemes("Hello world. The quick brown fox jumps over the lazy dog.", LANGUAGES["a"])
    assert all(len(p) <= 12 and set(p) <= set("abcdefghijklmnopqrstuvwxyz ,.") for p in pieces)
    assert pieces[0] == "həlˈO wˈɜɹld.".translate({ord(c): None for c in "əˈOɜɹ"})  # "hl wld."
    assert len(pieces) >= 3


def test_a_reader_failing_on_the_text_is_an_input_error():
    phonemizer = KokoroPhonemizer({"a": 1}, 12)

    def fails(text: str) -> str:
        raise AssertionError("no moras")

    phonemizer._readers["j"] = fails
    with pytest.raises(InputError, match=r"the Japanese reader could not read '\?\?' \(no moras\)"):
        phonemizer.phonemes("??", LANGUAGES["j"])


# ---- the tiny Kokoro as a voice -----------------------------------------------------------------------------


def test_kokoro_directories_are_voices(tmp_path):
    assert is_voice(TINY) and is_kokoro(TINY)
    onnx = tmp_path / "kokoro.onnx"
    onnx.write_bytes(b"")
    assert kokoro_onnx_file(tmp_path) is None  # no voice packs beside it
    np.savez(tmp_path / "voices.npz", af_x=np.zeros((2, 1, 256), np.float32))
    assert kokoro_onnx_file(tmp_path) == onnx and kokoro_onnx_file(onnx) == onnx and is_voice(tmp_path)
    (tmp_path / "kokoro.onnx.json").write_text("{}")  # a Piper voice, not Kokoro
    assert kokoro_onnx_file(tmp_path) is None


def test_voices_languages_and_the_default(tiny):
    assert [(v.id, v.language) for v in tiny.voices] == [("tiny", "en-us")]
    assert tiny.voice(None).id == tiny.voice("alloy").id == "tiny"  # an OpenAI name: the default
    assert tiny.sample_rate == 24000
    with pytest.raises(InputError, match="unknown voice 'af_nobody'; this model's voices: tiny"):
        tiny.voice("af_nobody")


def test_ids_are_kokoros_layout(tiny):
    vocab = tiny.vocab
    assert tiny.ids("ab?c").tolist() == [0, vocab["a"], vocab["b"], vocab["c"], 0]  # "?" is not in the vocab


def test_each_sentence_is_the_network_on_its_ids_with_the_packs_row(tiny):
    from blazr.loaders.kokoro import load_voice, style_for

    text = "Hello world. See you soon."
    spoken = list(tiny.stream(text, seed=7, speed=1.25))
    assert [p for p, _ in spoken] == tiny.phonemize(text) and len(spoken) == 2
    pack, rng = load_voice(TINY / "voices", "tiny"), np.random.default_rng(7)
    for phonemes, audio in spoken:
        ids = tiny.ids(phonemes)
        expected = tiny.model.synthesize(ids, style_for(pack, len(ids) - 2), 1.25, noise=True, rng=rng)
        np.testing.assert_array_equal(audio, np.clip(expected, -1, 1))


def test_a_seed_makes_speech_reproducible(tiny):
    one, again = tiny.synthesize("Hello world.", seed=3), tiny.synthesize("Hello world.", seed=3)
    np.testing.assert_array_equal(one.audio, again.audio)
    assert not np.array_equal(one.audio, tiny.synthesize("Hello world.", seed=4).audio)
    assert one.sample_rate == 24000 and one.sentences[0].end == pytest.approx(one.duration)


def test_sentences_longer_than_the_context_are_cut_not_refused(tiny):
    long = "this is a long sentence with many words in it that goes on and on past the context"
    pieces = tiny.phonemize(long)
    assert len(pieces) > 1 and all(len(tiny.ids(p)) <= tiny.model.bert.positions for p in pieces)
    assert len(tiny.synthesize(long, seed=0).audio) > 0


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"text": "  "}, InputError, "nothing to speak"),
        ({"text": "Hi.", "speed": 5.0}, ConfigError, "speed must be between"),
        ({"text": "Hi.", "voice": "nobody"}, InputError, "unknown voice 'nobody'"),
    ],
)
def test_client_mistakes_are_clear_errors(tiny, kwargs, error, match):
    with pytest.raises(error, match=match):
        tiny.synthesize(**kwargs)


def test_the_voice_directory_adds_packs(tmp_path, monkeypatch):
    """--voice-dir (voice_dir), else $BLAZR_VOICE_DIR, joins the model's own voices/."""
    flag, env = tmp_path / "flag", tmp_path / "env"
    for folder, name in ((flag, "jf_extra"), (env, "bf_env")):
        folder.mkdir()
        shutil.copy(TINY / "voices" / "tiny.safetensors", folder / f"{name}.safetensors")
    monkeypatch.delenv("BLAZR_VOICE_DIR", raising=False)
    synth = Synthesizer.load(TINY, voice_dir=flag)
    assert [(v.id, v.language) for v in synth.voices] == [("jf_extra", "ja"), ("tiny", "en-us")]
    np.testing.assert_array_equal(synth.pack("jf_extra"), synth.pack("tiny"))
    monkeypatch.setenv("BLAZR_VOICE_DIR", str(env))
    assert [v.id for v in Synthesizer.load(TINY).voices] == ["bf_env", "tiny"]
    assert [v.id for v in Synthesizer.load(TINY, voice_dir=flag).voices] == ["jf_extra", "tiny"]
    with pytest.raises(ConfigError, match="is not a directory"):
        Synthesizer.load(TINY, voice_dir=tmp_path / "missing")
