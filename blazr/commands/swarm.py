"""`blazr swarm`: one model served from many machines on a Ray cluster (blazr.distributed, docs/distributed.md).

The leader starts the cluster's head node, serves the HTTP API as `blazr serve` does and places replicas of the
model on the nodes by their free CPUs; a worker joins the leader's cluster and lends its CPUs until stopped.
Every node holds the same --token: Ray's token authentication refuses a node or client without it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer

from blazr.commands import options as o
from blazr.config import Settings, apply_flags
from blazr.errors import ConfigError

SWARM = "Swarm"
ROLES = ("leader", "worker")
DEFAULT_SWARM_PORT = 9090
RAY_WORKER_PORTS = range(10002, 20000)  # Ray's default ports for its worker processes: not for the head's


def _opt(flag: str, help: str, kind: Any = str | None, *names: str, envvar: str | None = None, panel=SWARM):
    return Annotated[kind, typer.Option(flag, *names, help=help, envvar=envvar, rich_help_panel=panel)]


# the options `swarm` and `disagg` share (blazr/commands/disagg.py)
CLUSTER = "Cluster"
Token = _opt("--token", "Secret every node shares (required)", envvar="BLAZR_SWARM_TOKEN", panel=CLUSTER)
NodeIp = _opt("--node-ip", "This node's address as the others reach it (default: Ray's guess)", panel=CLUSTER)
NumCpus = _opt(
    "--num-cpus", "CPUs this node lends to replicas (default: all; 0: none)", int | None, panel=CLUSTER
)
CpusPerReplica = _opt(
    "--cpus-per-replica",
    "Leader or router: CPUs (and threads) each replica takes (default: this machine's)",
    int | None,
    panel=CLUSTER,
)
Host = _opt("--host", "Leader or router: address the HTTP API listens on (default: 127.0.0.1)", panel=CLUSTER)
Port = _opt("--port", "Leader or router: HTTP port (default: 8080)", int | None, panel=CLUSTER)
ApiKey = _opt(
    "--api-key",
    "Leader or router: required API key (repeatable; also BLAZR_API_KEY)",
    list[str] | None,
    panel=CLUSTER,
)


def check_common(role: str, roles: tuple[str, ...], token: str | None, num_cpus: int | None) -> None:
    """The checks `swarm` and `disagg` share: the role, the token, the CPUs lent."""
    from blazr.distributed.ray_cluster import check_token_format

    if role not in roles:
        raise ConfigError(f"--role must be one of {', '.join(roles)}, got {role!r}")
    check_token_format(token)
    if num_cpus is not None and num_cpus < 0:
        raise ConfigError(f"--num-cpus must be 0 or more, got {num_cpus}")


def swarm(
    role: _opt("--role", "leader (serves HTTP, places replicas) or worker (lends its CPUs)", str) = "worker",
    token: Token = None,
    model: _opt(
        "--model", "Model the leader serves (default: config default_model)", str | None, "-m"
    ) = None,
    leader: _opt("--leader", "Worker: the leader's HOST:SWARM-PORT") = None,
    swarm_port: _opt("--swarm-port", "Leader: the cluster's port (9090)", int) = DEFAULT_SWARM_PORT,
    replicas: _opt("--replicas", "Leader: copies of the model on the cluster (2)", int) = 2,
    pipeline_stages: _opt(
        "--pipeline-stages", "Leader: split each replica's layers over this many nodes (1: whole)", int
    ) = 1,
    pipeline_lanes: _opt(
        "--pipeline-lanes",
        "Leader: engines per pipeline replica, each with its own batch in the stages (default: one per machine)",
        int | None,
    ) = None,
    node_ip: NodeIp = None,
    num_cpus: NumCpus = None,
    cpus_per_replica: CpusPerReplica = None,
    host: Host = None,
    port: Port = None,
    api_key: ApiKey = None,
    device: o.Device = None,
    dtype: o.DType = None,
    num_ctx: o.NumCtx = None,
    chat_template: o.ChatTemplate = None,
    model_dir: o.ModelDir = None,
) -> None:
    """Serve one model from several machines: replicas on a Ray cluster behind the leader's HTTP API."""
    check_common(role, ROLES, token, num_cpus)
    if role == "leader":
        check_cluster_port(swarm_port, "--swarm-port")
        if pipeline_stages < 1:
            raise ConfigError(f"--pipeline-stages must be 1 or more, got {pipeline_stages}")
        if pipeline_lanes is not None and pipeline_lanes < 1:
            raise ConfigError(f"--pipeline-lanes must be 1 or more, got {pipeline_lanes}")
    if role == "worker":
        if not leader:
            raise ConfigError("--leader HOST:PORT is required for a worker (the leader's --swarm-port)")
        check_address(leader, "--leader")
        raise typer.Exit(run_worker(leader, token, num_cpus, node_ip))
    params = locals()
    flags = {"server.host": (host, "--host"), "server.port": (port, "--port")}
    settings = apply_flags(o.settings_from_params(params), flags)
    _run_leader(settings, params, token)


