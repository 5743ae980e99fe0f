"""Model listings are cached until a checkpoint file changes (the server lists on every /v1/models)."""

import os

from blazr.model_dir import describe_model
from tests.server.conftest import write_tiny_gguf


def test_describe_model_is_cached_until_the_file_changes(tmp_path):
    path = write_tiny_gguf(tmp_path / "tiny.gguf")
    first = describe_model(path, tmp_path)
    assert describe_model(path, tmp_path) is first  # no second header parse
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    again = describe_model(path, tmp_path)
    assert again is not first and again == first  # re-read after the change, same content
