"""Workload files and trace workloads -> gangs (group trees), through the service's own grouper.

A workload that does not opt in to gang or topology scheduling (no annotations) is still one gang of
all its pods here: the offline tools answer "would it fit" for every workload.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from grouper import GroupingError, expand_pods, group_podgroup, group_workload, podgroup_name
from grouper import names
from grouper.errors import describe
from grouper.kinds import workload_shape
from grouper.podgroups import leaf_pods
from topology.groups import GroupTree, Slot
from topology.objects import ObjectsError, parse_objects
from topology.tree import TopologyTree

from ..files import read_text
from .gangs import plain_gang

SUPPORTED = ("Job, PyTorchJob, TFJob, MPIJob, JAXJob, XGBoostJob, LeaderWorkerSet, "
             "or a PodGroup with its Pods")
NOT_WORKLOADS = {"Node", "Topology", "HyperNode"}
IGNORED_KINDS = {"ConfigMap", "Secret", "Service", "ServiceAccount", "Namespace", "PodGroupList"}


class WorkloadError(ValueError):
    """A workload that cannot become a gang; the message names the object and the field."""


def gangs_of(workload: Mapping, topologies: Mapping[str, TopologyTree] | None) -> list[GroupTree]:
    """The gang(s) of a workload: the grouper's trees, or one plain gang per pod group when the
    workload carries no gang or topology settings."""
    if workload.get("kind") == "Pod" and isinstance(workload.get("spec"), Mapping):
        metadata = workload.get("metadata") or {}          # a bare pod (a trace's pod of no gang): one slot
        return [plain_gang(metadata.get("namespace") or "default", str(metadata.get("name")), "Pod",
                           [(Slot("pod", 0), workload["spec"])])]
    try:
        return group_workload(workload, topologies) or plain_gangs(workload)
    except GroupingError as err:
        raise WorkloadError(str(err)) from None


def plain_gangs(workload: Mapping) -> list[GroupTree]:
    """Every pod the controller creates (grouper.expand_pods), one gang per LeaderWorkerSet group."""
    pods = expand_pods(workload)
    shape = workload_shape(workload)
    slots = [Slot(role.name, index) for _ in range(shape.groups) for role in shape.roles
             for index in role.indexes()]
    if len(slots) != len(pods):
        raise GroupingError(f"{describe(workload)}: expanded {len(pods)} pods for {len(slots)} slots")
    metadata = workload.get("metadata") or {}
    per_group = len(slots) // shape.groups
    trees = []
    for group in range(shape.groups):
        members = range(group * per_group, (group + 1) * per_group)
        name = podgroup_name(workload, group if shape.kind.gangs is not None else None)
        trees.append(plain_gang(metadata.get("namespace") or "default", name, str(workload.get("kind")),
                                [(slots[i], pods[i]["spec"]) for i in members]))
    return trees


# --- workload files (tas-extender plan) --------------------------------------------------------------------

@dataclass
class FileGang:
    source: str                                     # the file it came from
    workload: str                                   # "PyTorchJob research/llm"
    tree: GroupTree
    bound: dict[Slot, str] = field(default_factory=dict)    # PodGroup pods already on a node
    bound_pods: list[dict] = field(default_factory=list)   # those pods (they hold capacity)


def load_workload_files(paths: Sequence[str], topologies: Mapping[str, TopologyTree] | None) -> list[FileGang]:
    """Every gang of the workload files, in file order. Raises WorkloadError naming the file."""
    objects: list[tuple[str, dict]] = []
    for path in paths:
        text = read_text(path, "workload file", WorkloadError)
        try:
            found = parse_objects(text)
        except ObjectsError as err:
            raise WorkloadError(f"workload file {path}: {err}") from None
        if not found:
            raise WorkloadError(f"workload file {path}: no objects found; expected {SUPPORTED}")
        objects += [(path, obj) for obj in found]
    podgroups = [(path, obj) for path, obj in objects if obj.get("kind") == "PodGroup"]
    pods = [(path, obj) for path, obj in objects if obj.get("kind") == "Pod"]
    gangs: list[FileGang] = []
    members = _pods_by_podgroup(podgroups, pods)
    for path, obj in objects:
        kind = obj.get("kind")
        if kind in IGNORED_KINDS or kind == "Pod":
            continue
        if kind in NOT_WORKLOADS:
            raise WorkloadError(f"workload file {path}: {describe(obj)} is not a workload; expected {SUPPORTED} "
                                f"(cluster objects go in --cluster)")
        try:
            if kind == "PodGroup":
                gangs.append(_podgroup_gang(path, obj, members[id(obj)], topologies))
            else:
                gangs += [FileGang(path, describe(obj), tree) for tree in gangs_of(obj, topologies)]
        except (WorkloadError, GroupingError) as err:
            raise WorkloadError(f"workload file {path}: {err}") from None
    if not gangs:
        raise WorkloadError(f"workload files {', '.join(paths)}: no workload found; expected {SUPPORTED}")
    return gangs


def _named_podgroup(pod: Mapping) -> str | None:
    metadata = pod.get("metadata") or {}
    return ((metadata.get("annotations") or {}).get(names.KAI_PODGROUP_ANNOTATION)
            or (metadata.get("labels") or {}).get(names.SP_PODGROUP_LABEL))


def _pods_by_podgroup(podgroups: list[tuple[str, dict]], pods: list[tuple[str, dict]]) -> dict[int, list[dict]]:
    """Pods join the PodGroup they name (annotation pod-group-name or label scheduling.x-k8s.io/pod-group);
    a pod naming none joins the only PodGroup of the files."""
    by_key = {(_namespace(pg), (pg.get("metadata") or {}).get("name")): pg for _, pg in podgroups}
    members: dict[int, list[dict]] = {id(pg): [] for _, pg in podgroups}
    for path, pod in pods:
        named = _named_podgroup(pod)
        if named is None and len(podgroups) == 1:
            members[id(podgroups[0][1])].append(pod)
            continue
        podgroup = by_key.get((_namespace(pod), named))
        if podgroup is None:
            what = (f"names PodGroup {named!r} (annotation {names.KAI_PODGROUP_ANNOTATION} or label "
                    f"{names.SP_PODGROUP_LABEL}), which is not in the workload files") if named else \
                (f"names no PodGroup; set annotation {names.KAI_PODGROUP_ANNOTATION} or label "
                 f"{names.SP_PODGROUP_LABEL}, or plan its workload ({SUPPORTED}) instead")
            raise WorkloadError(f"workload file {path}: {describe(pod)} {what}")
        members[id(podgroup)].append(pod)
    return members


def _namespace(obj: Mapping) -> str:
    return (obj.get("metadata") or {}).get("namespace") or "default"


def _podgroup_gang(path: str, podgroup: dict, pods: list[dict],
                   topologies: Mapping[str, TopologyTree] | None) -> FileGang:
    tree = group_podgroup(podgroup, pods, topologies)
    if not tree.slots():
        raise WorkloadError(f"{describe(podgroup)} has no pods in the workload files; add its Pods "
                            f"(annotation {names.KAI_PODGROUP_ANNOTATION}: {tree.name})")
    bound: dict[Slot, str] = {}
    bound_pods: list[dict] = []
    for leaf in (g for g in tree.groups() if g.is_leaf):
        for position, pod in enumerate(leaf_pods(leaf.name, pods, podgroup, tree)):
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                bound[Slot(leaf.name, position)] = node
                bound_pods.append(pod)
    return FileGang(path, describe(podgroup), tree, bound, bound_pods)
