"""Settings: built-in defaults < config file < BLAZR_* environment < flags, and errors that name their source."""

from __future__ import annotations

from pathlib import Path

import pytest

from blazr.config import (
    GenerationSettings,
    Settings,
    apply_flags,
    env_name,
    known_keys,
    load_settings,
    normalize_device,
    normalize_dtype,
    resolve_model_dir,
)
from blazr.errors import ConfigError


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_missing_or_empty_file_gives_defaults(tmp_path):
    for settings in (
        load_settings(tmp_path / "absent.yaml", env={}),
        load_settings(write(tmp_path / "e.yaml", ""), env={}),
    ):
        assert settings.device == "cpu"
        assert settings.default_model is None
        assert settings.generation == GenerationSettings()
        assert settings.source_of("device") == "default"


def test_file_values_and_sections(tmp_path):
    path = write(
        tmp_path / "config.yaml",
        "default_model: my-model\ndevice: CUDA:1\nnum_ctx: 4096\nmodel_dir: ~/models\n"
        'inference:\n  dtype: BF16\ngeneration:\n  top_k: 40\n  stop: ["\\n\\n", END]\n'
        "server:\n  port: 9000\n",
    )
    s = load_settings(path, env={})
    assert (s.default_model, s.device, s.num_ctx, s.model_dir) == ("my-model", "cuda:1", 4096, "~/models")
    assert s.inference.dtype == "bf16"
    assert s.generation.top_k == 40 and s.generation.stop == ["\n\n", "END"]
    assert s.server.port == 9000
    assert s.source_of("inference.dtype") == f"{path}: key 'inference.dtype'"


def test_top_level_shorthand_wins_over_its_section_key(tmp_path):
    path = write(tmp_path / "c.yaml", "temperature: 0.2\nmax_tokens: 50\ngeneration:\n  temperature: 0.9\n")
    s = load_settings(path, env={})
    assert s.generation.temperature == 0.2
    assert s.generation.max_tokens == 50


def test_environment_wins_over_file(tmp_path):
    path = write(
        tmp_path / "c.yaml", "device: cpu\nnum_ctx: 1024\nmodel_dir: /from/file\ninference:\n  dtype: f32\n"
    )
    env = {
        "BLAZR_DEVICE": "wgpu:0",
        "BLAZR_NUM_CTX": "8192",
        "BLAZR_MODEL_DIR": "/from/env",
        "BLAZR_INFERENCE_DTYPE": "float16",
        "BLAZR_TEMPERATURE": "0",
        "BLAZR_GENERATION_STOP": '["</s>", "###"]',
        "BLAZR_SERVER_CORS_ENABLED": "false",
        "BLAZR_API_KEY": "secret",
    }
    s = load_settings(path, env=env)
    assert (s.device, s.num_ctx, s.model_dir, s.inference.dtype) == ("wgpu:0", 8192, "/from/env", "f16")
    assert s.generation.temperature == 0.0
    assert s.generation.stop == ["</s>", "###"]
    assert s.server.cors_enabled is False
    assert s.server.api_key == "secret"
    assert s.source_of("num_ctx") == "BLAZR_NUM_CTX"


def test_flags_win_over_environment(tmp_path):
    s = load_settings(tmp_path / "absent.yaml", env={"BLAZR_DEVICE": "cuda", "BLAZR_INFERENCE_DTYPE": "f16"})
    apply_flags(
        s,
        {
            "device": ("cpu", "--device"),
            "inference.dtype": ("F32", "--dtype"),
            "num_ctx": (None, "--num-ctx"),
        },
    )
    assert s.device == "cpu" and s.inference.dtype == "f32"
    assert s.num_ctx is None  # a flag left out does not override
    assert s.source_of("device") == "--device"


