"""Starting, joining and connecting to the Ray cluster a swarm runs on, with the swarm's shared token.

Ray checks the token itself (token authentication, Ray >= 2.52: RAY_AUTH_MODE=token, RAY_AUTH_TOKEN): every
node, driver and actor of the cluster must hold it. Ray reads those variables when it is imported, so
`import_ray` sets them first and refuses to run under a Ray imported with another token.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from types import ModuleType

from blazr.errors import ConfigError, UnsupportedError

RAY_MISSING = "blazr swarm runs on Ray, which is not installed: pip install 'blazr[distributed]'"
MIN_TOKEN_LENGTH = 8  # a shared secret shorter than this is a typo or a placeholder, not a secret
CONNECT_TIMEOUT_S = 60.0  # a head node takes ~2 s to open its GCS port here; a loaded machine longer
# Ray returns a call's result inline (in the reply) up to this size and through its object store above it. Its
# default, 100 KiB, sends a pipeline stage's logits (vocabulary x 4 bytes a row: 196 KiB for SmolLM2) through
# the store, ~1.7 ms more a step on this machine (SmolLM2 over two stages: 6.4 -> 4.7 ms of Ray per step);
# 4 MiB keeps a decode batch's logits inline, and a prompt's KV rows (megabytes) still go through the store.
INLINE_RESULT_BYTES = 4 * 2**20


def import_ray(token: str) -> ModuleType:
    """Ray, set up to authenticate with `token`."""
    check_token_format(token)
    loaded = sys.modules.get("ray")
    if loaded is not None and os.environ.get("RAY_AUTH_TOKEN") != token:
        raise ConfigError("Ray was already imported in this process with another token; start a new process")
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = token
    try:
        import ray
    except ImportError:
        raise UnsupportedError(RAY_MISSING) from None
    return ray


def check_token_format(token: str | None) -> None:
    if not token:
        raise ConfigError(
            "--token (or BLAZR_SWARM_TOKEN) is required: the secret every node of the swarm shares"
        )
    if len(token) < MIN_TOKEN_LENGTH or token.strip() != token:
        raise ConfigError(
            f"--token must be at least {MIN_TOKEN_LENGTH} characters with no surrounding spaces"
        )


def check_leader_accepts(address: str, token: str) -> None:
    """Raise ConfigError unless the cluster at `address` accepts `token`: Ray's own `ray start` would retry a
    refused token for 20 s and then print a stack trace."""
    ray = import_ray(token)
    from ray._raylet import GcsClient  # what `ray start` itself connects with (ray/_private/node.py)

    try:
        GcsClient(address=address).cluster_id  # noqa: B018 (the first call that authenticates)
    except ray.exceptions.AuthenticationError:
        raise ConfigError(
            f"the cluster's leader at {address} refused this worker's token: give the leader's --token "
            "(or BLAZR_SWARM_TOKEN)"
        ) from None
    except ray.exceptions.RpcError as error:
        raise ConfigError(f"no cluster leader answered at {address}: {error}") from None


def node_command(
    *, head: bool, address: str, num_cpus: int | None, host: str | None = None, resources: str | None = None
) -> list[str]:
    """`ray start --block` for a head node on port `address` or a worker joining `address`."""
    command = [sys.executable, "-m", "ray.scripts.scripts", "start", "--block", "--disable-usage-stats"]
    if head:
        command += ["--head", "--port", address, "--include-dashboard=false"]
    else:
        command += ["--address", address]
    if num_cpus is not None:
        command += ["--num-cpus", str(num_cpus)]
    if host:
        command += ["--node-ip-address", host]
    if resources:
        command += ["--resources", resources]
    return command


def start_node(command: list[str], token: str, log) -> subprocess.Popen:
    """Run a node (its raylet and, for a head, the GCS) as a child process that ends with it."""
    env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    env["RAY_max_direct_call_object_size"] = str(INLINE_RESULT_BYTES)
    return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop_node(process: subprocess.Popen, timeout: float = 15.0) -> None:
    """End a node started by start_node: `ray start --block` stops its Ray processes on SIGTERM."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        process.wait()


def connect(
    address: str, token: str, node: subprocess.Popen | None = None, timeout: float = CONNECT_TIMEOUT_S
):
    """Join the cluster at `address` (host:port) as a driver, the leader's process; waits for a node just
    started to open its port."""
    ray = import_ray(token)
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout
    while not _port_open(host, int(port)):
        if node is not None and node.poll() is not None:
            raise ConfigError(f"the Ray node for {address} exited with status {node.returncode}; see its log")
        if time.monotonic() > deadline:
            raise ConfigError(f"no Ray cluster answered at {address} within {timeout:.0f} s")
        time.sleep(0.2)
    ray.init(address=address, logging_level="ERROR", log_to_driver=False, configure_logging=False)
    return ray


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False
