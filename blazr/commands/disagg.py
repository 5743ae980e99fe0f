"""`blazr disagg`: disaggregated prefill and decode on a Ray cluster (blazr.distributed, docs/distributed.md).

The router starts the cluster's head node and serves the HTTP API with the model's real tokenizer; prefill
workers compute prompts' KV, decode workers receive it through Ray's object store and generate. Each worker
labels its CPUs with its role (a Ray custom resource), so the router places prefill replicas on prefill nodes
and decode replicas on decode nodes.
"""

from __future__ import annotations

import os
from typing import Annotated, Any

import typer

from blazr.commands import options as o
from blazr.commands.swarm import (
    ApiKey,
    CpusPerReplica,
    Host,
    NodeIp,
    NumCpus,
    Port,
    Token,
    check_address,
    check_cluster_port,
    check_common,
    run_leader,
    run_worker,
)
from blazr.config import apply_flags
from blazr.errors import ConfigError

DISAGG = "Disaggregated serving"
ROLES = ("router", "prefill", "decode")
DEFAULT_CLUSTER_PORT = 9190


def _opt(flag: str, help: str, kind: Any = str | None, *names: str):
    return Annotated[kind, typer.Option(flag, *names, help=help, rich_help_panel=DISAGG)]


def disagg(
    role: _opt("--role", "router (serves HTTP), prefill or decode (lend their CPUs)", str) = "router",
    token: Token = None,
    model: _opt(
        "--model", "Model the router serves (default: config default_model)", str | None, "-m"
    ) = None,
    router: _opt("--router", "Prefill / decode: the router's HOST:CLUSTER-PORT") = None,
    cluster_port: _opt("--cluster-port", "Router: the cluster's port (9190)", int) = DEFAULT_CLUSTER_PORT,
    prefill_replicas: _opt("--prefill-replicas", "Router: replicas computing prompts (1)", int) = 1,
    decode_replicas: _opt("--decode-replicas", "Router: replicas generating (1)", int) = 1,
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
    """Serve one model with prompts computed on prefill machines and tokens generated on decode machines."""
    from blazr.distributed.swarm_model import DECODE_RESOURCE, PREFILL_RESOURCE, Placement

    check_common(role, ROLES, token, num_cpus)
    if role != "router":
        if not router:
            raise ConfigError(
                f"--router HOST:PORT is required for a {role} worker (the router's --cluster-port)"
            )
        check_address(router, "--router")
        resource = PREFILL_RESOURCE if role == "prefill" else DECODE_RESOURCE
        raise typer.Exit(run_worker(router, token, num_cpus, node_ip, resource))
    check_cluster_port(cluster_port, "--cluster-port")
    params = locals()
    flags = {"server.host": (host, "--host"), "server.port": (port, "--port")}
    settings = apply_flags(o.settings_from_params(params), flags)
    cpus = cpus_per_replica or os.cpu_count() or 1
    prefill = Placement(prefill_replicas, cpus, PREFILL_RESOURCE)
    placement = Placement(decode_replicas, cpus, DECODE_RESOURCE, prefill=prefill)
    joins = "blazr disagg --role prefill|decode --router THIS-HOST:{port} --token ..."
    run_leader(settings, params, token, placement, cluster_port, joins)
