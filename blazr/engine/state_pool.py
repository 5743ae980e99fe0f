"""The state-slot pool: one fixed-size recurrent state per running sequence, for models with state-space layers.

A Mamba layer keeps no per-token cache: each sequence has one conv window and one SSM state per layer, of a
size that does not grow with its length. The model allocates `num_slots` of them (`make_cache(..., num_seqs)`),
and this pool hands slot ids to sequences: taken when a sequence starts running, given back when it finishes,
is aborted or preempted (a preempted sequence is recomputed from its first token, so its state starts over).
Pure Python bookkeeping, like BlockPool: the model's arrays hold the data.
"""

from __future__ import annotations

from collections.abc import Hashable

from blazr.errors import BlazrError


class OutOfStateSlotsError(BlazrError):
    """Every state slot is held by a running sequence."""


class StatePool:
    """`num_slots` state slots; each running sequence (any hashable id) holds at most one."""

    def __init__(self, num_slots: int):
        if num_slots < 1:
            raise ValueError(f"StatePool needs num_slots >= 1, got {num_slots}")
        self.num_slots = num_slots
        self._free = list(range(num_slots - 1, -1, -1))  # a stack: the lowest id is handed out first
        self._held: dict[Hashable, int] = {}

    @property
    def num_free(self) -> int:
        return len(self._free)

    def slot_of(self, seq: Hashable) -> int | None:
        return self._held.get(seq)

    def allocate(self, seq: Hashable) -> int:
        """The sequence's slot, taking a free one if it holds none."""
        slot = self._held.get(seq)
        if slot is not None:
            return slot
        if not self._free:
            raise OutOfStateSlotsError(f"all {self.num_slots} state slots are held; {seq!r} must wait")
        slot = self._held[seq] = self._free.pop()
        return slot

    def free(self, seq: Hashable) -> None:
        """Give the sequence's slot back (a no-op when it holds none)."""
        slot = self._held.pop(seq, None)
        if slot is not None:
            self._free.append(slot)

    def holders(self) -> dict[Hashable, int]:
        """{sequence: slot} (for consistency checks)."""
        return dict(self._held)
