"""WGSL shader files: find them (checkout or installed wheel), set their dtypes, read their Params layout.

A shader is plain WGSL: `shaders/<op>.wgsl`. Its dtypes come from `alias X = f32;` lines that the loader
rewrites (adding `enable f16;` when one becomes f16); everything numeric is an `override` constant set
through the pipeline. Shared function libraries (`shaders/_<name>.wgsl`) are prepended for the ops that
list them in LIBRARIES (and for every packed-weight kernel), so no shader needs a preprocessor.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from blazr.errors import UnsupportedError

LIBRARIES: dict[str, tuple[str, ...]] = {
    "act": ("activations",),
    "glu": ("activations",),
    "causal_conv1d": ("activations",),
    **{
        op: ("reduce",)
        for op in ("rms_norm", "add_rms_norm", "layer_norm", "softmax", "attention", "topk", "sample")
    },
}
# every shaders/matmul_<format>.wgsl but matmul_experts multiplies packed blocks with this library
PACKED_MATMUL_LIBRARIES = ("activations", "qmatmul")
WGSL_TYPES = {"f32": "f32", "f16": "f16"}
_ALIAS = re.compile(r"^alias (\w+) = f32;", re.M)
_CONST = re.compile(r"^const (\w+): u32 = (\d+)u;", re.M)
_PARAMS = re.compile(r"struct Params \{(.*?)\}", re.S)
_FIELD = re.compile(r"(\w+)\s*:\s*(u32|i32|f32)")
_BINDING = re.compile(r"@binding\((\d+)\)\s*var(?:<[^>]*>)?\s+(\w+)\s*:")
_PACK = {"u32": "I", "i32": "i", "f32": "f"}


def shader_dir() -> Path:
    """shaders/ is installed as blazr/shaders in a wheel and sits at the repository root in a checkout."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "shaders", here.parent / "shaders"):
        if (candidate / "matmul.wgsl").is_file():
            return candidate
    raise UnsupportedError(
        f"the WGSL shaders are missing (looked in {here / 'shaders'} and {here.parent / 'shaders'}); "
        "reinstall blazr"
    )


@cache
def _read(name: str) -> str:
    return (shader_dir() / f"{name}.wgsl").read_text(encoding="utf-8")


@dataclass(frozen=True)
class Shader:
    """One op's WGSL with its dtypes set, plus the layout the host needs to feed it."""

    source: str
    params: tuple[tuple[str, str], ...]  # Params fields in order: (name, "u32" | "i32" | "f32")
    bindings: dict[str, int]  # binding variable name -> binding index

    @property
    def params_size(self) -> int:
        return 4 * len(self.params)

    def pack(self, values: dict[str, float | int]) -> bytes:
        """The Params struct as bytes; every field must be given (a missing one is a host bug)."""
        missing = [name for name, _ in self.params if name not in values]
        if missing:
            raise KeyError(f"Params fields without a value: {missing}")
        fmt = "<" + "".join(_PACK[kind] for _, kind in self.params)
        return struct.pack(fmt, *(_scalar(values[name], kind) for name, kind in self.params))


def _scalar(value, kind: str):
    return float(value) if kind == "f32" else int(value)


def _libraries(op: str) -> tuple[str, ...]:
    if op.startswith("matmul_") and op != "matmul_experts":
        return PACKED_MATMUL_LIBRARIES
    return LIBRARIES.get(op, ())


@cache
def load_shader(op: str, aliases: tuple[tuple[str, str], ...] = ()) -> Shader:
    """shaders/<op>.wgsl with each `alias X = f32;` set from aliases (("T", "f16"), ...), and each
    `const N: u32 = 256u;` whose name aliases lists set to the number given (("MAX_DH", "576"): sizes a
    function-scope array, which WGSL's override constants cannot)."""
    wanted = dict(aliases)
    body = "\n".join([_read("_" + lib) for lib in _libraries(op)] + [_read(op)])

    def rewrite(match: re.Match) -> str:
        return f"alias {match.group(1)} = {WGSL_TYPES[wanted.get(match.group(1), 'f32')]};"

    def resize(match: re.Match) -> str:
        value = wanted.get(match.group(1))
        return match.group(0) if value is None else f"const {match.group(1)}: u32 = {int(value)}u;"

    source = _CONST.sub(resize, _ALIAS.sub(rewrite, body))
    if "f16" in wanted.values():
        source = "enable f16;\n" + source
    params = _PARAMS.search(source)
    fields = tuple(_FIELD.findall(params.group(1))) if params else ()
    bindings = {name: int(index) for index, name in _BINDING.findall(source)}
    return Shader(source, fields, bindings)
