"""Kubernetes objects from YAML or JSON text: a `kind: List`, multi-document YAML, or one object."""
from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import yaml

# libyaml's C parser when pyyaml was built with it (about ten times faster on large traces)
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

TOPOLOGY_KINDS = {
    ("kai.scheduler", "Topology"),
    ("kueue.x-k8s.io", "Topology"),
    ("topology.volcano.sh", "HyperNode"),
}


DRA_KINDS = ("DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate")


class ObjectsError(ValueError):
    """Text that does not hold Kubernetes objects."""


def yaml_error(err: yaml.YAMLError) -> str:
    """One line: where and what (`line 3, column 9: did not find expected ',' or ']' while parsing a flow
    sequence`), not PyYAML's four lines about `<unicode string>`."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None)
    if mark is None or not problem:
        return " ".join(str(err).split())
    context = getattr(err, "context", None)
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" + (f" {context}" if context else "")


def parse_objects(text: str) -> list[dict]:
    """Every object in the text, with `kind: List` / `*List` wrappers flattened."""
    documents: Iterable | None = None
    if text.lstrip().startswith(("{", "[")):          # JSON is the fast path; YAML flow style also starts so
        try:
            documents = [json.loads(text)]
        except json.JSONDecodeError:
            documents = None
        except RecursionError:
            raise ObjectsError("not valid JSON: nested too deeply") from None
    if documents is None:
        try:
            documents = list(yaml.load_all(text, Loader=YAML_LOADER))
        except yaml.YAMLError as err:
            raise ObjectsError(f"not valid YAML or JSON: {yaml_error(err)}") from err
        except RecursionError:
            raise ObjectsError("not valid YAML: nested too deeply") from None
    return list(_flatten(documents))


def _flatten(documents: Iterable) -> Iterator[dict]:
    for doc in documents:
        if doc is None:
            continue
        if isinstance(doc, list):
            yield from _flatten(doc)
        elif not isinstance(doc, dict):
            raise ObjectsError(f"expected a Kubernetes object (a mapping), got {type(doc).__name__}")
        elif str(doc.get("kind", "")).endswith("List") and "items" in doc:
            if not isinstance(doc["items"] or [], list):
                raise ObjectsError(f"a {doc['kind']}'s items must be a list of objects, got {doc['items']!r:.40}")
            yield from _flatten(doc["items"] or [])
        elif "kind" not in doc:
            raise ObjectsError(f"object without 'kind': {json.dumps(doc, default=str)[:120]}")
        elif not isinstance(doc["kind"], str) or not doc["kind"]:
            raise ObjectsError(f"object 'kind' must be a non-empty string (Node, Pod, Job, ...), got "
                               f"{doc['kind']!r:.40}: {json.dumps(doc, default=str)[:120]}")
        else:
            yield doc


def group_of(api_version: str) -> str:
    """The API group of an apiVersion (`batch/v1` -> `batch`, `v1` -> the core group, "")."""
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def api_group(obj: dict) -> str:
    """The API group of an object (its apiVersion's)."""
    return group_of(obj.get("apiVersion", "") or "")


def is_dra(obj: dict) -> bool:
    """A resource.k8s.io DeviceClass, ResourceSlice, ResourceClaim or ResourceClaimTemplate."""
    return api_group(obj) == "resource.k8s.io" and obj.get("kind") in DRA_KINDS


def is_topology(obj: dict) -> bool:
    return (api_group(obj), obj.get("kind")) in TOPOLOGY_KINDS


@dataclass
class ClusterObjects:
    """Objects sorted by what the cluster model does with them."""

    nodes: list[dict] = field(default_factory=list)
    pods: list[dict] = field(default_factory=list)
    topologies: list[dict] = field(default_factory=list)
    devices: list[dict] = field(default_factory=list)     # resource.k8s.io: classes, slices, claims, templates
    other: list[dict] = field(default_factory=list)

    @classmethod
    def from_objects(cls, objects: Iterable[dict]) -> "ClusterObjects":
        sorted_objects = cls()
        for obj in objects:
            kind = obj.get("kind")
            if kind == "Node":
                sorted_objects.nodes.append(obj)
            elif kind == "Pod":
                sorted_objects.pods.append(obj)
            elif is_topology(obj):
                sorted_objects.topologies.append(obj)
            elif is_dra(obj):
                sorted_objects.devices.append(obj)
            else:
                sorted_objects.other.append(obj)
        return sorted_objects

    @classmethod
    def from_text(cls, text: str) -> "ClusterObjects":
        return cls.from_objects(parse_objects(text))
