"""The verbs trust the API server, not the request body.

Anyone who can reach the verbs could send a pod body with a forged priority, owner, labels, annotations
or requests, or name a pod of another tenant in a bind. So every verb looks the pod up by namespace and
name in the service's own copy of the cluster (the watch's; in standalone mode the loaded and applied
objects) and decides from that copy. A pod the service has not seen yet is refused for now (the watch
brings it in a moment, and kube-scheduler retries); nothing from a request body is ever stored.

Bind also checks that the pod belongs to one of our scheduler profiles and that the UID matches, so that
a caller cannot bind a default-scheduler pod, or a newer pod reusing an old pod's name.
"""
from __future__ import annotations

from collections.abc import Mapping

from ..state import ServiceState

UNKNOWN_POD_RETRY = 1.0          # seconds before a pod refused as unknown is woken (requeued) again


def _names(metadata: Mapping) -> tuple[str, str]:
    return str(metadata.get("namespace") or "default"), str(metadata.get("name") or "")


def watched_pod(state: ServiceState, body: Mapping) -> tuple[Mapping | None, str]:
    """(the service's copy of the pod that `body` names, '') or (None, why it is refused)."""
    metadata = body.get("metadata") or {}
    namespace, name = _names(metadata)
    pod = state.objects.get("Pod", namespace, name)
    if pod is None:
        return None, (f"pod {namespace}/{name} is not known to the extender yet (waiting for its watch of "
                      f"the cluster; the pod is retried)")
    uid, stored = metadata.get("uid"), (pod.get("metadata") or {}).get("uid")
    if uid and stored and uid != stored:
        return None, (f"pod {namespace}/{name} has UID {stored} in the cluster, not {uid} (an older or newer "
                      f"pod of that name); waiting for the watch")
    return pod, ""


def bind_refusal(state: ServiceState, namespace: str, name: str, uid: str) -> str:
    """Why the extender must not bind this pod, or '' when it may (it exists in the watched state, its UID
    matches, it belongs to one of our scheduler profiles). An already bound pod is the binder's call: a
    retry to the same node succeeds without a write, another node is a conflict."""
    key = f"{namespace}/{name}"
    pod = state.objects.get("Pod", namespace, name)
    if pod is None:
        return f"refusing to bind pod {key}: it is not in the extender's watched view of the cluster"
    stored = (pod.get("metadata") or {}).get("uid") or ""
    if (uid or "") != stored:
        return f"refusing to bind pod {key}: PodUID {uid or '(empty)'} does not match the pod's UID {stored or '(none)'}"
    scheduler = (pod.get("spec") or {}).get("schedulerName") or "default-scheduler"
    profiles = state.settings.scheduler_names
    if scheduler not in profiles:
        return (f"refusing to bind pod {key}: its spec.schedulerName is {scheduler}, and this extender binds "
                f"only pods of {', '.join(profiles)} (--scheduler-name)")
    return ""
