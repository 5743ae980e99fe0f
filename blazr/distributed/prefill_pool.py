"""PrefillPool: the replicas of disaggregated serving that only compute prompts (`blazr disagg --role prefill`).

A request's prompt runs on the least loaded prefill replica, which returns the prompt's KV rows into Ray's
object store and frees its own blocks; the decode replica the leader picks receives the rows' reference,
loads them into its prefix cache and decodes as if it had computed the prompt itself (it recomputes only the
prompt's last, partly filled block). Output is what one engine gives; the rows never pass through the leader.
"""

from __future__ import annotations

from blazr.distributed.replica_set import ActorGroup, unwrap_ray_error
from blazr.errors import UnavailableError


class PrefillPool(ActorGroup):
    role = "prefill replica"
    placement_hint = "start more `blazr disagg --role prefill` workers, or lower --prefill-replicas"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.handed_tokens = 0  # prompt tokens handed to decode replicas, for the leader's log and tests
        self.prefill_seconds = 0.0
        self.export_seconds = 0.0  # gathering the rows out of the prefill replicas' caches
        self.load_seconds = 0.0  # fetching them on the decode replicas and writing them into their caches

    async def kv_rows(self, request_id: str, prompt_ids: list[int]):
        """The prompt's KV rows, as an ObjectRef a decode replica's `submit` takes; a prefill replica lost
        meanwhile passes the prompt to another."""
        ray = self.ray
        tried: set[int] = set()
        while True:
            candidates = [i for i, up in enumerate(self.live) if up and i not in tried]
            if not candidates:
                raise UnavailableError(f"no prefill replica of {self.model_path} is running; retry shortly")
            replica = min(candidates, key=lambda i: self.in_flight[i])
            tried.add(replica)
            self.in_flight[replica] += 1
            try:
                timings_ref, rows_ref = (
                    self.handles[replica].prefill.options(num_returns=2).remote(request_id, prompt_ids)
                )
                timings = await timings_ref
            except ray.exceptions.RayActorError:
                self._lost(replica)
                continue
            except ray.exceptions.RayTaskError as error:
                raise unwrap_ray_error(error) from None
            finally:
                self.in_flight[replica] -= 1
            self.handed_tokens += timings["tokens"]
            self.prefill_seconds += timings["prefill_s"]
            self.export_seconds += timings["export_s"]
            return rows_ref
