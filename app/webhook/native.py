"""What the webhook says about a pod's native PodGroup (spec.schedulingGroup.podGroupName): a missing one, or
one we cannot place as asked (an invalid policy, a key no topology has, a minCount above the pods its
workload can have). Warnings only: kube-scheduler's own gate holds such pods, and our filter refuses them."""
from __future__ import annotations

from collections.abc import Mapping

from app.extender.minimum import creates_one_after_another
from grouper.native import API_GROUP, gang_minimum, possible_pods, problems, scheduling_group
from topology.tree import TopologyTree


def native_warnings(pod: Mapping, objects, topologies: Mapping[str, TopologyTree]) -> list[str]:
    name = scheduling_group(pod)
    if name is None:
        return []
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    podgroup = objects.get("PodGroup", namespace, name, group=API_GROUP)
    if podgroup is None:
        return [f"spec.schedulingGroup.podGroupName={name!r}: PodGroup {namespace}/{name} does not exist (or the "
                f"extender has not seen it yet); the pod is not scheduled until it does"]
    return problems(podgroup, topologies, _possible(pod, objects))


def _possible(pod: Mapping, objects) -> int | None:
    """The pods the pod's Job can run at once (its parallelism), when the pod belongs to a Job."""
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    owner = next((r for r in refs if r.get("controller") and r.get("kind") == "Job"), None)
    if owner is None:
        return None
    job = objects.get("Job", (pod.get("metadata") or {}).get("namespace") or "default", owner.get("name"), group="batch")
    return possible_pods(job) if job is not None else None


def gate_operations(pod: Mapping, identity, owner: Mapping, gate, dry_run: bool) -> list[dict]:
    """Put a member of one of our gangs into the gang's native PodGroup (app.kube.native_gate), so that
    kube-scheduler waits for the members itself: a JSONPatch op, and the PodGroup asked for. Nothing for a
    pod already in a PodGroup (the Job controller's own), where the gate is off or not served, or for a
    workload whose controller creates its pods only as earlier ones run (its gang never all exists first)."""
    if gate is None or identity is None or scheduling_group(pod) is not None or not gate.active():
        return []
    if creates_one_after_another(owner) or _opted_out(owner):
        return []
    minimum = gang_minimum(identity.tree)
    possible = possible_pods(owner)
    if possible is not None:
        minimum = max(1, min(minimum, possible))
    if not dry_run:
        namespace = (pod.get("metadata") or {}).get("namespace") or "default"
        gate.ensure(namespace, identity.podgroup_name, minimum, owner)
    return [{"op": "add", "path": "/spec/schedulingGroup", "value": {"podGroupName": identity.podgroup_name}}]


GATE_ANNOTATION = "tas-extender.io/native-gate"      # "off" on a workload: its pods are never gated natively


def _opted_out(owner: Mapping) -> bool:
    """A workload that asks to bind part of its gang before the rest exists (its own scheduling gates)."""
    return ((owner.get("metadata") or {}).get("annotations") or {}).get(GATE_ANNOTATION) == "off"
