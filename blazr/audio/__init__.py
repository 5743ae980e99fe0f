"""Audio input for speech models: decode any file to 16 kHz mono float32 and compute Whisper's log-mel input."""

from blazr.audio.decode import load_audio
from blazr.audio.mel import (
    CHUNK_LENGTH,
    HOP_LENGTH,
    N_FFT,
    N_FRAMES,
    N_SAMPLES,
    SAMPLE_RATE,
    log_mel_spectrogram,
    mel_filters,
    pad_or_trim,
)

__all__ = [
    "CHUNK_LENGTH",
    "HOP_LENGTH",
    "N_FFT",
    "N_FRAMES",
    "N_SAMPLES",
    "SAMPLE_RATE",
    "load_audio",
    "log_mel_spectrogram",
    "mel_filters",
    "pad_or_trim",
]
