"""Quantized weights on the wgpu backend: GGML blocks kept packed in device memory, multiplied and embedded by
the shaders/matmul_<format>.wgsl kernels, which dequantize in registers (a mixin of wgpu.Backend).

A host QuantWeight goes to the device once, on first use, as raw bytes (u32 words, one spare word past the
end for unaligned reads); a weight larger than one binding is split into row blocks, each within the limit.
The IQ grid formats also read a codebook (blazr/quant/iq_grids.py), uploaded once per device and bound as
`codebook`; a storage binding keeps the 2-16 KiB tables out of the shader source.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from blazr.backends.wgpu_array import GpuBuffer, WgpuArray
from blazr.errors import UnsupportedError
from blazr.quant import QuantRowStack, QuantWeight, iq_grids
from blazr.quant.experts import QuantExperts

# format -> (values per block, decode units per block), as BLOCK_ELEMS and UNITS in its shader
# shaders/matmul_<format>.wgsl; a kernel's embed entry runs one invocation per unit
_UNITS = {
    "Q4_0": (32, 4),
    "Q4_1": (32, 4),
    "I4Z": (32, 4),  # blazr's AWQ/GPTQ int4 (blazr.quant.int4)
    "Q5_0": (32, 4),
    "Q5_1": (32, 4),
    "Q8_0": (32, 8),
    "Q8_1": (32, 8),
    "Q1_0": (128, 4),
    "MXFP4": (32, 4),
    "NVFP4": (64, 8),
    "Q2_K": (256, 16),
    "Q3_K": (256, 16),
    "Q4_K": (256, 32),
    "Q5_K": (256, 32),
    "Q6_K": (256, 16),
    "Q8_K": (256, 16),
    "TQ1_0": (256, 16),
    "TQ2_0": (256, 16),
    "IQ4_NL": (32, 4),
    "IQ4_XS": (256, 32),
    "IQ1_S": (256, 32),
    "IQ1_M": (256, 32),
    "IQ2_XXS": (256, 32),
    "IQ2_XS": (256, 32),
    "IQ2_S": (256, 32),
    "IQ3_XXS": (256, 32),
    "IQ3_S": (256, 32),
}
PACKED_FORMATS = tuple(_UNITS)
# the codebook an IQ kernel reads through its `codebook` binding: rows of int8 values, one after another
_CODEBOOKS = {
    "IQ1_S": iq_grids.IQ1_GRID,
    "IQ1_M": iq_grids.IQ1_GRID,
    "IQ2_XXS": iq_grids.IQ2_XXS_GRID,
    "IQ2_XS": iq_grids.IQ2_XS_GRID,
    "IQ2_S": iq_grids.IQ2_S_GRID,
    "IQ3_XXS": iq_grids.IQ3_XXS_GRID,
    "IQ3_S": iq_grids.IQ3_S_GRID,
}


@dataclass
class PackedRows:
    """Rows start..start+rows-1 of a packed weight in one device buffer (u32 words)."""

    start: int
    rows: int
    words: WgpuArray


@dataclass
class DevicePacked:
    format: str
    shape: tuple[int, int]  # (N, K)
    row_bytes: int
    parts: list[PackedRows]
    perms: tuple[WgpuArray, WgpuArray] | None = None  # GPTQ act-order: (perm, its inverse) as i32 (K,)

    @property
    def nbytes(self) -> int:
        return sum(p.words.buf.nbytes for p in self.parts)


@dataclass
class ExpertBuffers:
    """One part (projection) of a QuantExperts on the device: `rows` rows per expert, and buffers each
    holding whole experts: (first expert, end expert, u32 words)."""

    format: str
    rows: int
    row_bytes: int
    buffers: list[tuple[int, int, WgpuArray]]


class PackedOps:
    """matmul / embed for QuantWeight and QuantRowStack weights; needs self.rt, self._run, self._rows."""

    def _device_packed(self, w: QuantWeight) -> DevicePacked:
        cache = self.__dict__.setdefault("_packed_cache", {})
        found = cache.get(id(w))
        if found is None:
            if w.format not in PACKED_FORMATS:
                raise UnsupportedError(f"device {self.name} does not support matmul on {w.format} weights")
            found = cache[id(w)] = self._upload_packed(w)
            weakref.finalize(w, cache.pop, id(w), None)  # the device copy lives as long as the host weight
        return found

    def _upload_packed(self, w: QuantWeight) -> DevicePacked:
        n, row_bytes = w.blocks.shape
        per_part = max(1, (self.rt.max_binding - 4) // row_bytes)
        parts = []
        for start in range(0, n, per_part):
            rows = min(per_part, n - start)
            parts.append(PackedRows(start, rows, self._upload_words(w.blocks[start : start + rows])))
        perms = None
        if w.perm is not None:  # GPTQ act-order: x is gathered into the packed order before each matmul
            perms = (self.upload(w.perm), self.upload(np.argsort(w.perm).astype(np.int32)))
        return DevicePacked(w.format, w.shape, row_bytes, parts, perms)

    def _gather_cols(self, x: WgpuArray, perm: WgpuArray) -> WgpuArray:
        """x (T, K) with columns perm (K,): into a weight's packed column order, or back with the inverse."""
        (t, k), out = x.shape, self.empty(x.shape, x.dtype)  # (T, K)
        if out.size:
            params = {"k": k, "x_stride": x.row_stride}
            self._run("gather_cols", {"x": x, "perm": perm, "out": out}, params, (-(-k // self.WG), t, 1))
        return out

    def _upload_words(self, blocks: np.ndarray) -> WgpuArray:
        """Raw block bytes as u32 words in a buffer of their exact size (plus the spare word)."""
        data = np.ascontiguousarray(blocks).reshape(-1)
        nbytes = -(-data.nbytes // 4) * 4 + 4
        padded = np.zeros(nbytes, dtype=np.uint8)
        padded[: data.nbytes] = data
        rt = self.rt
        rt._serial += 1  # weights are not pooled: an exact-size buffer, freed with the array
        buf = GpuBuffer(rt._new_gpu_buffer(nbytes), nbytes, rt._serial, None)
        rt.write(buf, memoryview(padded))
        return WgpuArray(self, buf, (nbytes // 4,), "i32")

    def _codebook(self, fmt: str) -> dict[str, WgpuArray]:
        """{"codebook": fmt's codebook on this device} for an IQ grid format (uploaded once), else {}."""
        table = _CODEBOOKS.get(fmt)
        if table is None:
            return {}
        cache = self.__dict__.setdefault("_codebook_cache", {})
        if id(table) not in cache:  # every codebook value is a small integer: int8 bytes hold it exactly
            cache[id(table)] = self._upload_words(table.astype(np.int8).view(np.uint8))
        return {"codebook": cache[id(table)]}

    def matmul_packed(self, x: WgpuArray, w: QuantWeight | QuantRowStack) -> WgpuArray:
        dtype = x.dtype if x.dtype in self.act_dtypes else "f32"
        x = self._rows(x, dtype)
        if x.offset % 4 or x.row_stride % 4:  # the kernels read x as vec4
            x = self.contiguous(x, force=True)
        t = x.shape[0]
        out = self.empty((t, w.shape[0]), dtype)  # (T, N)
        if out.size:
            column = 0
            for part in w.parts if isinstance(w, QuantRowStack) else (w,):
                dev = self._device_packed(part)
                xp = x if dev.perms is None else self._gather_cols(x, dev.perms[0])  # (T, K) packed order
                self._matmul_packed_into(xp, dev, out, column)
                column += part.shape[0]
        return out

    def _matmul_packed_into(self, x: WgpuArray, dev: DevicePacked, out: WgpuArray, column: int) -> None:
        (t, k), op = x.shape, "matmul_" + dev.format.lower()
        if k != dev.shape[1]:
            raise UnsupportedError(
                f"matmul: x has {k} features but the {dev.format} weight has {dev.shape[1]}"
            )
        entry, rows_per_group = ("matvec", 1) if t < 4 else ("matmul4", 4)
        for part in dev.parts:
            params = {
                "tokens": t,
                "k": k,
                "n": part.rows,
                "row_bytes": dev.row_bytes,
                "x_stride": x.row_stride,
            }
            params |= {"out_stride": out.shape[1], "ids_off": 0, "row_lo": 0, "row_hi": 0, "glu_off": 0}
            params["per_token"] = 1
            target = out[:, column + part.start : column + part.start + part.rows]
            arrays = {"w": part.words, "x4": x, "out": target} | self._codebook(dev.format)
            grid = (-(-part.rows // self.WG), -(-t // rows_per_group), 1)
            self._run(op, arrays, params, grid, entry, (("T", out.dtype),))
            if entry == "matvec" and len(dev.parts) == 1 and column == 0 and part.rows == out.shape[1]:
                self.note_fusable("matvec", out=out, op=op, arrays=arrays, params=params, grid=grid)

    def _device_experts(self, w: QuantExperts) -> list[ExpertBuffers]:
        cache = self.__dict__.setdefault("_packed_cache", {})
        found = cache.get(id(w))
        if found is None:
            found = cache[id(w)] = [self._upload_experts(w, i) for i in range(len(w.parts))]
            weakref.finalize(w, cache.pop, id(w), None)
        return found

    def _upload_experts(self, w: QuantExperts, i: int) -> ExpertBuffers:
        part, rows = w.parts[i], w.part_rows(i)
        if part.format not in PACKED_FORMATS:
            raise UnsupportedError(
                f"device {self.name} does not support matmul_experts on {part.format} weights"
            )
        row_bytes = part.blocks.shape[1]
        per_buffer = (self.rt.max_binding - 4) // (rows * row_bytes)  # whole experts per binding
        if per_buffer < 1:
            raise UnsupportedError(
                f"device {self.name}: one expert's {part.format} weight ({rows * row_bytes} bytes) is larger "
                f"than a storage binding ({self.rt.max_binding} bytes)"
            )
        buffers = []
        for first in range(0, w.experts, per_buffer):
            end = min(first + per_buffer, w.experts)
            buffers.append((first, end, self._upload_words(part.blocks[first * rows : end * rows])))
        return ExpertBuffers(part.format, rows, row_bytes, buffers)

    def matmul_experts_packed(self, x: WgpuArray, w: QuantExperts, expert_ids: WgpuArray) -> WgpuArray:
        """x (T, K), w packed (E, N, K), expert_ids (T, k) -> (T, k, N): one dispatch per part and buffer of
        experts; every (token, slot) pair dots its expert's rows in registers (matvec_experts)."""
        x = self._rows(x, "f32")
        if x.offset % 4 or x.row_stride % 4:  # the kernels read x as vec4
            x = self.contiguous(x, force=True)
        ids = self.contiguous(expert_ids)
        (t, k), (_, n, width) = ids.shape, w.shape
        if x.shape[1] != width:
            raise UnsupportedError(
                f"matmul_experts: x has {x.shape[1]} features but the experts have {width}"
            )
        out = self.empty((t * k, n), "f32")  # (T k, N)
        if out.size:
            column = 0
            for part in self._device_experts(w):
                for first, end, words in part.buffers:
                    params = {"tokens": t, "k": width, "n": part.rows, "row_bytes": part.row_bytes}
                    params |= {"x_stride": x.row_stride, "out_stride": n, "row_lo": first, "row_hi": end}
                    params |= {"glu_off": 0, "per_token": k}
                    target = out[:, column : column + part.rows]
                    arrays = {"w": words, "x4": x, "ids": ids, "out": target} | self._codebook(part.format)
                    grid = (-(-part.rows // self.WG), t * k, 1)
                    op = "matmul_" + part.format.lower()
                    self._run(op, arrays, params, grid, "matvec_experts", (("T", "f32"),))
                column += part.rows
        return out.reshape(t, k, n)

    def embed_packed(self, table: QuantWeight, ids: WgpuArray) -> WgpuArray:
        if not isinstance(table, QuantWeight):
            raise UnsupportedError(f"device {self.name} does not support embed on {table.format} weights")
        dev = self._device_packed(table)
        k, dtype = dev.shape[1], "f32"
        out = self.empty((ids.shape[0], k), dtype)  # (T, K)
        if out.size:
            ids = self.contiguous(ids)
            block_elems, units_per_block = _UNITS[dev.format]
            units = k // block_elems * units_per_block
            for part in dev.parts:
                params = {"tokens": ids.shape[0], "k": k, "n": 0, "row_bytes": dev.row_bytes, "x_stride": 0}
                params |= {
                    "out_stride": k,
                    "row_lo": part.start,
                    "row_hi": part.start + part.rows,
                    "glu_off": 0,
                    "per_token": 1,
                }
                arrays = {"w": part.words, "ids": ids, "out": out} | self._codebook(dev.format)
                op = "matmul_" + dev.format.lower()
                grid = (-(-units // self.WG), ids.shape[0], 1)
                self._run(op, arrays, params | {"x_off": 0}, grid, "embed", (("T", dtype),))
        return out if dev.perms is None else self._gather_cols(out, dev.perms[1])  # (T, K) input order
