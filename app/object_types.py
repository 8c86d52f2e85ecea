"""The JSON types of the objects the API server would admit, to refuse hand-made objects naming the field.

A watch only delivers objects the API server validated; `POST /debug/objects` (standalone) gets whatever a
person wrote. `type_problem` checks the types of every field present (not required fields, not values)
against Kubernetes v1.36's OpenAPI schema for the built-in kinds, the Topology CRD this project ships for
KAI's Topology, and every pod template inside any other kind (kubeflow jobs, LWS, JobSet, PodGroups).

`object_types.json` holds only the type skeleton of those schemas (about 1% of them), made by `build` from
the `kubernetes-validate` package (a test dependency): `python -m app.object_types` writes it again, and
tests/test_object_types.py fails when it is stale.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path

FILE = Path(__file__).with_name("object_types.json")
KUBERNETES_VERSION = "1.36.0"
BUILT_IN = {          # apiVersion/kind -> schema file of kubernetes-validate
    "v1/Pod": "pod-v1", "v1/Node": "node-v1", "batch/v1/Job": "job-batch-v1",
    "apps/v1/StatefulSet": "statefulset-apps-v1", "apps/v1/ReplicaSet": "replicaset-apps-v1",
    "apps/v1/Deployment": "deployment-apps-v1", "apps/v1/DaemonSet": "daemonset-apps-v1",
    "scheduling.k8s.io/v1/PriorityClass": "priorityclass-scheduling-v1",
}
TEMPLATES = {"template": "podtemplatespec-v1", "jobtemplate": "jobtemplatespec-batch-v1"}
CRD = Path(__file__).resolve().parents[1] / "manifests" / "crd" / "topology-crd.yaml"
JSON_TYPES = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
              "object": (Mapping,), "array": (list,)}
NAMES = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "true or false",
         "object": "a map", "array": "a list"}


# ---- checking ---------------------------------------------------------------------------------------------

@cache
def _types() -> dict:
    return json.loads(FILE.read_text())


def type_problem(obj: Mapping) -> str | None:
    """The first field of `obj` whose JSON type the API server would refuse, named by its path; None if
    every field present has its type (unknown kinds: their identity, metadata and pod templates)."""
    if not isinstance(obj.get("kind"), str) or not obj.get("kind"):
        return f"object 'kind' must be a non-empty string, got {_shown(obj.get('kind'))}"
    if not isinstance(obj.get("apiVersion", ""), str):          # absent reads as v1 (a core kind)
        return f"{obj['kind']}: apiVersion must be a string, got {_shown(obj.get('apiVersion'))}"
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        return f"{obj['kind']}: metadata must be a map, got {_shown(metadata)}"
    where = f"{obj['kind']} {metadata.get('name')!s}"
    types = _types()
    schema = types["kinds"].get(f"{obj.get('apiVersion') or 'v1'}/{obj['kind']}")
    if schema is not None:
        problem = _check(obj, schema, "", types["defs"])
        return f"{where}: {problem}" if problem else None
    problem = _check(metadata, types["kinds"]["metadata"], "metadata", types["defs"])
    if problem:
        return f"{where}: {problem}"
    for path, kind, template in _templates(obj.get("spec"), "spec"):
        problem = _check(template, types["kinds"][kind], path, types["defs"])
        if problem:
            return f"{where}: {problem}"
    return None


def _templates(value, path: str):
    """Every pod template (a map whose `spec` has `containers`) and Job template (JobSet's replicated jobs)
    inside a custom kind's spec: (path, "template" or "jobtemplate", the template)."""
    if isinstance(value, Mapping):
        spec = value.get("spec")
        if isinstance(spec, Mapping) and "containers" in spec:
            yield path, "template", value
            return
        inner = spec.get("template") if isinstance(spec, Mapping) else None
        if isinstance(inner, Mapping) and isinstance(inner.get("spec"), Mapping) and "containers" in inner["spec"]:
            yield path, "jobtemplate", value
            return
        for key, item in value.items():
            yield from _templates(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _templates(item, f"{path}[{index}]")


def _check(value, node: dict, path: str, defs: dict) -> str | None:
    while "r" in node:
        node = defs[node["r"]]
    if value is None:                         # null is "unset" to the API server
        return None
    if "o" in node:
        if not any(_check(value, option, path, defs) is None for option in node["o"]):
            names = " or ".join(NAMES[t] for option in node["o"] for t in option.get("t", ()) if t in NAMES)
            return f"{path} must be {names}, got {_shown(value)}"
        return None
    allowed = [t for t in node.get("t", ()) if t in JSON_TYPES]
    if allowed and not any(isinstance(value, JSON_TYPES[t]) and not (isinstance(value, bool) and t != "boolean")
                           for t in allowed):
        return f"{path} must be {' or '.join(NAMES[t] for t in allowed)}, got {_shown(value)}"
    if isinstance(value, Mapping):
        properties, extra = node.get("p", {}), node.get("a")
        for key, item in value.items():
            child = properties.get(key, extra)
            if child is not None:
                problem = _check(item, child, _join(path, str(key)), defs)
                if problem:
                    return problem
    elif isinstance(value, list) and "i" in node:
        for index, item in enumerate(value):
            problem = _check(item, node["i"], f"{path}[{index}]", defs)
            if problem:
                return problem
    return None


def _join(path: str, key: str) -> str:
    if "." in key or "/" in key:
        return f'{path}["{key}"]'
    return f"{path}.{key}" if path else key


def _shown(value) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


# ---- building object_types.json from kubernetes-validate -------------------------------------------------

def build() -> dict:
    import kubernetes_validate          # a test dependency: only this generator needs it
    import yaml

    folder = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{KUBERNETES_VERSION}-local"
    definitions = json.loads((folder / "_definitions.json").read_text())["$defs"]
    defs: dict[str, dict] = {}

    def skeleton(node) -> dict:
        if not isinstance(node, Mapping):
            return {}
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[-1]
            if name not in defs:
                defs[name] = {}
                defs[name] = skeleton(definitions[name])
            return {"r": name}
        out: dict = {}
        kind = node.get("type")
        if kind is not None:
            out["t"] = sorted(t for t in ([kind] if isinstance(kind, str) else kind) if t != "null")
        options = node.get("oneOf") or node.get("anyOf")
        if options:
            out["o"] = [skeleton(option) for option in options]
        if isinstance(node.get("properties"), Mapping):
            out["p"] = {key: skeleton(child) for key, child in sorted(node["properties"].items())}
        if isinstance(node.get("items"), Mapping):
            out["i"] = skeleton(node["items"])
        if isinstance(node.get("additionalProperties"), Mapping):
            out["a"] = skeleton(node["additionalProperties"])
        for part in node.get("allOf") or ():
            out.update(skeleton(part))
        return out

    kinds = {key: skeleton(json.loads((folder / f"{name}.json").read_text()))
             for key, name in sorted(BUILT_IN.items())}
    for key, name in TEMPLATES.items():
        kinds[key] = skeleton(json.loads((folder / f"{name}.json").read_text()))
    kinds["metadata"] = {"r": "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
    skeleton({"$ref": "#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"})
    crd = yaml.safe_load(CRD.read_text())
    for version in crd["spec"]["versions"]:
        schema = dict(version["schema"]["openAPIV3Schema"])
        schema.setdefault("properties", {})
        schema["properties"] = {**schema["properties"],
                                "metadata": {"$ref": "#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}}
        kinds[f"{crd['spec']['group']}/{version['name']}/{crd['spec']['names']['kind']}"] = skeleton(schema)
    return {"kubernetes": KUBERNETES_VERSION, "kinds": kinds, "defs": dict(sorted(defs.items()))}


def render(types: dict) -> str:
    return json.dumps(types, separators=(",", ":"), sort_keys=True) + "\n"


if __name__ == "__main__":
    FILE.write_text(render(build()))
    print(f"wrote {FILE} ({FILE.stat().st_size:,} bytes)")
