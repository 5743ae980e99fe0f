"""blazr/loaders/torch_pickle.py reads files torch.save wrote (tests/data/torch_files/, by
tests/parity/make_torch_files.py with PyTorch) as the arrays PyTorch holds: every dtype, views with strides and
offsets, scalars, parameters and nested state dicts; and Kokoro-82M's published layout (kokoro-v1_0.pth, voices/
*.pt) loads the tiny Kokoro equal to its SafeTensors. A pickle that would call anything else is refused before it
runs; a broken file is a CheckpointError naming it."""

from __future__ import annotations

import io
import pickle
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

from blazr.errors import CheckpointError
from blazr.loaders.kokoro import load_kokoro, load_voice, read_weights
from blazr.loaders.torch_pickle import read_torch_file

DATA = Path(__file__).resolve().parent / "data"
FILES = DATA / "torch_files"
TINY = DATA / "tiny_kokoro"


def flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        out |= flat(value, f"{prefix}{key}/") if isinstance(value, dict) else {prefix + key: value}
    return out


def test_every_layout_reads_as_pytorch_holds_it():
    tree = read_torch_file(FILES / "cases.pt")
    want = dict(np.load(FILES / "cases.npz"))
    got = flat(tree)
    assert sorted(got) == sorted(want)
    for name, expected in want.items():
        assert got[name].dtype == expected.dtype and got[name].shape == expected.shape, name
        np.testing.assert_array_equal(got[name], expected, err_msg=name)
        assert got[name].flags.c_contiguous and got[name].flags.writeable
    assert tree["state"]._metadata == {"": {"version": 1}}  # an OrderedDict state dict keeps its attributes


def test_kokoros_published_layout_loads_equal_to_its_safetensors(tmp_path):
    (tmp_path / "voices").mkdir()
    shutil.copy(TINY / "config.json", tmp_path / "config.json")
    shutil.copy(FILES / "tiny_kokoro.pth", tmp_path / "kokoro-v1_0.pth")
    shutil.copy(FILES / "tiny.pt", tmp_path / "voices" / "tiny.pt")
    from_pth, from_st = (
        read_weights(tmp_path / "kokoro-v1_0.pth"),
        read_weights(TINY / "kokoro-v1_0.safetensors"),
    )
    assert sorted(from_pth) == sorted(from_st)
    for name, value in from_st.items():
        np.testing.assert_array_equal(from_pth[name], value, err_msg=name)
    np.testing.assert_array_equal(
        load_voice(tmp_path / "voices", "tiny"), load_voice(TINY / "voices", "tiny")
    )
    from blazr.backends import get_backend

    ids, style = np.array([0, 3, 5, 7, 0]), load_voice(TINY / "voices", "tiny")[2]
    be = get_backend("cpu")
    ours = load_kokoro(tmp_path, be).synthesize(ids, style)
    np.testing.assert_array_equal(ours, load_kokoro(TINY, be).synthesize(ids, style))


class _Boom:
    def __reduce__(self):
        return (print, ("the pickle ran code",))


def _torch_like(tmp_path: Path, payload: object) -> Path:
    path = tmp_path / "evil.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("evil/data.pkl", pickle.dumps(payload, protocol=2))
        z.writestr("evil/byteorder", "little")
    return path


def test_a_pickle_that_calls_anything_else_is_refused(tmp_path, capsys):
    with pytest.raises(
        CheckpointError, match=r"evil.pt: the file.s pickle names (__builtin__|builtins).print"
    ):
        read_torch_file(_torch_like(tmp_path, {"x": _Boom()}))
    assert "ran code" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"not a zip", "not a PyTorch zip file"),
        (None, "holds one data.pkl, found 0"),
        (b"\x80\x02truncated", "broken PyTorch pickle"),
    ],
)
def test_broken_files_are_checkpoint_errors(tmp_path, content, match):
    path = tmp_path / "broken.pt"
    if content == b"not a zip":
        path.write_bytes(content)
    else:
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as z:
            if content is not None:
                z.writestr("broken/data.pkl", content)
        path.write_bytes(buffer.getvalue())
    with pytest.raises(CheckpointError, match=match):
        read_torch_file(path)


def test_a_storage_missing_from_the_zip_is_named(tmp_path):
    broken = tmp_path / "tiny.pt"
    with zipfile.ZipFile(FILES / "tiny.pt") as src, zipfile.ZipFile(broken, "w") as dst:
        for item in src.infolist():
            if "/data/" not in item.filename:
                dst.writestr(item, src.read(item))
    with pytest.raises(CheckpointError, match=r"tiny.pt: storage 0 is missing"):
        read_torch_file(broken)


def test_a_voice_pack_of_the_wrong_shape_is_refused(tmp_path):
    shutil.copy(FILES / "cases.pt", tmp_path / "af_x.pt")  # a dict, not one tensor
    with pytest.raises(CheckpointError, match="not a voice pack"):
        load_voice(tmp_path, "af_x")
