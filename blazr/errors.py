"""User-facing errors. Each message names the file, flag or value to fix; the CLI prints it and exits non-zero."""


class BlazrError(Exception):
    """Base class: an error the user can fix. `exit_code` is what the CLI exits with."""

    exit_code = 1


class ModelNotFoundError(BlazrError):
    """A model path or name that does not exist."""


class CheckpointError(BlazrError):
    """A checkpoint that is truncated, corrupt, or has a tensor of the wrong shape or type."""


class UnsupportedError(BlazrError):
    """A known thing blazr does not (yet) do: an architecture, a quant type, an op on a device."""


class TokenizerError(BlazrError):
    """A tokenizer that is missing or cannot be built."""


class TemplateError(BlazrError):
    """A chat template that cannot be found or rendered."""


class DownloadError(BlazrError):
    """A model download that failed (network, hash mismatch)."""


class ConfigError(BlazrError):
    """A bad flag or config value."""

    exit_code = 2


class InputError(ConfigError):
    """Request input that cannot be served as given (empty, too long, outside the vocabulary); `param` names
    the request field at fault, so the server's 400 can say which."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


class AudioError(InputError):
    """Audio that cannot be decoded: a missing file, not audio, empty, truncated, or a sample format neither
    soundfile nor ffmpeg reads. The message names the file; `param` is the request field ("file")."""

    def __init__(self, message: str, param: str | None = "file"):
        super().__init__(message, param)


class LoraLoadError(BlazrError):
    """A LoRA adapter that cannot be applied: an unreadable file, a format or option not supported, or tensors
    that do not fit the base model (the message names the file, the tensor or the key)."""


class LoraNotFoundError(BlazrError):
    """A request or a call that names a LoRA adapter the model has not loaded."""


class UnavailableError(BlazrError):
    """A part of a cluster that is down for now (a replica whose process or node went away): the request may
    succeed if retried, on another replica or once this one has restarted."""
