"""The wgpu backend's dispatch machinery: buffer pool, pipeline and bind-group caches, one uniform arena for
every dispatch's Params, and lazy recording of dispatches flushed as one encoder, one pass, one submit.

Why it is shaped this way (docs: wgsl-on-cpu.md): a bind group costs ~50 us to create, a submit 100-200 us,
a pass 15-30 us, while set_pipeline + set_bind_group + dispatch costs 2-6 us. So pipelines and bind groups are
built once and cached by buffer serial (pooled buffers come back with their serial, so a repeated decode
step hits the cache), and every dispatch of a step goes into one pass submitted at the next read-back.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from blazr.backends.wgpu_array import GpuBuffer, WgpuArray
from blazr.backends.wgsl import Shader, load_shader
from blazr.errors import UnsupportedError

_BIND_GROUP_CACHE = 8192  # entries; a model step uses a few hundred
_POOL_PER_SIZE = 16  # free buffers kept per size bucket
_ARENA_SLOTS = 2048  # Params slots per submit; more dispatches than this flush early
_MAX_WORKGROUPS = 65535  # maxComputeWorkgroupsPerDimension in core WebGPU


@dataclass
class Stats:
    """Counters since the backend was created; `blazr bench` reports their per-step deltas."""

    dispatches: int = 0
    submits: int = 0
    bytes_read: int = 0  # device -> host
    bytes_written: int = 0  # host -> device
    readbacks: int = 0
    encode_ns: int = 0  # host time recording dispatches, encoding and submitting them
    extra: dict[str, int] = field(default_factory=dict)


def bucket(nbytes: int) -> int:
    """Pool size class: 4 buckets per power of two (<= 25% waste), at least 256 bytes."""
    if nbytes <= 256:
        return 256
    step = 1 << max(8, nbytes.bit_length() - 3)
    return -(-nbytes // step) * step


def grid_1d(groups: int) -> tuple[int, int, int]:
    """A dispatch grid of `groups` workgroups folded into y past the per-dimension limit."""
    if groups <= _MAX_WORKGROUPS:
        return (max(groups, 1), 1, 1)
    return (_MAX_WORKGROUPS, -(-groups // _MAX_WORKGROUPS), 1)


class Runtime:
    def __init__(self, wgpu_module: Any, device: Any):
        self.wgpu, self.device, self.queue = wgpu_module, device, device.queue
        self.limits = device.limits
        self.max_binding = int(self.limits["max-storage-buffer-binding-size"])  # bytes one binding may see
        self.stats = Stats()
        self._free: dict[int, list[tuple[Any, int]]] = {}
        self._serial = 0
        self._pipelines: dict[tuple, tuple[Any, Shader]] = {}
        self._bind_groups: OrderedDict[tuple, Any] = OrderedDict()
        self._pending: list[tuple[Any, Any, tuple[int, int, int]]] = []
        self._pending_serials: set[int] = set()
        self._slot = max(256, int(self.limits.get("min-uniform-buffer-offset-alignment", 256)))
        self._arena = bytearray(self._slot * _ARENA_SLOTS)
        self._arena_buf = self._new_gpu_buffer(len(self._arena), uniform=True)
        self._staging: Any = None

    # ---- buffers --------------------------------------------------------------------------------------
    def _new_gpu_buffer(self, nbytes: int, uniform: bool = False) -> Any:
        usage = self.wgpu.BufferUsage
        flags = usage.UNIFORM | usage.COPY_DST if uniform else usage.STORAGE | usage.COPY_SRC | usage.COPY_DST
        try:
            return self.device.create_buffer(size=nbytes, usage=flags)
        except Exception as e:  # wgpu raises its own error types for out-of-memory and over-limit sizes
            raise UnsupportedError(
                f"cannot allocate {nbytes / 2**20:.1f} MiB on the WebGPU device: {e}. The model may not fit "
                "in this adapter's memory; try a smaller or more quantized model, or --device cpu"
            ) from None

    def alloc(self, nbytes: int, for_upload: bool = False) -> GpuBuffer:
        """A buffer of at least nbytes. An upload writes it through the queue *before* the pending
        dispatches run, so it must not get a buffer those dispatches still use."""
        size = bucket(nbytes)
        if size > self.max_binding:
            size = -(-nbytes // 4) * 4
        if nbytes > self.max_binding:
            raise UnsupportedError(
                f"a tensor of {nbytes / 2**20:.1f} MiB exceeds this adapter's max-storage-buffer-binding-size "
                f"({self.max_binding / 2**20:.0f} MiB); only 2-d weights are split across buffers"
            )
        free = self._free.get(size, [])
        for i in range(len(free) - 1, -1, -1):
            gpu, serial = free[i]
            if not (for_upload and serial in self._pending_serials):
                del free[i]
                return GpuBuffer(gpu, size, serial, self)
        self._serial += 1
        return GpuBuffer(self._new_gpu_buffer(size), size, self._serial, self)

    def release(self, gpu: Any, nbytes: int, serial: int) -> None:
        free = self._free.setdefault(nbytes, [])
        if len(free) < _POOL_PER_SIZE:
            free.append((gpu, serial))

    def write(self, buf: GpuBuffer, data: bytes) -> None:
        if len(data) % 4:
            data = bytes(data) + b"\0" * (4 - len(data) % 4)
        self.queue.write_buffer(buf.gpu, 0, data)
        self.stats.bytes_written += len(data)

    # ---- dispatch -------------------------------------------------------------------------------------
    def pipeline(self, op: str, entry: str, aliases: tuple, constants: tuple) -> tuple[Any, Shader]:
        key = (op, entry, aliases, constants)
        found = self._pipelines.get(key)
        if found is None:
            shader = load_shader(op, aliases)
            module = self.device.create_shader_module(label=op, code=shader.source)
            compute = {"module": module, "entry_point": entry, "constants": dict(constants)}
            found = self.device.create_compute_pipeline(label=f"{op}.{entry}", layout="auto", compute=compute)
            found = self._pipelines[key] = (found, shader)
        return found

    def dispatch(
        self,
        op: str,
        arrays: dict[str, WgpuArray],
        params: dict[str, float | int],
        grid: tuple[int, int, int],
        entry: str = "main",
        aliases: tuple = (),
        constants: tuple = (),
    ) -> None:
        """Record one dispatch. Each array's element offset fills Params field `<name>_off` if there is one."""
        if len(self._pending) >= _ARENA_SLOTS:
            self.flush()
        started = time.perf_counter_ns()
        pipeline, shader = self.pipeline(op, entry, aliases, constants)
        values = dict(params)
        for name, arr in arrays.items():
            values.setdefault(f"{name.rstrip('4')}_off", arr.offset)  # x4 is x read as vec4
        slot = len(self._pending)
        self._arena[slot * self._slot : slot * self._slot + shader.params_size] = shader.pack(values)
        serials = tuple((shader.bindings[name], arr.buf.serial) for name, arr in arrays.items())
        key = (id(pipeline), serials, slot)
        group = self._bind_groups.get(key)
        if group is None:
            group = self._bind_group(pipeline, shader, arrays, slot)
            self._bind_groups[key] = group
            if len(self._bind_groups) > _BIND_GROUP_CACHE:
                self._bind_groups.popitem(last=False)
        else:
            self._bind_groups.move_to_end(key)
        self._pending.append((pipeline, group, grid))
        self._pending_serials.update(arr.buf.serial for arr in arrays.values())
        self.stats.encode_ns += time.perf_counter_ns() - started

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    def drop_last(self) -> None:
        """Forget the last recorded dispatch (the backend replaces it with a fused one); its Params slot is
        reused by the next dispatch. Its buffers stay marked pending, which only makes uploads more careful."""
        self._pending.pop()

    def _bind_group(self, pipeline: Any, shader: Shader, arrays: dict[str, WgpuArray], slot: int) -> Any:
        entries = [
            {
                "binding": shader.bindings[name],
                "resource": {"buffer": arr.buf.gpu, "offset": 0, "size": arr.buf.nbytes},
            }
            for name, arr in arrays.items()
        ]
        size = -(-shader.params_size // 16) * 16
        params = {"buffer": self._arena_buf, "offset": slot * self._slot, "size": size}
        entries.append({"binding": shader.bindings["params"], "resource": params})
        return self.device.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=entries)

    def flush(self, copy: tuple[GpuBuffer, int, int] | None = None) -> None:
        """Submit every pending dispatch in one encoder and pass, then (optionally) a copy to staging."""
        if not self._pending and copy is None:
            return
        started = time.perf_counter_ns()
        encoder = self.device.create_command_encoder()
        if self._pending:
            used = len(self._pending) * self._slot
            self.queue.write_buffer(self._arena_buf, 0, self._arena, 0, used)
            compute = encoder.begin_compute_pass()
            last = None
            for pipeline, group, grid in self._pending:
                if pipeline is not last:
                    compute.set_pipeline(pipeline)
                    last = pipeline
                compute.set_bind_group(0, group)
                compute.dispatch_workgroups(*grid)
            compute.end()
            self.stats.dispatches += len(self._pending)
        if copy is not None:
            src, lo, size = copy
            encoder.copy_buffer_to_buffer(src.gpu, lo, self._staging_buffer(size), 0, size)
        self.queue.submit([encoder.finish()])
        self.stats.encode_ns += time.perf_counter_ns() - started
        self.stats.submits += 1
        self._pending.clear()
        self._pending_serials.clear()

    # ---- read-back ------------------------------------------------------------------------------------
    def _staging_buffer(self, size: int) -> Any:
        if self._staging is None or self._staging.size < size:
            usage = self.wgpu.BufferUsage.MAP_READ | self.wgpu.BufferUsage.COPY_DST
            self._staging = self.device.create_buffer(size=bucket(size), usage=usage)
        return self._staging

    def read(self, arr: WgpuArray) -> bytes:
        """The bytes of a contiguous array, after every pending dispatch has run."""
        start, nbytes = arr.offset * arr.itemsize, arr.size * arr.itemsize
        lo, hi = start // 4 * 4, -(-(start + nbytes) // 4) * 4  # copies move whole 4-byte words
        if hi == lo:
            return b""
        self.flush(copy=(arr.buf, lo, hi - lo))
        staging = self._staging
        staging.map_sync(self.wgpu.MapMode.READ, 0, hi - lo)
        try:
            data = bytes(staging.read_mapped(0, hi - lo, copy=False))
        finally:
            staging.unmap()
        self.stats.bytes_read += hi - lo
        self.stats.readbacks += 1
        return data[start - lo : start - lo + nbytes]

    def wait(self) -> None:
        self.flush()
        self.device._poll_wait()  # wgpu-py 0.32: queue.on_submitted_work_done_sync is broken (issue #834)

    def copy_bandwidth(self, nbytes: int = 1 << 27, copies: int = 8) -> float:
        """Device memory bandwidth in bytes/s (read + write counted) from timed buffer-to-buffer copies."""
        nbytes = min(nbytes, int(self.limits["max-buffer-size"])) // 4 * 4
        usage = self.wgpu.BufferUsage.COPY_SRC | self.wgpu.BufferUsage.COPY_DST
        src, dst = (self.device.create_buffer(size=nbytes, usage=usage) for _ in range(2))
        self.wait()
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            encoder = self.device.create_command_encoder()
            for _ in range(copies):
                encoder.copy_buffer_to_buffer(src, 0, dst, 0, nbytes)
            self.queue.submit([encoder.finish()])
            self.device._poll_wait()
            best = min(best, time.perf_counter() - started)
        src.destroy()
        dst.destroy()
        return 2 * nbytes * copies / best
