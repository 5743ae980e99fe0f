"""Serving past one machine on Ray: `blazr swarm` (replicas of a model behind the leader's HTTP API, routed by
prompt prefix so a repeated prompt lands where its KV blocks are cached).

Ray Core gives the cluster (membership, token authentication, actor placement by resources, restarts of
actors whose process or node died) and the transport (actor calls, streaming generators); blazr adds the
engine replica actor (replica.py), the prefix-aware router (prefix_router.py), the leader-side engine that
streams through it (replica_set.py) and the leader's model facade (swarm_model.py). See docs/distributed.md.
"""
