"""Parallel kernels that call their serial task by address, so that the task's code is generated once.

Why: numba links a callee's code into every caller and compiles it to machine code again there. A packed
matmul was a `parallel=True` function per format (its task function picked at compile time by the format
tag), so every format paid for the parallel wrapper, numba's parfor passes and its task's code generated a
second time: 1-2 s a format and kernel kind on a 2-core AMD EPYC (Zen 1 class), ~120 such compiles in CI's
packed-format tests and several on a user's first start. Here the parallel launcher is compiled once per
kernel kind with a format-neutral tag (blazr.quant.cpu_blocks.NEUTRAL_TAG) and calls the task whose address
it is given; the task is compiled (or loaded from numba's on-disk cache) once per format, for the real tag's
type, which picks the format's code at compile time as before. Kernels without formats (the paged prefill,
dense and short attention, conv) call their loop body so too: it is then compiled once, not again inside the
parallel loop (2.5-4 s less a first call on that CPU).

The call uses numba's own calling convention (status, exception info, arguments as numba's data model
flattens them), so a task's exceptions reach the launcher's caller as they would through a direct call. A
task address is only as safe as its argument types: TaskByAddress compiles the task for the types the
launcher passes (the arrays the caller gives, typed as numba types them, and the launcher's own arrays as
declared) and checks that the machine-level function type is the one the launcher calls."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numba import typeof, types
from numba._dispatcher import compute_fingerprint  # numba's own argument-type key: ~0.3 us an array
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def call_address(typingctx, address, args):
    """call_address(address, (a, b, ...)): calls the compiled numba function at `address` (an integer from
    TaskByAddress) with the arguments a, b, ...; it must return None and have been compiled for exactly
    these argument types."""
    if not isinstance(address, types.Integer) or not isinstance(args, types.BaseTuple):
        return None

    def codegen(context, builder, signature, llargs):
        addr, packed = llargs
        argtys = list(args.types)
        values = [builder.extract_value(packed, i) for i in range(len(argtys))]
        fnty = context.call_conv.get_function_type(types.none, argtys)
        callee = builder.inttoptr(addr, fnty.as_pointer())
        status, _ = context.call_conv.call_function(builder, callee, types.none, argtys, values)
        with cgutils.if_unlikely(builder, status.is_error):
            context.call_conv.return_status_propagate(builder, status)
        return context.get_dummy_value()

    return types.none(address, args), codegen


def c_array(dtype, ndim: int) -> types.Array:
    """The numba type of a launcher's own C-contiguous array (np.empty / np.zeros inside it)."""
    return types.Array(typeof(np.dtype(dtype).type(0)), ndim, "C")


class TaskByAddress:
    """A serial numba task and its address per argument types (per format, for a packed-format task).

    `argtypes(*given)` gives the task's full numba signature from the values the caller gives and the launcher
    passes on (typed with numba.typeof: layout, read-only-ness and dtype as given); `address(*given)` compiles
    the task for it once and returns where its code lies. With `neutral`, the task's first argument is a format
    tag and the launcher passes `neutral` in its place: it must have the same numba data model as every
    format's tag (checked); a task without one is launched with the caller's own values."""

    def __init__(self, task, argtypes: Callable[..., tuple], neutral: np.ndarray | None = None):
        self._task = task
        self._argtypes = argtypes
        self._neutral = None if neutral is None else typeof(neutral)
        self._addresses: dict[tuple, int] = {}

    def address(self, *given) -> int:
        # a tag's key is its dtype (equal for equal formats); numba's fingerprint of a record array holds the
        # dtype object's identity instead
        # (map, not a generator: this runs once per kernel call, ~1 us of a 2.6 us lookup went to the generator)
        if self._neutral is None:
            key = tuple(map(compute_fingerprint, given))
        else:
            key = (given[0].dtype, *map(compute_fingerprint, given[1:]))
        found = self._addresses.get(key)
        if found is None:
            found = self._addresses[key] = self._compile(given)
        return found

    def _compile(self, given: tuple) -> int:
        argtypes = tuple(self._argtypes(*(typeof(v) for v in given)))
        self._task.compile(argtypes)
        result = self._task.overloads[argtypes]
        conv = result.target_context.call_conv
        # what the launcher calls: the same arguments, the neutral tag first where there is one; numba's data
        # model must lay both out alike, else the address would be called with arguments it reads wrongly
        launched = argtypes if self._neutral is None else (self._neutral, *argtypes[1:])
        if result.signature.return_type != types.none or str(
            conv.get_function_type(types.none, argtypes)
        ) != str(conv.get_function_type(types.none, launched)):
            raise TypeError(f"{self._task.__name__} cannot be called by address as launched: {launched}")
        return result.library.get_pointer_to_function(result.fndesc.llvm_func_name)
