"""Serving past one machine on Ray: `blazr swarm` (replicas of a model behind the leader's HTTP API, routed by
prompt prefix so a repeated prompt lands where its KV blocks are cached) and `blazr disagg` (prompts computed
on prefill replicas, their KV handed through Ray's object store to decode replicas). "Swarm" in this package
names any such cluster, disaggregated or not.

Ray Core gives the cluster (membership, token authentication, actor placement by resources, restarts of
actors whose process or node died) and the transport (actor calls, streaming generators, the object store);
blazr adds the engine replica actor (replica.py), the prefix-aware router (prefix_router.py), the leader-side
engine that streams through it (replica_set.py), the prefill replicas (prefill_pool.py) and the leader's
model facade and loader (swarm_model.py). See docs/distributed.md.
"""
