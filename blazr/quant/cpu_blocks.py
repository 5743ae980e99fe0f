"""numba row decoders for the GGML block types: one packed row (row_bytes,) uint8 -> (K,) float32.

`decode_row(tag, row, f16, out)` picks the format's decoder when a kernel is compiled: `tag` is
`format_tag(fmt)`, a zero-length array whose dtype names the format, so numba compiles, and caches on disk,
one specialization per format, on first use (one dispatch over every decoder took ~11 s to compile before the
first token of any model). A numba.literally format argument would do the same but re-types on every call
from Python (2.6 ms a call, measured). The tag also carries a hash of the decoder sources: numba keys its disk
cache on the caller's own file only, so an edited decoder would otherwise keep running its old compiled code.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from pathlib import Path

import numpy as np
from numba import njit, types
from numba.core.errors import TypingError
from numba.extending import overload

from blazr import numba_cache  # noqa: F401 (locks numba's on-disk cache against concurrent writers)

# Every f16 bit pattern as float32 (256 KB): a table lookup is exact and cheaper than bit twiddling.
F16_TABLE = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)


@njit(inline="always")
def _half(blk, b, o, f16):
    return f16[np.int32(blk[b, o]) | (np.int32(blk[b, o + 1]) << 8)]


# ---- 32-value blocks ------------------------------------------------------------------------------------


@njit(inline="always")  # into each wrapper below, so has_min is a constant there
def _q4(row, f16, out, has_min):
    """Q4_0 (d, qs[16]; offset 8) and Q4_1 (d, m, qs[16])."""
    nb = out.size // 32
    blk = row.reshape(nb, row.size // nb)  # (nb, 18 | 20)
    y = out.reshape(nb, 2, 16)  # (block, nibble, lane)
    qo, lanes = 4 if has_min else 2, y.shape[2]
    for b in range(nb):
        d = _half(blk, b, 0, f16)
        m = _half(blk, b, 2, f16) if has_min else np.float32(-8.0) * d
        for j in range(lanes):
            q = np.int32(blk[b, qo + j])
            y[b, 0, j] = np.float32(q & 15) * d + m
            y[b, 1, j] = np.float32(q >> 4) * d + m


@njit(cache=True, fastmath=True)
def _i4z(row, f16, out):
    """I4Z, blazr's AWQ/GPTQ int4 (d f16, z u16, qs[16]; v = (q - z) d): blazr.quant.int4."""
    nb = out.size // 32
    blk = row.reshape(nb, 20)
    y = out.reshape(nb, 2, 16)  # (block, nibble, lane)
    lanes = y.shape[2]
    for b in range(nb):
        d = _half(blk, b, 0, f16)
        z = np.int32(blk[b, 2]) | (np.int32(blk[b, 3]) << 8)
        for j in range(lanes):
            q = np.int32(blk[b, 4 + j])
            y[b, 0, j] = np.float32((q & 15) - z) * d
            y[b, 1, j] = np.float32((q >> 4) - z) * d


