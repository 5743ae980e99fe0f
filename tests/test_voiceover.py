"""The parts of `blazr speak` that need no model: the word comparison (normaliser, alignment, differing words),
script and manifest parsing, and the take selection of --reroll (with a stand-in voice and listener)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from blazr.errors import ConfigError
from blazr.tasks.voiceover import (
    MISMATCH,
    OK,
    OK_UNSURE,
    Take,
    best_take,
    make_voiceover,
    speak_part,
    status_of,
)
from blazr.tasks.voiceover_script import Defaults, Part, parse_text, read_script
from blazr.tasks.word_check import compare, normalize

# ---- word comparison -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "heard"),
    [
        ("Welcome to the voiceover test.", "Welcome to the Voice Over Test."),
        ("The answer is forty-two.", "The answer is 42."),
        ("one hundred and five people", "105 people"),
        ("It is 7:15 now", "It is seven fifteen now"),
        ("Meet at 2:00.", "Meet at two o'clock."),
        ("We sold 50% at $8.", "We sold fifty percent at eight dollars"),
        ("It's OK & fine", "its okay and fine"),
        ("Pi is 3.14", "Pi is three point one four"),
        ("the 21st century", "the twenty-first century"),
        ("Dr. Smith met Mr. Jones", "Doctor Smith met Mister Jones"),
        ("a hundred days", "100 days"),
    ],
)
def test_spellings_the_ear_cannot_hear_compare_equal(written, heard):
    check = compare(written, heard)
    assert check.exact and check.differences == [] and check.wer == 0.0, check


def test_differing_words_are_listed_in_order():
    check = compare("The quick brown fox jumps.", "The quick brawn fox jumped over.")
    assert [(d.expected, d.heard) for d in check.differences] == [
        ("brown", "brawn"),
        ("jumps", "jumped over"),
    ]
    assert check.errors == 3 and check.wer == pytest.approx(3 / 5)
    assert str(check.differences[0]) == "'brown' heard as 'brawn'"


def test_missing_and_extra_words():
    missing = compare("one two three", "one three")
    assert [str(d) for d in missing.differences] == ["missing 'two'"] and missing.errors == 1
    extra = compare("one three", "one two three")
    assert [str(d) for d in extra.differences] == ["extra 'two'"] and extra.errors == 1
    silent = compare("hello there", "")
    assert silent.wer == 1.0 and [d.heard for d in silent.differences] == [""]


def test_normalize_words():
    assert normalize("Hello, World! It's 1,500.") == "hello world its one thousand five hundred".split()
    assert normalize("e-mail/web_site") == ["e", "mail", "web", "site"]


# ---- scripts ---------------------------------------------------------------------------------------------


def test_text_script_skips_blank_and_comment_lines():
    parts = parse_text("# title\nFirst line.\n\n  Second line.  \n", Defaults(speed=1.5, pause=0.5, seed=3))
    assert [(p.text, p.line, p.speed, p.pause_after, p.seed) for p in parts] == [
        ("First line.", 2, 1.5, 0.5, 3),
        ("Second line.", 4, 1.5, 0.5, 3),
    ]


def test_manifest_yaml_defaults_and_overrides(tmp_path):
    path = tmp_path / "talk.yaml"
    path.write_text(
        "speed: 1.2\npause: 0.5\nparts:\n"
        "  - Plain string part.\n"
        "  - text: Slower part.\n    speed: 0.8\n    pause_after: 1.0\n    seed: 9\n    voice: joe\n"
    )
    parts = read_script(path, Defaults(voice=None, speed=1.0, pause=0.3, seed=4))
    assert parts == [
        Part("Plain string part.", None, 1.2, 0.5, 4),
        Part("Slower part.", "joe", 0.8, 1.0, 9),
    ]


def test_manifest_json_and_bare_list(tmp_path):
    path = tmp_path / "talk.json"
    path.write_text('[{"text": "One."}, "Two."]')
    assert [p.text for p in read_script(path, Defaults())] == ["One.", "Two."]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("bad.yaml", "parts:\n  - text: Hi\n    sped: 2\n", "part 1: unknown key 'sped'"),
        ("bad.yaml", "parts:\n  - text: Hi\n    speed: 9\n", r"part 1: speed 9 is out of range \[0.25, 4\]"),
        ("bad.yaml", "pause: -1\nparts: [Hi]\n", "the manifest: pause -1 is out of range"),
        ("bad.yaml", "parts: [Hi, {text: ''}]\n", "part 2 needs a non-empty 'text'"),
        ("bad.yaml", "parts: [Hi, {text: Yo, seed: -3}]\n", "part 2: seed must be a whole number"),
        ("bad.yaml", "voice: joe\n", "no 'parts' list"),
        ("bad.yaml", "parts: [unclosed\n", "not valid YAML"),
        ("bad.yaml", "just a string\n", "a manifest is a mapping"),
        ("bad.json", '{"parts": [', "not valid JSON"),
        ("empty.txt", "# only a comment\n\n", "no parts to speak"),
    ],
)
def test_bad_scripts_name_the_file(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ConfigError, match=message) as e:
        read_script(path, Defaults())
    assert str(e.value).startswith(f"{path}: ")


def test_missing_script(tmp_path):
    with pytest.raises(ConfigError, match="no such script file"):
        read_script(tmp_path / "nope.txt", Defaults())


# ---- takes and rerolls -----------------------------------------------------------------------------------


class FakeVoice:
    """Speaks a take whose length is 100 + seed samples, so a test can tell takes apart."""

    sample_rate = 1000

    def __init__(self):
        self.seeds: list[int] = []

    def voice(self, name):
        return type("V", (), {"id": "fake", "language": "en_US"})()

    def synthesize(self, text, voice, speed, seed):
        self.seeds.append(seed)
        return type("S", (), {"audio": np.full(100 + seed, 0.5, np.float32), "sample_rate": 1000})()


class FakeListener:
    """Hears each take as scripted by its seed."""

    def __init__(self, by_seed: dict[int, str]):
        self.by_seed = by_seed

    def hear(self, audio, rate, language=None):
        return self.by_seed[len(audio) - 100]


def take(errors: int | None, seed: int) -> Take:
    """A take whose first `errors` words of "a b c d" were misheard (None: not checked)."""
    words = "a b c d".split()
    check = None if errors is None else compare(" ".join(words), " ".join(["x"] * errors + words[errors:]))
    return Take(seed, np.zeros(1, np.float32), None, check)


def test_best_take_fewest_errors_earliest_on_tie():
    takes = [take(2, 0), take(1, 1), take(3, 2), take(1, 3)]
    assert [t.check.errors for t in takes] == [2, 1, 3, 1]
    assert best_take(takes).seed == 1
    assert best_take([take(None, 5), take(None, 6)]).seed == 5
    with pytest.raises(ValueError):
        best_take([])


def test_status_marks():
    assert status_of(compare("a b c d", "a b c d"), 0.0) == OK
    assert status_of(compare("a b c d", "a b x d"), 0.25) == OK_UNSURE
    assert status_of(compare("a b c d", "a b x d"), 0.0) == MISMATCH
    assert status_of(None, 0.0) == "unchecked"


def test_reroll_stops_at_first_passing_take():
    voice = FakeVoice()
    listener = FakeListener({5: "one two", 6: "one too three", 7: "one two three", 8: "one two three"})
    spoken = speak_part(voice, Part("One two three.", None, 1.0, 0.3, 5), 1, listener, reroll=5)
    assert voice.seeds == [5, 6, 7]  # seed + k, stopping at the take heard as written
    assert (spoken.take.seed, spoken.takes, spoken.status) == (7, 3, OK)


def test_reroll_keeps_the_best_when_none_passes():
    voice = FakeVoice()
    listener = FakeListener({0: "nothing like it", 1: "one two", 2: "uno dos tres"})
    spoken = speak_part(voice, Part("One two three.", None, 1.0, 0.3, 0), 1, listener, reroll=2)
    assert voice.seeds == [0, 1, 2]
    assert (spoken.take.seed, spoken.takes, spoken.status) == (1, 3, MISMATCH)
    assert [str(d) for d in spoken.take.check.differences] == ["missing 'three'"]


def test_voiceover_timeline_and_pauses():
    parts = [
        Part("One.", None, 1.0, 0.5, 0),
        Part("Two.", None, 1.0, 0.25, 10),
        Part("Three.", None, 1.0, 2.0, 3),
    ]
    result = make_voiceover(FakeVoice(), parts)
    # takes of 100, 110, 103 samples at 1 kHz; 500 and 250 samples of pause; none after the last part
    assert [(p.start, p.end) for p in result.parts] == [(0.0, 0.1), (0.6, 0.71), (0.96, 1.063)]
    assert len(result.audio) == 1063 and result.ok is None
    assert not result.audio[100:600].any() and result.audio[600:710].all()
    timing = result.timing("x.wav", model="fake")
    assert (
        timing["duration"] == 1.063 and timing["parts"][1]["seed"] == 10 and timing["parts"][2]["ok"] is None
    )


def test_sidecar_path_never_overwrites_the_script(tmp_path):
    from blazr.commands.speak import output_paths

    script = tmp_path / "talk.json"
    script.write_text("[]")
    with pytest.raises(ConfigError, match="timing sidecar talk.json would overwrite the script"):
        output_paths(script, None)
    assert output_paths(script, tmp_path / "vo.wav") == (tmp_path / "vo.wav", tmp_path / "vo.json")
    with pytest.raises(ConfigError, match="--output .*does not exist"):
        output_paths(script, Path(tmp_path / "no" / "vo.wav"))
