"""Native gangs (scheduling.k8s.io PodGroups) as the service finds them: the objects a pod naming a PodGroup
leads to, fed to the pure grouper.native. One grouping per object versions and member set (cached)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from grouper import GroupingError, PodIdentity, group_workload, identify_pod, owner_of
from grouper.kinds import workload_shape
from grouper.native import (API_GROUP, constrain, controller_ref, group_native, group_native_tree, group_priority,
                            is_gate, native_identity, parent_name, policy_of, scheduling_group, templates,
                            workload_name)
from grouper.workloads import opts_in
from topology.cluster import pod_key
from topology.objects import group_of

from ..state import ServiceState
from ..state.identities import version as _version
from ..state.plans import GANG_REFUSED


def identify(state: ServiceState, pod: Mapping) -> PodIdentity | None:
    """The gang of a pod naming a native gang PodGroup; None when it names none, or a `basic` one (its
    workload decides then). Raises GroupingError for a PodGroup that is missing or invalid."""
    name = scheduling_group(pod)
    if name is None:
        return None
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    podgroup = state.objects.get("PodGroup", namespace, name, group=API_GROUP)
    if podgroup is None:
        if not state.watches(API_GROUP, "PodGroup"):
            return None
        raise GroupingError(f"PodGroup {namespace}/{name}, named by spec.schedulingGroup.podGroupName of pod "
                            f"{pod_key(pod)}, does not exist (or is not seen by the extender yet)")
    if is_gate(podgroup) or not policy_of(podgroup).gang:      # our own gate: the workload is the gang
        return None
    identity = _identify(state, pod, podgroup, namespace, name)
    key = policy_of(podgroup).key
    return replace(identity, native_key=key) if key and identity is not None else identity


def _identify(state: ServiceState, pod: Mapping, podgroup: Mapping, namespace: str, name: str) -> PodIdentity:
    topologies = state.cluster.topologies
    classes = list(state.objects.list("PriorityClass"))
    versions = (state.rebuilds, tuple(_version(c) for c in classes))
    workload = _workload(state, podgroup)
    controller = _controller(state, pod, workload)
    if controller is not None and opts_in(controller):      # our annotations shape the gang, inside the PodGroup
        def grouped():
            trees = group_workload(controller, topologies, classes)
            return [constrain(tree, podgroup, topologies) for tree in trees], workload_shape(controller)
        trees, shape = state.identities.get(("native-ours", _version(controller), _version(podgroup), versions), grouped)
        return identify_pod(pod, controller, topologies, trees=trees, shape=shape)
    if workload is not None and (templates(workload) > 1 or parent_name(podgroup)):
        return _tree_identity(state, pod, workload, versions)
    pods = _pods(state, namespace, [name], pod)
    key = ("native", _version(podgroup), tuple(sorted(_member(p) for p in pods)), versions)
    tree = state.identities.get(key, lambda: group_native(podgroup, pods, topologies, classes))
    return native_identity(pod, tree, pods, owner=(API_GROUP, "PodGroup", namespace, name))


def podgroup_priority(state: ServiceState, pod: Mapping) -> int | None:
    """The priority of the gang PodGroup a pod names, when the PodGroup sets one (spec.priority or its
    priorityClassName): a victim's priority as kube-scheduler's workload-aware preemption counts it."""
    name = scheduling_group(pod)
    if name is None:
        return None
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    podgroup = state.objects.get("PodGroup", namespace, name, group=API_GROUP)
    if podgroup is None or is_gate(podgroup):
        return None
    try:
        policy = policy_of(podgroup)
    except GroupingError:
        return None
    resolved = group_priority(policy, list(state.objects.list("PriorityClass"))) if policy.gang else None
    return resolved[0] if resolved is not None else None


def _tree_identity(state: ServiceState, pod: Mapping, workload: Mapping, versions: tuple) -> PodIdentity:
    """Several PodGroups of one Workload (several templates, or CompositePodGroups): one gang."""
    metadata = workload.get("metadata") or {}
    namespace, name = metadata.get("namespace") or "default", metadata.get("name") or ""
    podgroups = _of_workload(state, "PodGroup", namespace, name)
    composites = _of_workload(state, "CompositePodGroup", namespace, name)
    pods = _pods(state, namespace, [(g.get("metadata") or {}).get("name") for g in podgroups], pod)
    key = ("native-tree", _version(workload), tuple(_version(o) for o in [*podgroups, *composites]),
           tuple(sorted(_member(p) for p in pods)), versions)
    classes = list(state.objects.list("PriorityClass"))
    tree = state.identities.get(key, lambda: group_native_tree(name, namespace, podgroups, composites, pods,
                                                         state.cluster.topologies, classes))
    return native_identity(pod, tree, pods, owner=(API_GROUP, "Workload", namespace, name))


def _of_workload(state: ServiceState, kind: str, namespace: str, workload: str) -> list[Mapping]:
    found = [o for o in state.objects.list(kind, group=API_GROUP)
             if (o.get("metadata") or {}).get("namespace") == namespace and workload_name(o) == workload]
    return sorted(found, key=lambda o: (o.get("metadata") or {}).get("name") or "")


def _workload(state: ServiceState, podgroup: Mapping) -> Mapping | None:
    name = workload_name(podgroup)
    namespace = (podgroup.get("metadata") or {}).get("namespace") or "default"
    return state.objects.get("Workload", namespace, name, group=API_GROUP) if name else None


def _controller(state: ServiceState, pod: Mapping, workload: Mapping | None) -> Mapping | None:
    """The object our annotations sit on: the Workload's controllerRef, else the pod's controller."""
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    ref = controller_ref(workload) if workload is not None else None
    if ref is not None:
        return state.objects.get(ref[1], namespace, ref[2], group=ref[0])
    owner = owner_of(pod)
    if owner is None or owner.kind == "PodGroup":
        return None
    group = group_of(owner.api_version)
    return state.objects.get(owner.kind, owner.namespace, owner.name, group=group)


def _pods(state: ServiceState, namespace: str, groups: list, pod: Mapping) -> list[Mapping]:
    """The pods naming any of `groups` (from the watch and from requests), this one included."""
    own = pod_key(pod)
    found = [pod]
    for group in groups:
        found += [p for p in state.podgroup_pods.get((namespace, group), {}).values()
                  if scheduling_group(p) == group and pod_key(p) != own]
    return found


def _member(pod: Mapping) -> tuple:
    metadata = pod.get("metadata") or {}
    return (metadata.get("name") or "", metadata.get("uid"), metadata.get("generation"), scheduling_group(pod))


def problems(state: ServiceState) -> list[dict]:
    """Native objects we cannot place as asked, for /debug/plans: PodGroups with an invalid policy, a key no
    topology has or a minCount above the pods their workload can have; pods naming a missing PodGroup."""
    from grouper.native import possible_pods, problems as podgroup_problems

    found = []
    topologies = state.topologies
    for podgroup in state.objects.list("PodGroup", group=API_GROUP):
        metadata = podgroup.get("metadata") or {}
        controller = _controller_of_podgroup(state, podgroup)
        possible = possible_pods(controller) if controller is not None else None
        for problem in podgroup_problems(podgroup, topologies, possible):
            found.append({"podgroup": f"{metadata.get('namespace')}/{metadata.get('name')}", "problem": problem})
    for (namespace, group), pods in sorted(state.podgroup_pods.items()):
        named = sorted(key for key, p in pods.items() if scheduling_group(p) == group)
        if named and state.objects.get("PodGroup", namespace, group, group=API_GROUP) is None:
            found.append({"podgroup": f"{namespace}/{group}",
                          "problem": f"PodGroup {namespace}/{group} does not exist; {len(named)} pods name it in "
                                     f"spec.schedulingGroup.podGroupName ({', '.join(named[:5])}"
                                     f"{', ...' if len(named) > 5 else ''}) and wait for it"})
    return found


def _controller_of_podgroup(state: ServiceState, podgroup: Mapping) -> Mapping | None:
    workload = _workload(state, podgroup)
    ref = controller_ref(workload) if workload is not None else None
    if ref is None:
        refs = (podgroup.get("metadata") or {}).get("ownerReferences") or []
        owner = next((r for r in refs if r.get("controller")), None)
        if owner is None:
            return None
        api = str(owner.get("apiVersion") or "")
        ref = (group_of(api), owner.get("kind"), owner.get("name"))
    namespace = (podgroup.get("metadata") or {}).get("namespace") or "default"
    return state.objects.get(ref[1], namespace, ref[2], group=ref[0])


def other_domain(state: ServiceState, plan, key: str, node: str | None, candidates: Sequence[str]) -> str | None:
    """Why to refuse at once: with a native topology key, kube-scheduler tries the gang in one domain of the
    key after another, offering only that domain's nodes. When the candidates all lie in one domain and the
    gang is planned in another, this attempt is not ours: refused with where the gang is planned (the
    cycle then keeps the domain where every member passed). None when the planned node's own domain is
    offered (it is re-planned inside it at once) or the candidates span several domains."""
    found = _key_level(state, plan, key)
    if found is None or node is None:
        return None
    topology, level = found
    index = state.cluster.node_index
    owners = topology.node_domain[level]
    planned = _domain_of(owners, index, node)
    offered = _one_domain(owners, index, candidates)
    if planned < 0 or offered is None or offered == planned:
        return None
    return _elsewhere(plan.key, key, topology.domain_value(level, planned), topology.domain_value(level, offered))


def _key_level(state: ServiceState, plan, key: str):
    topology = state.cluster.topologies.get(plan.tree.topology or "")
    if topology is None:
        return None
    try:
        return topology, topology.level_index(key)
    except ValueError:
        return None


def _domain_of(owners, index: Mapping[str, int], name: str) -> int:
    i = index.get(name)
    return int(owners[i]) if i is not None else -1


def _one_domain(owners, index: Mapping[str, int], candidates: Sequence[str]) -> int | None:
    """The one domain every candidate lies in; None when they span several, or one lies in none."""
    offered = None
    for name in candidates:
        domain = _domain_of(owners, index, name)
        if domain < 0 or (offered is not None and domain != offered):
            return None
        offered = domain
    return offered


def _elsewhere(gang: str, key: str, planned: str, offered: str) -> str:
    return (f"gang {gang} is planned in {key}={planned}; this attempt offers {key}={offered}: refused at "
            f"once (kube-scheduler tries the gang's other domains in the same cycle)")


class OfferedDomains:
    """kube-scheduler calls the filter for every member of a keyed native gang in every domain with room
    (24 calls a pod for rack gangs on 256 nodes), and all but one domain get the same refusal. After the
    first, the others are answered here from what that one found (the gang's plan, its key's level and
    domain), without grouping or planning: while nothing changed (the state's generation and model),
    the plan is the same object, planned (not refused, not preempting) and not expired."""

    def __init__(self, state: ServiceState):
        self.state = state
        self._known: dict[tuple[str, str], tuple] = {}        # (namespace, PodGroup) -> what the answer needs

    def remember(self, pod: Mapping, plan, key: str, node: str) -> None:
        found = _key_level(self.state, plan, key)
        name = scheduling_group(pod)
        if found is None or name is None:
            return
        topology, level = found
        owners = topology.node_domain[level]
        planned = _domain_of(owners, self.state.cluster.node_index, node)
        if planned < 0:
            return
        if len(self._known) > 4096:
            self._known.clear()
        state = self.state
        self._known[((pod.get("metadata") or {}).get("namespace") or "default", name)] = (
            plan, state.generation, state.rebuilds, topology, level, planned, key)

    def refusal(self, pod: Mapping, candidates: Sequence[str]) -> tuple[str, str] | None:
        """(the gang, the refusal the full path would give this call), or None (then the full path answers).
        Call under the state lock."""
        name = scheduling_group(pod)
        if name is None or not self._known:
            return None
        known = self._known.get(((pod.get("metadata") or {}).get("namespace") or "default", name))
        if known is None:
            return None
        plan, generation, rebuilds, topology, level, planned, key = known
        state = self.state
        if state.generation != generation or state.rebuilds != rebuilds or state.stale \
                or state.plans.get(plan.key) is not plan or plan.status == GANG_REFUSED or plan.preemption \
                or (plan.expires is not None and plan.expires <= state.clock()):
            return None
        offered = _one_domain(topology.node_domain[level], state.cluster.node_index, candidates)
        if offered is None or offered == planned:
            return None
        return plan.key, _elsewhere(plan.key, key, topology.domain_value(level, planned),
                                    topology.domain_value(level, offered))
