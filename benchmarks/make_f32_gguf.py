"""Write an F32 copy of a GGUF file: same metadata, same tensor names and layout, every tensor dequantized.

Used by the CPU benchmark so blazr and llama.cpp run the same weights in F32. Usage:
    python benchmarks/make_f32_gguf.py IN.gguf OUT.gguf
"""

from __future__ import annotations

import sys
from pathlib import Path

import gguf
import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter
from gguf.quants import dequantize

SKIP_KEYS = {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count", "general.file_type"}


def field_value(field):
    """The python value of a reader field (strings decoded, arrays as lists)."""
    kind = field.types[0]
    parts = [field.parts[i] for i in field.data]
    if kind == GGUFValueType.STRING:
        return bytes(parts[0]).decode("utf-8")
    if kind == GGUFValueType.ARRAY:
        sub = field.types[-1]
        if sub == GGUFValueType.STRING:
            return [bytes(p).decode("utf-8", errors="surrogateescape") for p in parts]
        return [p.tolist()[0] for p in parts]
    return parts[0].tolist()[0]


def copy_metadata(reader: GGUFReader, writer: GGUFWriter) -> None:
    for name, field in reader.fields.items():
        if name in SKIP_KEYS or name == "general.architecture":
            continue
        kind = field.types[0]
        value = field_value(field)
        if kind == GGUFValueType.ARRAY:
            writer.add_array(name, value)
        else:
            writer.add_key_value(name, value, kind)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)


def main(src: str, dst: str) -> None:
    reader = GGUFReader(src)
    arch = field_value(reader.fields["general.architecture"])
    writer = GGUFWriter(dst, arch)
    copy_metadata(reader, writer)
    for t in reader.tensors:
        shape = tuple(int(d) for d in reversed(t.shape))  # numpy order
        data = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)
        writer.add_tensor(t.name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"wrote {dst} ({Path(dst).stat().st_size / 1e6:.0f} MB)")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