@njit(inline="always")
def _q5(row, f16, out, block_bytes, has_min):
    """Q5_0 (d, qh[4], qs[16]; offset 16) and Q5_1 (d, m, qh[4], qs[16]). Flat indexing measured faster here
    than the block views: the 32-bit qh shifts vectorise either way."""
    for b in range(out.size // 32):
        o, y = b * block_bytes, b * 32
        d = f16[np.int32(row[o]) | (np.int32(row[o + 1]) << 8)]
        m = f16[np.int32(row[o + 2]) | (np.int32(row[o + 3]) << 8)] if has_min else np.float32(-16.0) * d
        qo = o + 4 if has_min else o + 2
        qh = np.uint32(row[qo]) | (np.uint32(row[qo + 1]) << 8)
        qh |= (np.uint32(row[qo + 2]) << 16) | (np.uint32(row[qo + 3]) << 24)
        for j in range(16):
            q = np.int32(row[qo + 4 + j])
            hi0 = np.int32((qh >> np.uint32(j)) & np.uint32(1)) << 4
            hi1 = np.int32((qh >> np.uint32(j + 16)) & np.uint32(1)) << 4
            out[y + j] = np.float32((q & 15) | hi0) * d + m
            out[y + j + 16] = np.float32((q >> 4) | hi1) * d + m


@njit(cache=True, fastmath=True)
def _q8_0(row, f16, out):
    nb = out.size // 32
    blk = row.reshape(nb, 34)  # d f16, qs[32] int8
    y = out.reshape(nb, 32)
    for b in range(nb):
        d = _half(blk, b, 0, f16)
        for j in range(y.shape[1]):
            y[b, j] = np.float32((np.int32(blk[b, 2 + j]) ^ 128) - 128) * d


# ---- 256-value K-quant super-blocks ---------------------------------------------------------------------


@njit(cache=True, fastmath=True)
def _q2_k(row, f16, out):
    nb = out.size // 256
    blk = row.reshape(nb, 84)  # scales[16] (scale | min << 4), qs[64], d, dmin
    y = out.reshape(nb, 2, 4, 2, 16)  # (block, half, 2-bit field, 16-group, lane)
    for b in range(nb):
        d, dmin = _half(blk, b, 80, f16), _half(blk, b, 82, f16)
        for h in range(2):
            for f in range(4):
                for s in range(2):
                    sc = np.int32(blk[b, h * 8 + f * 2 + s])
                    dl, ml = d * np.float32(sc & 15), dmin * np.float32(sc >> 4)
                    qs = blk[b, 16 + h * 32 + s * 16 : 32 + h * 32 + s * 16]  # (16,)
                    for j in range(qs.size):
                        y[b, h, f, s, j] = dl * np.float32((np.int32(qs[j]) >> (2 * f)) & 3) - ml


@njit(cache=True)
def _q3_k_scale(blk, b, s):
    low = (np.int32(blk[b, 96 + s % 8]) >> (4 * (s // 8))) & 15
    high = (np.int32(blk[b, 104 + s % 4]) >> (2 * (s // 4))) & 3
    return np.float32((low | (high << 4)) - 32)


@njit(cache=True, fastmath=True)
def _q3_k(row, f16, out):
    nb = out.size // 256
    blk = row.reshape(nb, 110)  # hmask[32], qs[64] (2-bit), scales[12], d
    y = out.reshape(nb, 2, 4, 2, 16)  # value h*128 + f*32 + s*16 + j: high bit h*4 + f of hmask[s*16 + j]
    for b in range(nb):
        d = _half(blk, b, 108, f16)
        for h in range(2):
            for f in range(4):
                for s in range(2):
                    dl = d * _q3_k_scale(blk, b, h * 8 + f * 2 + s)
                    qs = blk[b, 32 + h * 32 + s * 16 : 48 + h * 32 + s * 16]  # (16,)
                    hm = blk[b, s * 16 : s * 16 + 16]  # (16,)
                    bit = h * 4 + f
                    for j in range(qs.size):
                        low = (np.int32(qs[j]) >> (2 * f)) & 3
                        high = (np.int32(hm[j]) >> bit) & 1
                        y[b, h, f, s, j] = dl * np.float32(low + 4 * high - 4)


@njit(cache=True)
def _k_scale_min(blk, b, g):
    """Q4_K/Q5_K six-bit (scale, min) of group g from the 12 bytes at 4."""
    if g < 4:
        return np.int32(blk[b, 4 + g]) & 63, np.int32(blk[b, 8 + g]) & 63
    sc = (np.int32(blk[b, 8 + g]) & 15) | ((np.int32(blk[b, g]) >> 6) << 4)
    mn = (np.int32(blk[b, 8 + g]) >> 4) | ((np.int32(blk[b, 4 + g]) >> 6) << 4)
    return sc, mn


@njit(inline="always")
def _q45_k(row, f16, out, five):
    """Q4_K (d, dmin, scales[12], qs[128]) and Q5_K (d, dmin, scales[12], qh[32], qs[128])."""
    nb = out.size // 256
    blk = row.reshape(nb, row.size // nb)  # (nb, 144 | 176)
    y = out.reshape(nb, 4, 2, 32)  # (block, 32-byte chunk c, nibble, lane): group g = 2c + nibble
    qo = 48 if five else 16
    for b in range(nb):
        d, dmin = _half(blk, b, 0, f16), _half(blk, b, 2, f16)
        for c in range(4):
            sc0, mn0 = _k_scale_min(blk, b, 2 * c)
            sc1, mn1 = _k_scale_min(blk, b, 2 * c + 1)
            d0, m0 = d * np.float32(sc0), dmin * np.float32(mn0)
            d1, m1 = d * np.float32(sc1), dmin * np.float32(mn1)
            qs = blk[b, qo + c * 32 : qo + c * 32 + 32]  # (32,)
            qh = blk[b, 16:48]  # (32,) Q5_K high bits: bit g of qh[lane]
            for j in range(qs.size):
                q = np.int32(qs[j])
                lo, hi = q & 15, q >> 4
                if five:
                    lo |= ((np.int32(qh[j]) >> (2 * c)) & 1) << 4
                    hi |= ((np.int32(qh[j]) >> (2 * c + 1)) & 1) << 4
                y[b, c, 0, j] = d0 * np.float32(lo) - m0
                y[b, c, 1, j] = d1 * np.float32(hi) - m1


@njit(cache=True, fastmath=True)
def _q6_k(row, f16, out):
    nb = out.size // 256
    blk = row.reshape(nb, 210)  # ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] int8, d
    y = out.reshape(nb, 2, 4, 2, 16)  # (block, half, 32-chunk, 16-group, lane)
    for b in range(nb):
        d = _half(blk, b, 208, f16)
        for h in range(2):
            for s in range(2):
                ql0 = blk[b, h * 64 + s * 16 : h * 64 + s * 16 + 16]  # (16,) chunks 0 and 2
                ql1 = blk[b, h * 64 + 32 + s * 16 : h * 64 + 48 + s * 16]  # (16,) chunks 1 and 3
                qh = blk[b, 128 + h * 32 + s * 16 : 144 + h * 32 + s * 16]  # (16,)
                so = 192 + h * 8 + s  # int8 scale of chunk c at so + 2c
                d0 = d * np.float32((np.int32(blk[b, so]) ^ 128) - 128)
                d1 = d * np.float32((np.int32(blk[b, so + 2]) ^ 128) - 128)
                d2 = d * np.float32((np.int32(blk[b, so + 4]) ^ 128) - 128)
                d3 = d * np.float32((np.int32(blk[b, so + 6]) ^ 128) - 128)
                for j in range(qh.size):
                    a, c, e = np.int32(ql0[j]), np.int32(ql1[j]), np.int32(qh[j])
                    y[b, h, 0, s, j] = d0 * np.float32(((a & 15) | ((e & 3) << 4)) - 32)
                    y[b, h, 1, s, j] = d1 * np.float32(((c & 15) | (((e >> 2) & 3) << 4)) - 32)
                    y[b, h, 2, s, j] = d2 * np.float32(((a >> 4) | (((e >> 4) & 3) << 4)) - 32)
                    y[b, h, 3, s, j] = d3 * np.float32(((c >> 4) | (((e >> 6) & 3) << 4)) - 32)


# ---- one decoder per format, picked at compile time --------------------------------------------------


@njit(cache=True, fastmath=True)
def _dec_q4_0(row, f16, out):
    _q4(row, f16, out, False)


@njit(cache=True, fastmath=True)
def _dec_q4_1(row, f16, out):
    _q4(row, f16, out, True)


@njit(cache=True)
def _dec_q5_0(row, f16, out):
    _q5(row, f16, out, 22, False)


@njit(cache=True)
def _dec_q5_1(row, f16, out):
    _q5(row, f16, out, 24, True)


@njit(cache=True, fastmath=True)
def _dec_q4_k(row, f16, out):
    _q45_k(row, f16, out, False)


@njit(cache=True, fastmath=True)
def _dec_q5_k(row, f16, out):
    _q45_k(row, f16, out, True)


# type name -> row decoder (row (row_bytes,) uint8, f16 table, out (K,) float32)
DECODERS: dict = {
    "Q4_0": _dec_q4_0, "Q4_1": _dec_q4_1, "Q5_0": _dec_q5_0, "Q5_1": _dec_q5_1, "Q8_0": _q8_0,
    "Q2_K": _q2_k, "Q3_K": _q3_k, "Q4_K": _dec_q4_k, "Q5_K": _dec_q5_k, "Q6_K": _q6_k,
    "I4Z": _i4z,
}  # fmt: skip


def register_decoder(fmt: str, decoder) -> None:
    """Add a format's njit row decoder (row, f16, out); kernels for it compile on first use."""
    DECODERS[fmt] = decoder


@functools.cache
@functools.cache
def format_tag(fmt: str) -> np.ndarray:
    """The kernels' format argument: a zero-length array whose dtype has one field, "<fmt>:<sources hash>"
    (one per format, made once: every packed matmul asks; a zero-length array holds nothing to change)."""
    return np.empty(0, dtype=[(f"{fmt}:{_sources_hash()}", np.uint8)])


def tag_format(tag) -> str:
    """The format name a format_tag's numba type carries (for overloads resolved at compile time)."""
    if not isinstance(tag, types.Array) or not isinstance(tag.dtype, types.Record):
        raise TypingError("a quant kernel's format argument must be blazr.quant.cpu_blocks.format_tag(fmt)")
    return next(iter(tag.dtype.fields)).partition(":")[0]


@functools.cache
def _sources_hash() -> str:
    """A short hash of every module whose numba code the kernels compile in (the decoders and direct dots).
    In a single-file archive (packaging/) the modules have no source files: their code objects are hashed."""
    digest = hashlib.sha256()
    package = Path(__file__).parent
    files = sorted(package.glob("cpu_*.py")) + [package / "int4.py"]
    if all(path.is_file() for path in files):
        for path in files:
            digest.update(path.read_bytes())
        return digest.hexdigest()[:12]
    import importlib.util
    import marshal
    import pkgutil

    names = sorted(m.name for m in pkgutil.iter_modules([str(package)]) if m.name.startswith("cpu_"))
    for name in [*names, "int4"]:
        fullname = f"{__package__}.{name}"
        digest.update(marshal.dumps(importlib.util.find_spec(fullname).loader.get_code(fullname)))
    return digest.hexdigest()[:12]


# The tag a launcher of blazr.numba_address receives in place of a format's: the same numba data model (a
# zero-length array of a one-byte record) and the sources hash, so a launcher's cached code is recompiled when
# the kernels' sources change, as a format's is; no format's code is picked for it
NEUTRAL_TAG = format_tag("any format")


def _arity(fn) -> int:
    """The positional parameters of a numba function (a jitted one's Python function, or an intrinsic's
    definition less its typing context)."""
    if hasattr(fn, "py_func"):
        return len(inspect.signature(fn.py_func).parameters)
    return len(inspect.signature(fn._defn).parameters) - 1


def dispatch_by_format(table: dict, name: str):
    """`fn(tag, *args)` that numba resolves, when it compiles a caller, to table[format of tag](*args): each
    format compiles only its own function (decode_row here, the direct and int8 dots elsewhere). The wrapper is
    inlined into the caller: as a call of its own, with every array argument passed through it, it cost 6% of a
    Q5_0 decode matmul when the lane dots dispatched once per 8 rows (one thread, Zen 1 class EPYC; they now
    dispatch once a task, blazr.quant.cpu_lane_matmul). numba inlines only a wrapper with named parameters (not
    *args), so the wrapper is written out for the table's arity."""
    arities = {_arity(fn) for fn in table.values()}
    if len(arities) != 1:
        raise TypeError(
            f"{name}: every format's function must take the same arguments, got arities {arities}"
        )
    params = ", ".join(f"a{i}" for i in range(arities.pop()))
    namespace: dict = {"message": f"{name} runs only inside numba-compiled kernels", "table": table}
    namespace["tag_format"] = tag_format
    exec(  # noqa: S102 (fixed source: the function, its typer and the wrapper, for a parameter count)
        f"def dispatch(tag, {params}):\n    raise NotImplementedError(message)\n"
        f"def typer(tag, {params}):\n    fn = table[tag_format(tag)]\n"
        f"    def impl(tag, {params}):\n        return fn({params})\n    return impl\n",
        namespace,
    )
    dispatch = namespace["dispatch"]
    overload(dispatch, inline="always")(namespace["typer"])
    dispatch.__name__ = dispatch.__qualname__ = name
    return dispatch


# decode_row(tag, row (row_bytes,) uint8, f16 table, out (K,) float32): the row decoded by its format
decode_row = dispatch_by_format(DECODERS, "decode_row")
