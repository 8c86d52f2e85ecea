"""Reading a cluster description: a file (a `kubectl get -o yaml` dump) or the built-in demo."""
from __future__ import annotations

from grouper.exclusive import apart_owner
from topology.cluster import Cluster, pod_key
from topology.demo import demo_objects
from topology.objects import ClusterObjects

from .files import one_line, read_text
from .state.objects import pod_shape_problem


class ClusterFileError(ValueError):
    pass


def load_objects(path: str | None) -> ClusterObjects:
    """Objects of the cluster file, or of the demo cluster when path is None."""
    if path is None:
        return ClusterObjects.from_objects(demo_objects())
    text = read_text(path, "cluster file", ClusterFileError)
    try:
        objects = ClusterObjects.from_text(text)
    except ValueError as err:
        raise ClusterFileError(f"cluster file {path}: {one_line(err)}") from err
    for pod in objects.pods:
        named = isinstance(pod.get("metadata") or {}, dict)
        problem = pod_shape_problem(pod, f"Pod {pod_key(pod)}" if named else "Pod")
        if problem:
            raise ClusterFileError(f"cluster file {path}: {problem}")
    repeated = _repeated_name(objects)
    if repeated:
        raise ClusterFileError(f"cluster file {path}: {repeated} appears more than once; names must be unique "
                               f"(a Node by name, a Pod by namespace and name)")
    return objects


def _repeated_name(objects: ClusterObjects) -> str | None:
    """`Node 'n1'` or `Pod ns/p` when the file holds it twice (a concatenation of dumps, say): the model
    would count one node or pod twice."""
    seen: set[str] = set()
    for kind, obj in [("Node", node) for node in objects.nodes] + [("Pod", pod) for pod in objects.pods]:
        metadata = obj.get("metadata")
        if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str):
            continue                  # reported by the reader of that object, naming the field
        label = f"Node {metadata['name']!r}" if kind == "Node" else f"Pod {pod_key(obj)}"
        if label in seen:
            return label
        seen.add(label)
    return None


def load_cluster(path: str | None) -> Cluster:
    """The cluster of the file, its running pods of LeaderWorkerSet groups kept apart from exclusive gangs."""
    return cluster_of(load_objects(path), path)


def cluster_of(objects: ClusterObjects, path: str | None = None) -> Cluster:
    """The cluster model of objects read by load_objects (`path` names them in errors)."""
    try:
        cluster = Cluster.from_objects(objects)
    except (ValueError, KeyError) as err:
        raise ClusterFileError(f"cluster file {path or '(demo)'}: {one_line(err)}") from err
    for pod in objects.pods:
        gang = apart_owner(pod)
        if gang is not None and pod_key(pod) in cluster.pods:
            cluster.apart[pod_key(pod)] = gang
    return cluster
