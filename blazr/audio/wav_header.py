"""A look at a RIFF/WAVE header without decoding: libsndfile silently shortens a WAV whose data chunk runs past
the end of the file, and reports an unknown codec only as a "malformed fmt chunk", so the decoder asks here to
say "truncated" or "unsupported sample format" instead."""

from __future__ import annotations

import struct
from dataclasses import dataclass

# Data sizes a streaming writer (ffmpeg to a pipe, a recorder killed mid-write) leaves when it cannot seek back:
# the length is unknown, not wrong, so such a file is read to its end.
_UNKNOWN_SIZES = (0, 0xFFFFFFFF)


@dataclass(frozen=True)
class WavHeader:
    format_tag: int | None  # 1 PCM, 3 IEEE float, 0xFFFE extensible, ... (None: no 'fmt ' chunk seen)
    bits_per_sample: int | None
    data_declared: int | None  # bytes the 'data' chunk says it holds (None: no 'data' chunk seen)
    data_present: int | None  # bytes of it actually in the file

    @property
    def truncated(self) -> bool:
        if self.data_declared is None:
            return self.format_tag is not None  # a header that stops before its samples begin
        if self.data_declared in _UNKNOWN_SIZES:
            return False
        return self.data_present is not None and self.data_present < self.data_declared


def read_wav_header(head: bytes, total_size: int) -> WavHeader | None:
    """Parse the chunks of a RIFF/WAVE file from its first bytes `head` and its size. None when it is not a
    RIFF/WAVE file, or its 'data' chunk starts beyond `head`."""
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return None
    format_tag = bits = None
    offset = 12
    while offset + 8 <= len(head):
        chunk_id, size = head[offset : offset + 4], struct.unpack_from("<I", head, offset + 4)[0]
        body = offset + 8
        if chunk_id == b"fmt " and body + 16 <= len(head):
            format_tag = struct.unpack_from("<H", head, body)[0]
            bits = struct.unpack_from("<H", head, body + 14)[0]
            if format_tag == 0xFFFE and size >= 40 and body + 26 <= len(head):
                format_tag = struct.unpack_from("<H", head, body + 24)[0]  # the sub-format GUID's first field
        elif chunk_id == b"data":
            return WavHeader(format_tag, bits, size, max(0, total_size - body))
        offset = body + size + (size & 1)  # chunks are padded to an even length
    if offset + 8 <= total_size and offset + 8 > len(head):
        return None  # the chunks go on past the bytes we were given: cannot tell
    return WavHeader(format_tag, bits, None, None)