def check_address(address: str, flag: str) -> None:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"{flag} must be HOST:PORT (the leader's cluster port), got {address!r}")


def check_cluster_port(port: int, flag: str) -> None:
    if not 0 < port < 65536 or port in RAY_WORKER_PORTS:
        raise ConfigError(
            f"{flag} {port}: give a port from 1 to 65535 outside 10002-19999 (Ray's worker ports)"
        )


def run_worker(
    leader: str, token: str, num_cpus: int | None, node_ip: str | None, resource: str | None = None
) -> int:
    """Join the leader's cluster and lend this machine's CPUs (labelled `resource`, if given) until stopped;
    the node's exit status."""
    from blazr.distributed.ray_cluster import check_leader_accepts, node_command, start_node, stop_node

    check_leader_accepts(leader, token)
    labels = json.dumps({resource: 1000}) if resource else None  # room for any number of replicas
    command = node_command(head=False, address=leader, num_cpus=num_cpus, host=node_ip, resources=labels)
    node = start_node(command, token, None)
    typer.echo(f"joined the cluster at {leader}; Ctrl-C leaves it", err=True)
    return _wait_for(node, stop_node)


def _run_leader(settings: Settings, params: dict[str, Any], token: str) -> None:
    from blazr.distributed.swarm_model import Placement

    cpus = params["cpus_per_replica"] or os.cpu_count() or 1
    joins = "blazr swarm --role worker --leader THIS-HOST:{port} --token ..."
    stages, lanes = params["pipeline_stages"], params["pipeline_lanes"]
    placement = Placement(params["replicas"], cpus, stages=stages, lanes=lanes)
    run_leader(settings, params, token, placement, params["swarm_port"], joins)


def run_leader(
    settings: Settings, params: dict[str, Any], token: str, placement: Any, port: int, joins: str
) -> None:
    """Start the cluster's head node on `port`, place the model's replicas and serve HTTP until stopped.
    `params`: the command's flags (model, model_dir, api_key, num_cpus, node_ip); `joins`: how workers join."""
    from blazr.commands.serve import collect_api_keys, serve_app
    from blazr.distributed.ray_cluster import connect, node_command, start_node, stop_node
    from blazr.distributed.swarm_model import swarm_loader
    from blazr.server.app import create_app

    path = o.model_path(params["model"], settings, params["model_dir"])
    keys = collect_api_keys(params["api_key"] or [], settings)
    log_path = Path(tempfile.gettempdir()) / f"blazr-cluster-{port}.log"
    with open(log_path, "ab") as log:
        command = node_command(
            head=True, address=str(port), num_cpus=params["num_cpus"], host=params["node_ip"]
        )
        head = start_node(command, token, log)
    try:
        ray = connect(f"{params['node_ip'] or '127.0.0.1'}:{port}", token, head)
        typer.echo(
            f"cluster head on port {port} (Ray's log: {log_path}); workers join with `{joins.format(port=port)}`",
            err=True,
        )
        app = create_app(
            settings,
            model=str(path),
            model_dir=o.resolve_model_dir(settings, params["model_dir"]),
            api_keys=keys,
            loader=swarm_loader(ray, placement, served=path),
        )
        serve_app(app, settings)
    finally:
        if "ray" in sys.modules:
            sys.modules["ray"].shutdown()
        stop_node(head)


def _wait_for(node, stop_node) -> int:
    """Wait for a node process, stopping it on SIGINT / SIGTERM."""

    def on_signal(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    try:
        return node.wait()
    except KeyboardInterrupt:
        stop_node(node)
        return 0
