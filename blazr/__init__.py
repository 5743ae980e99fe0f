"""blazr: one pip install that runs text, speech and embedding models on whatever GPU you have."""

__version__ = "0.1.0"

__all__ = ["__version__", "load"]


def load(model: str, device: str = "cpu", **kwargs):
    """Load a model by path or name; returns a `blazr.api.LLM` (see blazr/api.py)."""
    from blazr.api import LLM

    return LLM.load(model, device=device, **kwargs)
