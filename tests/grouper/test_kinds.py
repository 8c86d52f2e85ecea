"""The registry of workload kinds (grouper/kinds/): lookups by Kind, the order pods look for their owner."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from grouper import owner_of
from grouper.kinds import KINDS, kind_named, kind_of, numbering_kinds, watched


def pod(labels=None, annotations=None, controller=None) -> dict:
    refs = [{"apiVersion": controller[0], "kind": controller[1], "name": controller[2], "uid": "u",
             "controller": True}] if controller else []
    return {"metadata": {"name": "p", "namespace": "ns", "labels": labels or {}, "annotations": annotations or {},
                         "ownerReferences": refs}}


def test_the_registry_finds_every_kind_file_in_owner_order():
    assert [k.name for k in KINDS] == ["jobset", "job", "kubeflow", "lws", "kai-podgroup", "podgroup", "statefulset"]


def test_every_watched_api_maps_back_to_its_kind():
    for workload_kind in KINDS:
        for api in workload_kind.watch:
            assert kind_of({"apiVersion": api.api_version, "kind": api.kind}) is workload_kind
    assert len({k.name for k in KINDS}) == len(KINDS)
    assert len(set(watched())) == len(watched())


def test_unregistered_kinds_are_generic_and_kinds_of_another_group_are_not_mistaken():
    assert kind_of({"apiVersion": "example.com/v1", "kind": "Trainer"}).name == "generic"
    assert kind_of({"apiVersion": "example.com/v1", "kind": "Job"}).name == "generic"
    assert kind_of({"apiVersion": "batch/v1", "kind": "Job"}).name == "job"
    assert kind_named("MPIJob").name == "kubeflow" and kind_named("Trainer") is None


@pytest.mark.parametrize("the_pod, owner", [
    # a JobSet's pods are its Jobs' pods too: the JobSet label wins over the Job controller
    (pod({"jobset.sigs.k8s.io/jobset-name": "js"}, controller=("batch/v1", "Job", "js-w-0")), ("JobSet", "js")),
    (pod({"leaderworkerset.sigs.k8s.io/name": "lws"}, controller=("apps/v1", "StatefulSet", "lws-0")),
     ("LeaderWorkerSet", "lws")),
    # a Job's pod in a hand-written KAI PodGroup belongs to the Job; a bare pod in one to the PodGroup
    (pod(annotations={"pod-group-name": "mine"}, controller=("batch/v1", "Job", "j")), ("Job", "j")),
    (pod(annotations={"pod-group-name": "mine"}), ("PodGroup", "mine")),
    (pod(annotations={"pod-group-name": "pg-web-1"}, controller=("apps/v1", "ReplicaSet", "web")),
     ("ReplicaSet", "web")),
    (pod({"scheduling.x-k8s.io/pod-group": "sp"}, controller=("apps/v1", "StatefulSet", "db")), ("PodGroup", "sp")),
    (pod(controller=("apps/v1", "StatefulSet", "db")), ("StatefulSet", "db")),
    (pod(), None),
])
def test_pods_look_for_their_owner_in_the_registry_order(the_pod, owner):
    found = owner_of(the_pod)
    assert (found.kind, found.name) == owner if owner else found is None


def test_the_webhook_lists_the_kinds_that_number_their_pods():
    assert numbering_kinds() == "Indexed batch/v1 Job, PyTorchJob, TFJob, JAXJob, XGBoostJob, MPIJob, LeaderWorkerSet"


# --- a kind's rules live in its file -------------------------------------------------------------------

PRODUCT = ("app", "grouper", "topology")
FAMILIES = {k.name for k in KINDS} | {"generic"}


def _kind_constant(node: ast.expr) -> bool:
    """A name such as LWS_KIND: a workload kind's Kind name held in a constant."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name.endswith("_KIND") and name not in ("POD_KIND", "NODE_KIND")


def _strings(node: ast.expr) -> list[str]:
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [item.value for item in items if isinstance(item, ast.Constant) and isinstance(item.value, str)]


def kind_branches(source: str) -> list[str]:
    """Where code tells workload kinds apart by family: `family_of(...)`, `.family`, or a comparison with a
    kind's name ("lws", "job", ...) or with a constant holding its Kind (LWS_KIND). Only grouper/kinds/
    may: elsewhere a kind's rules come from its WorkloadKind."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and node.id == "family_of" or isinstance(node, ast.Attribute) and \
                node.attr in ("family", "family_of"):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            named = [s for operand in operands for s in _strings(operand) if s in FAMILIES]
            if named or any(_kind_constant(operand) for operand in operands):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_outside_the_kind_files_branches_on_a_kind_family():
    root = Path(__file__).resolve().parents[2]
    kinds = root / "grouper" / "kinds"
    found = [f"{path.relative_to(root)} {where}" for package in PRODUCT for path in sorted((root / package).rglob("*.py"))
             if kinds not in path.parents for where in kind_branches(path.read_text())]
    assert not found, "move these rules into the kind's file (a WorkloadKind hook):\n" + "\n".join(found)


@pytest.mark.parametrize("source", [
    'if shape.family == "lws": pass',
    'x = family in ("job", "kubeflow")',
    'if family_of(workload) != "lws": pass',
    'y = "statefulset" != kind.name',
    'z = tree.kind == LWS_KIND',
])
def test_the_kind_branch_check_finds_a_family_comparison(source):
    assert kind_branches(source)


def test_the_kind_branch_check_passes_role_and_kind_hooks():
    assert not kind_branches('if role.name == "worker" and kind.exclusive_annotation: pass')
