"""Ollama Modelfiles (blazr/modelfile.py): parsing, refusals naming the line, the normalised text, and
`blazr create` writing a derived model into the model directory."""

from __future__ import annotations

import pytest

from blazr import modelfile
from blazr.errors import ConfigError
from tests.test_cli import assert_user_error, models, run_cli  # noqa: F401 (models: a fixture)

TEXT = """# a comment
FROM tiny
PARAMETER temperature 0.2
PARAMETER num_ctx 256
PARAMETER stop "<|end|>"
PARAMETER stop "###"
SYSTEM \"\"\"You are a pirate.
Answer in one line.\"\"\"
"""


def test_parse_and_render_round_trip():
    spec = modelfile.parse(TEXT)
    assert spec.base == "tiny" and spec.system == "You are a pirate.\nAnswer in one line."
    assert spec.parameters == {"temperature": 0.2, "num_ctx": 256, "stop": ["<|end|>", "###"]}
    assert spec.num_ctx == 256
    assert spec.request_defaults() == {"temperature": 0.2, "stop": ["<|end|>", "###"]}
    assert modelfile.parse(spec.render()) == spec


@pytest.mark.parametrize(
    "text, phrase",
    [
        ("FROM tiny\nTEMPLATE {{ .Prompt }", "line 2: TEMPLATE: template line 1: unexpected '}' in action"),
        ('FROM tiny\nTEMPLATE """{{ if .System }}\nno end"""', "line 2: TEMPLATE: .*has no {{end}}"),
        ("FROM tiny\nTEMPLATE {{ upper .Prompt }}", 'function "upper" not defined'),
        ("FROM tiny\nMESSAGE robot hello", "line 2: MESSAGE role 'robot'"),
        ("FROM tiny\nADAPTER a\nADAPTER b", "line 3: a second ADAPTER"),
        ("FROM tiny\nPARAMETER num_gpu 3", "'num_gpu'"),
        ("FROM tiny\nPARAMETER top_k high", "top_k must be an integer"),
        ("FROM tiny\nFLY away", "unknown instruction 'FLY'"),
        ("SYSTEM hi", "FROM is missing"),
        ('FROM tiny\nSYSTEM """never closed', "never closed"),
    ],
)
def test_what_is_not_taken_is_refused_by_line(text, phrase):
    with pytest.raises(ConfigError, match=phrase):
        modelfile.parse(text)


def test_template_and_messages_round_trip():
    """TEMPLATE and MESSAGE lines are kept as written (triple-quoted text with its newlines) and rendered
    back so that reading the stored file gives the same model."""
    text = (
        'FROM tiny\nTEMPLATE """{{ if .System }}<|system|>{{ .System }}\n{{ end }}<|user|>{{ .Prompt }}\n'
        '<|assistant|>{{ .Response }}"""\nMESSAGE user Is the sea salty?\nMESSAGE assistant """Aye,\n'
        'salty."""\n'
    )
    spec = modelfile.parse(text)
    assert (
        spec.template
        == "{{ if .System }}<|system|>{{ .System }}\n{{ end }}<|user|>{{ .Prompt }}\n<|assistant|>{{ .Response }}"
    )
    assert spec.messages == [
        {"role": "user", "content": "Is the sea salty?"},
        {"role": "assistant", "content": "Aye,\nsalty."},
    ]
    assert modelfile.parse(spec.render()) == spec


def test_messages_and_system_open_every_conversation():
    """Ollama's order: the SYSTEM (unless the request has a system message), the MESSAGEs, the request's."""

    class Derived:
        modelfile = modelfile.parse("FROM tiny\nSYSTEM Be a pirate.\nMESSAGE user Hi\nMESSAGE assistant Ahoy")

    asked = [{"role": "user", "content": "Where?"}]
    assert [m["content"] for m in modelfile.with_system(Derived, asked)] == [
        "Be a pirate.",
        "Hi",
        "Ahoy",
        "Where?",
    ]
    own = [{"role": "system", "content": "Be brief."}, *asked]
    assert [m["content"] for m in modelfile.with_system(Derived, own)] == [
        "Hi",
        "Ahoy",
        "Be brief.",
        "Where?",
    ]


def test_adapter_line_round_trips_as_a_request_default():
    spec = modelfile.parse("FROM tiny\nADAPTER ./lora\nPARAMETER temperature 0")
    assert spec.adapter == "./lora" and modelfile.parse(spec.render()) == spec
    assert spec.request_defaults() == {"temperature": 0.0, "lora_adapter": modelfile.ADAPTER_NAME}


def test_blazr_create_resolves_the_adapter_next_to_the_modelfile(models, tmp_path):  # noqa: F811
    import shutil

    from tests.tiny_lora import GOLDEN

    (models / "tiny.gguf").write_bytes(b"GGUF stand-in")
    shutil.copytree(GOLDEN / "llama_all", tmp_path / "my-lora")
    file = tmp_path / "Modelfile"
    file.write_text("FROM tiny\nADAPTER ./my-lora\n")
    result = run_cli("create", "tuned", "-f", str(file))
    assert result.exit_code == 0, result.stderr
    assert modelfile.read(models / "tuned.modelfile").adapter == str((tmp_path / "my-lora").resolve())
    file.write_text("FROM tiny\nADAPTER ./missing\n")
    assert_user_error(run_cli("create", "ghost", "-f", str(file)), 2, "ADAPTER './missing'", "does not exist")


def test_blazr_create_writes_a_derived_model(models, tmp_path):  # noqa: F811
    (models / "tiny.gguf").write_bytes(b"GGUF stand-in")
    file = tmp_path / "Modelfile"
    file.write_text(TEXT)
    result = run_cli("create", "pirate", "-f", str(file))
    assert result.exit_code == 0, result.stderr
    assert modelfile.read(models / "pirate.modelfile") == modelfile.parse(TEXT)
    file.write_text("FROM nowhere\n")
    assert_user_error(run_cli("create", "ghost", "-f", str(file)), 1, "nowhere")
    listed = run_cli("list").stdout
    assert "pirate" in listed and "from tiny" in listed
    assert_user_error(run_cli("generate", "-m", "pirate", "-p", "hi"), 2, "derived model")