def test_model_dir_precedence(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    path = write(tmp_path / "c.yaml", "model_dir: /from/file\n")
    assert (
        resolve_model_dir(load_settings(tmp_path / "absent.yaml", env={})) == tmp_path / ".blazr" / "models"
    )
    assert resolve_model_dir(load_settings(path, env={})) == Path("/from/file")
    from_env = load_settings(path, env={"BLAZR_MODEL_DIR": "/from/env"})
    assert resolve_model_dir(from_env) == Path("/from/env")
    assert resolve_model_dir(from_env, flag="/from/flag") == Path("/from/flag")


def test_parse_error_names_file_and_line(tmp_path):
    path = write(tmp_path / "c.yaml", "device: cpu\ngeneration:\n  top_k: 4\n   bad: : x\n")
    with pytest.raises(ConfigError) as e:
        load_settings(path, env={})
    assert str(path) in str(e.value) and "line 4" in str(e.value)
    assert e.value.exit_code == 2


def test_unknown_key_and_bad_value_name_the_file_and_key(tmp_path):
    with pytest.raises(ConfigError, match=r"c\.yaml: key 'generation\.top_q'.*unknown setting"):
        load_settings(write(tmp_path / "c.yaml", "generation:\n  top_q: 1\n"), env={})
    with pytest.raises(ConfigError, match=r"c\.yaml: key 'num_ctx'.*expected an integer"):
        load_settings(write(tmp_path / "c.yaml", "num_ctx: lots\n"), env={})
    with pytest.raises(ConfigError, match=r"must be a mapping"):
        load_settings(write(tmp_path / "c.yaml", "- a\n- b\n"), env={})
    with pytest.raises(ConfigError, match=r"section 'server' must be a mapping"):
        load_settings(write(tmp_path / "c.yaml", "server: 8080\n"), env={})


def test_bad_environment_value_names_the_variable(tmp_path):
    with pytest.raises(ConfigError, match="BLAZR_NUM_CTX: must be at least 1"):
        load_settings(tmp_path / "absent.yaml", env={"BLAZR_NUM_CTX": "0"})
    with pytest.raises(ConfigError, match="BLAZR_GENERATION_TOP_P: must be between 0 and 1"):
        load_settings(tmp_path / "absent.yaml", env={"BLAZR_GENERATION_TOP_P": "1.5"})


@pytest.mark.parametrize(
    "given, expected",
    [("f32", "f32"), ("F32", "f32"), ("Float32", "f32"), ("f16", "f16"), ("FLOAT16", "f16"), ("bf16", "bf16"),
     ("BFloat16", "bf16"), (None, None)],
)  # fmt: skip
def test_dtype_names_are_case_insensitive(given, expected):
    assert normalize_dtype(given) == expected


@pytest.mark.parametrize("bad", ["f8", "int4", "", "fp32x"])
def test_bad_dtype_is_rejected(bad):
    with pytest.raises(ValueError, match="not a dtype"):
        normalize_dtype(bad)


def test_device_forms():
    assert [normalize_device(d) for d in ("cpu", "CUDA", "cuda:1", "wgpu", "wgpu:0")] == [
        "cpu",
        "cuda",
        "cuda:1",
        "wgpu",
        "wgpu:0",
    ]
    for bad in ("gpu", "cuda:", "cuda:x", "metal"):
        with pytest.raises(ValueError, match="not a device"):
            normalize_device(bad)


def test_flag_error_names_the_flag():
    with pytest.raises(ConfigError, match="--temperature: must be between 0 and 2, got 3.0"):
        apply_flags(Settings(), {"generation.temperature": (3.0, "--temperature")})


def test_every_key_has_an_environment_variable():
    names = {env_name(k) for k in known_keys()}
    assert {
        "BLAZR_DEVICE",
        "BLAZR_NUM_CTX",
        "BLAZR_MODEL_DIR",
        "BLAZR_DEFAULT_MODEL",
        "BLAZR_TEMPERATURE",
    } <= names
    assert "BLAZR_INFERENCE_DTYPE" in names and "BLAZR_SERVER_PORT" in names
