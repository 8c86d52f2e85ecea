"""The k8s.io/kube-scheduler/extender/v1 wire types. Go marshals them without JSON tags, so every
field is PascalCase, nil slices and maps are `null`, and unknown fields are ignored."""
from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from ...state.objects import pod_shape_problem


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore")


def _readable_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """A core/v1 Pod the grouper can read: named, with fields of the right types."""
    problem = pod_shape_problem(pod, "Pod")
    if problem is None and not (pod.get("metadata") or {}).get("name"):
        problem = "Pod.metadata.name is required"
    if problem:
        raise ValueError(problem)
    return pod


WirePod = Annotated[dict[str, Any], AfterValidator(_readable_pod)]


def _named_nodes(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Node objects the filter can answer by name (the candidates are their metadata.name)."""
    for i, node in enumerate(items):
        metadata = node.get("metadata")
        if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str) or not metadata["name"]:
            raise ValueError(f"items[{i}].metadata.name is required (a non-empty string)")
    return items


class NodeList(_Wire):
    """A core/v1 NodeList; the node objects are kept as received (the filter answer echoes them)."""

    metadata: dict[str, Any] | None = None
    items: Annotated[list[dict[str, Any]], AfterValidator(_named_nodes)] = Field(default_factory=list)


class ExtenderArgs(_Wire):
    """Body of filter and prioritize. nodeCacheCapable: true sends NodeNames, false sends Nodes."""

    Pod: WirePod
    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None


class ExtenderFilterResult(_Wire):
    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None
    FailedNodes: dict[str, str] = Field(default_factory=dict)
    FailedAndUnresolvableNodes: dict[str, str] = Field(default_factory=dict)
    Error: str = ""


class HostPriority(_Wire):
    Host: str
    Score: int = Field(ge=0, le=10)


class ExtenderBindingArgs(_Wire):
    PodName: str
    PodNamespace: str
    PodUID: str
    Node: str


class ExtenderBindingResult(_Wire):
    Error: str = ""


class MetaPod(_Wire):
    UID: str


def _victims_with_uids(pods: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Victim pods as whole objects (nodeCacheCapable: false): the answer names each by metadata.uid."""
    for i, pod in enumerate(pods or []):
        metadata = pod.get("metadata")
        if not isinstance(metadata, dict) or not isinstance(metadata.get("uid"), str):
            raise ValueError(f"pods[{i}].metadata.uid is required (a string)")
    return pods


class Victims(_Wire):
    Pods: Annotated[list[dict[str, Any]] | None, AfterValidator(_victims_with_uids)] = None
    NumPDBViolations: int = 0


class MetaVictims(_Wire):
    Pods: list[MetaPod] | None = None
    NumPDBViolations: int = 0


class ExtenderPreemptionArgs(_Wire):
    Pod: WirePod
    NodeNameToVictims: dict[str, Victims] | None = None
    NodeNameToMetaVictims: dict[str, MetaVictims] | None = None


class ExtenderPreemptionResult(_Wire):
    NodeNameToMetaVictims: dict[str, MetaVictims] | None = None
