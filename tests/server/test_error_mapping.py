"""Library errors map to the HTTP status a client can act on."""

from blazr.engine.scheduler import QueueFullError
from blazr.errors import ConfigError, ModelNotFoundError
from blazr.server.errors import api_error_from_blazr


def test_full_engine_queue_is_429_with_retry_after():
    err = api_error_from_blazr(QueueFullError("the waiting queue is full (256 requests)"))
    assert err.status == 429
    assert err.headers["Retry-After"] == "1"


def test_missing_model_is_404_and_bad_parameter_is_400():
    assert api_error_from_blazr(ModelNotFoundError("model 'x' not found")).status == 404
    assert api_error_from_blazr(ConfigError("sampling parameter top_p=2 must be in (0, 1]")).param == "top_p"
