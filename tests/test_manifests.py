"""The install pieces: manifests/, Dockerfile, docker-compose.yml and scripts/gen-webhook-cert.sh.

Every Kubernetes object is validated against the API schemas (kubernetes-validate, strict), and the names, ports
and paths that must agree across objects are cross-checked: Service -> container port -> --port, webhook ->
Service -> /mutate, scheduler config -> Service DNS name -> --url-prefix, RBAC -> what the service watches and
writes, TLS Secret -> mounts -> the certificate script.
"""
from __future__ import annotations

import base64
import copy
import fnmatch
import os
import re
import shutil
import stat
import subprocess
from functools import cache
from pathlib import Path
from urllib.parse import urlsplit

import jsonschema
import kubernetes_validate
import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from app.ports import WATCHED_KINDS

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = ROOT / "manifests"
BASE = MANIFESTS / "base"
CERT_MANAGER = MANIFESTS / "cert-manager"
CRD = MANIFESTS / "crd"
IMAGES = MANIFESTS / "images"
EXAMPLES = MANIFESTS / "examples"
SCRIPT = ROOT / "scripts" / "gen-webhook-cert.sh"
K8S_VERSION = "1.36"           # the schemas the manifests are validated against
OLDEST_SUPPORTED = (1, 30)     # the README's oldest cluster: the scheduler image may not be newer than it

# The `tas-extender serve` flags (fixed contract); each is also the environment variable TAS_<UPPER_SNAKE>.
FLAGS = {"host", "port", "url-prefix", "tls-cert", "tls-key", "kubeconfig", "in-cluster", "cluster",
         "reservation-ttl", "strategy", "log-level", "leader-elect", "lease-name", "lease-namespace",
         "scheduler-name", "set-scheduler-name", "preemption", "extra-kinds", "client-ca", "verbs-port",
         "insecure-verbs", "debug-port"}
FLAG_DEFAULTS = {"host": "0.0.0.0", "port": "8888", "url-prefix": "/scheduler", "lease-name": "tas-extender",
                 "scheduler-name": "tas-scheduler"}
EXTENDER_ROUTES = {"/scheduler/filter", "/scheduler/prioritize", "/scheduler/bind", "/scheduler/preempt"}
CUSTOM_GROUPS = {"kai.scheduler", "cert-manager.io"}     # no schema in kubernetes-validate: checked here


# --- loading -------------------------------------------------------------------------------------------------

def load_docs(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def kustomization(directory: Path) -> dict:
    return yaml.safe_load((directory / "kustomization.yaml").read_text())


def _merge(target: dict, patch: dict) -> None:
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def build(directory: Path) -> list[dict]:
    """What `kubectl kustomize` renders for the features these kustomizations use (resources, patch files)."""
    spec = kustomization(directory)
    docs: list[dict] = []
    for entry in spec.get("resources", []):
        path = (directory / entry).resolve()
        docs += build(path) if path.is_dir() else load_docs(path)
    for component in spec.get("components", []):
        _set_images(docs, kustomization((directory / component).resolve()).get("images", []))
    for patch in spec.get("patches", []):
        for patch_doc in load_docs(directory / patch["path"]):
            targets = [d for d in docs if d["kind"] == patch_doc["kind"]
                       and d["metadata"]["name"] == patch_doc["metadata"]["name"]]
            assert len(targets) == 1, f"patch {patch['path']} matches {len(targets)} objects"
            _merge(targets[0], {k: v for k, v in patch_doc.items() if k not in ("apiVersion", "kind")})
    return docs


def _set_images(docs: list[dict], images: list[dict]) -> None:
    """kustomize's `images:`: containers whose image is `name` (with or without a tag) get newName/newTag."""
    for doc in docs:
        template = ((doc.get("spec") or {}).get("template") or {}).get("spec") or {}
        for c in template.get("containers", []) + template.get("initContainers", []):
            name, _, tag = c["image"].partition(":")
            for image in images:
                if image["name"] == name:
                    c["image"] = f"{image.get('newName', name)}:{image.get('newTag', tag)}"


@cache
def _installed() -> tuple[dict, ...]:
    return tuple(build(MANIFESTS))


def installed() -> list[dict]:
    return copy.deepcopy(list(_installed()))


def get(docs: list[dict], kind: str, name: str, namespace: str | None = None) -> dict:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name
             and (namespace is None or d["metadata"].get("namespace") == namespace)]
    assert len(found) == 1, f"expected one {kind} {namespace or ''}/{name}, found {len(found)}"
    return found[0]


def every_manifest_document() -> list[tuple[str, dict]]:
    # install.yaml is the kustomize output of these (tests/test_install_file.py), not a source
    paths = sorted(p for p in MANIFESTS.rglob("*.yaml") if p.name not in ("kustomization.yaml", "install.yaml"))
    return [(f"{p.relative_to(MANIFESTS)}#{i}", doc) for p in paths for i, doc in enumerate(load_docs(p))]


def api_group(doc: dict) -> str:
    return doc["apiVersion"].rpartition("/")[0]


# --- the pieces the cross-checks compare -----------------------------------------------------------------------

def extender_deployment(docs: list[dict]) -> dict:
    return get(docs, "Deployment", "tas-extender")


def scheduler_deployment(docs: list[dict]) -> dict:
    return get(docs, "Deployment", "tas-scheduler")


def container(deployment: dict) -> dict:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def flag(args: list[str], name: str) -> str | None:
    """The value of --name in an argument list (`--name=value`, `--name value`, or "true" for a bare switch)."""
    for i, arg in enumerate(args):
        if arg == f"--{name}":
            following = args[i + 1] if i + 1 < len(args) else None
            return following if following is not None and not following.startswith("--") else "true"
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
    return None


def extender_flag(docs: list[dict], name: str) -> str | None:
    value = flag(container(extender_deployment(docs)).get("args", []), name)
    return value if value is not None else FLAG_DEFAULTS.get(name)


def container_port(deployment: dict, port) -> int:
    """A Service targetPort or probe port (number or name) resolved against the pod's container ports."""
    ports = container(deployment).get("ports", [])
    if isinstance(port, int):
        assert port in [p["containerPort"] for p in ports], f"port {port} is not a container port"
        return port
    named = [p["containerPort"] for p in ports if p.get("name") == port]
    assert named, f"no container port named {port!r}"
    return named[0]


def scheduler_config(docs: list[dict]) -> dict:
    deployment = scheduler_deployment(docs)
    config_path = flag(container(deployment)["command"], "config")
    source = volume_source_of(deployment, config_path)
    assert "configMap" in source, f"--config={config_path} is not in a ConfigMap volume"
    config_map = get(docs, "ConfigMap", source["configMap"]["name"], deployment["metadata"]["namespace"])
    return yaml.safe_load(config_map["data"][source["key"]])


def volume_source_of(deployment: dict, file_path: str) -> dict:
    """The volume behind a file path in the container, with the Secret/ConfigMap key that holds the file."""
    pod = deployment["spec"]["template"]["spec"]
    for mount in container(deployment).get("volumeMounts", []):
        directory = mount["mountPath"].rstrip("/") + "/"
        if file_path.startswith(directory):
            relative = file_path[len(directory):]
            volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
            source = volume.get("secret") or volume.get("configMap") or {}
            items = source.get("items")
            key = next((i["key"] for i in items if i["path"] == relative), None) if items else relative
            assert key is not None, f"{file_path} is not one of the projected items of volume {volume['name']}"
            return {**volume, "key": key}
    raise AssertionError(f"{file_path} is not under any volumeMount of {deployment['metadata']['name']}")


def service(docs: list[dict]) -> dict:
    return get(docs, "Service", "tas-extender")


def rules_of(docs: list[dict], kind: str, name: str, namespace: str | None = None) -> list[dict]:
    return get(docs, kind, name, namespace)["rules"]


def allows(rules: list[dict], group: str, resource: str, verb: str, name: str | None = None) -> bool:
    return any(group in rule.get("apiGroups", []) and resource in rule.get("resources", [])
               and verb in rule.get("verbs", [])
               and (not rule.get("resourceNames") or name in rule["resourceNames"])
               for rule in rules)


def roles_bound_to(docs: list[dict], account: str, namespace: str) -> list[tuple[str, str | None, str]]:
    """(roleRef kind, binding namespace, role name) for every binding whose subjects include the account."""
    found = []
    for binding in docs:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if any(s["kind"] == "ServiceAccount" and s["name"] == account and s["namespace"] == namespace
               for s in binding.get("subjects", [])):
            ref = binding["roleRef"]
            found.append((ref["kind"], binding["metadata"].get("namespace"), ref["name"]))
    return found


# --- kustomizations --------------------------------------------------------------------------------------------

def test_root_kustomization_installs_the_base():
    assert kustomization(MANIFESTS)["resources"] == ["base"]


def test_base_kustomization_lists_every_file_in_base():
    listed = kustomization(BASE)["resources"]
    on_disk = sorted(p.name for p in BASE.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(listed) == on_disk
    assert len(listed) == len(set(listed))


def test_cert_manager_overlay_lists_every_file_in_its_directory():
    spec = kustomization(CERT_MANAGER)
    local = [r for r in spec["resources"] if not r.startswith("..")] + [p["path"] for p in spec["patches"]]
    on_disk = sorted(p.name for p in CERT_MANAGER.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(local) == on_disk
    assert "../base" in spec["resources"]


def test_examples_stay_out_of_the_install():
    """A Topology cannot be applied in the same apply as its CRD, so examples are applied separately."""
    installed_kinds = {(d["kind"], d["metadata"]["name"]) for d in installed()}
    for path in EXAMPLES.glob("*.yaml"):
        for doc in load_docs(path):
            assert (doc["kind"], doc["metadata"]["name"]) not in installed_kinds


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
@pytest.mark.parametrize("directory", [MANIFESTS, CERT_MANAGER], ids=["base", "cert-manager"])
def test_kubectl_kustomize_renders_what_the_tests_check(directory):
    rendered = subprocess.run(["kubectl", "kustomize", str(directory)], capture_output=True, text=True,
                              check=True).stdout
    key = lambda d: (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])  # noqa: E731
    by_kubectl = sorted((d for d in yaml.safe_load_all(rendered) if d), key=key)
    assert by_kubectl == sorted(build(directory), key=key)


# --- schemas -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("where,doc", [(w, d) for w, d in every_manifest_document() if api_group(d) not in CUSTOM_GROUPS],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_every_manifest_validates_against_the_kubernetes_schema(where, doc):
    assert kubernetes_validate.validate(doc, K8S_VERSION, strict=True) == K8S_VERSION


def test_schema_validation_catches_mistakes():
    """The validation above is strict enough to fail: a wrong type and an unknown field are both rejected."""
    deployment = extender_deployment(installed())
    container(deployment)["ports"][0]["containerPort"] = "eight-thousand"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)
    webhook = get(installed(), "MutatingWebhookConfiguration", "tas-extender")
    webhook["webhooks"][0]["failurePolicyy"] = "Fail"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(webhook, K8S_VERSION, strict=True)


def test_only_known_custom_kinds_bypass_the_schema_check():
    """Topology (its CRD schema), Issuer and Certificate are checked by their own tests below."""
    skipped = {(api_group(doc), doc["kind"]) for _, doc in every_manifest_document()
               if api_group(doc) in CUSTOM_GROUPS}
    assert skipped == {("kai.scheduler", "Topology"), ("cert-manager.io", "Issuer"),
                       ("cert-manager.io", "Certificate")}


# --- the Topology CRD and the example ------------------------------------------------------------------------------

def topology_crd() -> dict:
    return get(build(CRD), "CustomResourceDefinition", "topologies.kai.scheduler")


def test_uninstall_leaves_the_topology_crd_and_every_topology():
    """KAI-Scheduler ships the same CRD: `kubectl delete -k manifests/` (or cert-manager/) must not delete
    it, and installing must not replace it. The CRD is its own kustomization, created only where missing."""
    for directory in (MANIFESTS, CERT_MANAGER):
        assert not [d for d in build(directory) if d["kind"] == "CustomResourceDefinition"], directory
    assert [(d["kind"], d["metadata"]["name"]) for d in build(CRD)] == [
        ("CustomResourceDefinition", "topologies.kai.scheduler")]


def test_images_are_one_setting_for_both_installs():
    """The images component is the one place to set them; the scheduler defaults to the oldest supported
    cluster (a kube-scheduler may not be newer than its API server)."""
    images = {i["name"]: i for i in kustomization(IMAGES)["images"]}
    assert kustomization(IMAGES)["kind"] == "Component"
    assert kustomization(MANIFESTS)["components"] == ["images"]
    assert kustomization(CERT_MANAGER)["components"] == ["../images"]
    tag = images["registry.k8s.io/kube-scheduler"]["newTag"]
    major, minor = map(int, re.fullmatch(r"v(\d+)\.(\d+)\.\d+", tag).groups())
    assert (major, minor) == OLDEST_SUPPORTED
    for directory in (MANIFESTS, CERT_MANAGER):
        docs = build(directory)
        assert container(scheduler_deployment(docs))["image"] == f"registry.k8s.io/kube-scheduler:{tag}"
        assert container(extender_deployment(docs))["image"] == \
            f"{images['tas-extender']['newName']}:{images['tas-extender']['newTag']}"
    base = yaml.safe_load((BASE / "scheduler-deployment.yaml").read_text())
    assert ":" not in container(base)["image"], "the tag belongs in images/kustomization.yaml only"


def topology_schema() -> dict:
    (version,) = topology_crd()["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def example_topology() -> dict:
    (doc,) = load_docs(EXAMPLES / "topology.yaml")
    return doc


def test_topology_crd_matches_kai_schedulers():
    crd = topology_crd()["spec"]
    assert crd["group"] == "kai.scheduler" and crd["scope"] == "Cluster"
    assert crd["names"]["kind"] == "Topology" and crd["names"]["plural"] == "topologies"
    (version,) = crd["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    levels = topology_schema()["properties"]["spec"]["properties"]["levels"]
    assert topology_schema()["required"] == ["spec"]
    assert topology_schema()["properties"]["spec"]["required"] == ["levels"]
    assert (levels["minItems"], levels["maxItems"]) == (1, 16)
    item = levels["items"]
    assert item["required"] == ["nodeLabel"]
    node_label = item["properties"]["nodeLabel"]
    # The same constraints as KAI Scheduler's CRD, so every KAI Topology is accepted here.
    assert (node_label["minLength"], node_label["maxLength"]) == (1, 316)
    assert node_label["pattern"] == (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                                     r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$")
    assert set(item["properties"]) == {"nodeLabel", "alias"}
    assert {w["rule"] for w in levels["x-kubernetes-validations"]} >= {"self == oldSelf"}


def test_topology_crd_is_watched_by_the_service():
    crd = topology_crd()["spec"]
    watched = {(k.group, k.version, k.plural, k.namespaced) for k in WATCHED_KINDS}
    assert (crd["group"], crd["versions"][0]["name"], crd["names"]["plural"], False) in watched


def test_example_topology_is_valid_under_the_crd_schema():
    jsonschema.Draft202012Validator(topology_schema()).validate(example_topology())


@pytest.mark.parametrize("levels,why", [
    ([], "no level"),
    ([{"alias": "rack"}], "a level without nodeLabel"),
    ([{"nodeLabel": "Not A Label!"}], "a nodeLabel that is not a label key"),
    ([{"nodeLabel": "network.example.com/rack", "alias": "Rack_1"}], "an alias that is not a DNS label"),
    ([{"nodeLabel": f"example.com/l{i}"} for i in range(17)], "17 levels"),
    ([{"nodeLabel": "kubernetes.io/hostname", "weight": 3}], "an unknown field"),
])
def test_crd_schema_rejects_bad_topologies(levels, why):
    bad = {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "bad"},
           "spec": {"levels": levels}}
    schema = copy.deepcopy(topology_schema())
    # The API server prunes unknown fields; here they are rejected so the test sees them.
    schema["properties"]["spec"]["properties"]["levels"]["items"]["additionalProperties"] = False
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate(bad)


def test_example_topology_obeys_the_crd_rules_and_builds_the_demo_tree():
    from topology import demo
    from topology.nodes import NodeInfo
    from topology.sources import tree_from_labels

    levels = example_topology()["spec"]["levels"]
    labels = [level["nodeLabel"] for level in levels]
    aliases = [level["alias"] for level in levels]
    assert len(set(labels)) == len(labels) and len(set(aliases)) == len(aliases)
    assert labels[-1] == "kubernetes.io/hostname"
    assert labels == [demo.ZONE_LABEL, demo.BLOCK_LABEL, demo.RACK_LABEL, demo.HOST_LABEL]
    nodes = [NodeInfo.from_object(o) for o in demo.demo_objects() if o["kind"] == "Node"]
    tree = tree_from_labels(example_topology(), nodes)
    assert not tree.excluded
    assert [level.display for level in tree.levels] == ["zone", "block", "rack", "host"]
    racks = {(n.labels[demo.ZONE_LABEL], n.labels[demo.BLOCK_LABEL], n.labels[demo.RACK_LABEL]) for n in nodes}
    assert tree.domain_count(tree.level_index("rack")) == len(racks)


# --- the extender Deployment and Service -------------------------------------------------------------------------

def test_extender_runs_two_replicas_with_leader_election():
    docs = installed()
    deployment = extender_deployment(docs)
    assert deployment["spec"]["replicas"] == 2
    assert extender_flag(docs, "leader-elect") == "true"
    assert extender_flag(docs, "in-cluster") == "true"
    env = {e["name"]: e for e in container(deployment)["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    # The standby is never Ready: the rollout must be allowed to replace both pods at once.
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == "100%"
    assert not [d for d in docs if d["kind"] == "PodDisruptionBudget"]


def test_a_leader_handing_over_is_stopped_within_the_pods_grace_period():
    """The old leader answers until a successor holds the Lease (--handover-timeout) and --handover-drain more;
    the kubelet's SIGKILL must not cut that short, and a request in flight (--request-timeout) still ends."""
    from app.settings import Settings
    docs = installed()
    fields = Settings.model_fields

    def seconds(name: str) -> float:
        value = extender_flag(docs, name.replace("_", "-"))
        return float(value) if value is not None else fields[name].default

    grace = extender_deployment(docs)["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert seconds("handover_timeout") + seconds("handover_drain") + seconds("request_timeout") <= grace


def test_extender_probes_use_the_health_endpoints_on_the_serving_port():
    deployment = extender_deployment(installed())
    c = container(deployment)
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    port = int(extender_flag(installed(), "port"))
    for probe in (c["readinessProbe"], c["livenessProbe"]):
        assert container_port(deployment, probe["httpGet"]["port"]) == port
        assert probe["httpGet"]["scheme"] == "HTTPS"      # the service serves TLS when --tls-cert is set


def test_service_routes_to_the_extender_port():
    docs = installed()
    svc, deployment = service(docs), extender_deployment(docs)
    assert svc["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    scheduler_labels = scheduler_deployment(docs)["spec"]["template"]["metadata"]["labels"]
    assert not svc["spec"]["selector"].items() <= scheduler_labels.items()
    assert not svc["spec"].get("publishNotReadyAddresses")        # only the Ready leader gets traffic
    ports = {p["name"]: p for p in svc["spec"]["ports"]}
    assert set(ports) == {"https", "verbs"}
    assert ports["https"]["port"] == 443           # the webhook's default port
    assert container_port(deployment, ports["https"]["targetPort"]) == int(extender_flag(docs, "port"))
    assert container_port(deployment, ports["verbs"]["targetPort"]) == int(extender_flag(docs, "verbs-port"))


def test_extender_mounts_its_tls_pair_from_the_secret():
    docs = installed()
    deployment = extender_deployment(docs)
    cert, key = extender_flag(docs, "tls-cert"), extender_flag(docs, "tls-key")
    cert_source, key_source = volume_source_of(deployment, cert), volume_source_of(deployment, key)
    assert cert_source["secret"]["secretName"] == key_source["secret"]["secretName"] == "tas-extender-tls"
    assert (cert_source["key"], key_source["key"]) == ("tls.crt", "tls.key")


def test_extender_flags_are_the_services_flags():
    args = container(extender_deployment(installed()))["args"]
    names = [a[2:].split("=", 1)[0] for a in args if a.startswith("--")]
    assert set(names) <= FLAGS, f"unknown flags {set(names) - FLAGS}"
    assert all(a.startswith("--") for a in args), "the entrypoint is `tas-extender serve`: args are flags only"


def test_extender_flags_build_valid_settings():
    settings_module = pytest.importorskip("app.settings")
    args = container(extender_deployment(installed()))["args"]
    values = {}
    for arg in args:
        name, _, value = arg[2:].partition("=")
        values[name.replace("-", "_")] = value if value else True
    parsed = settings_module.Settings(**values)
    assert parsed.port == 8888 and parsed.url_prefix == "/scheduler" and parsed.leader_elect
    assert parsed.mode == "kubernetes"


def test_extender_args_parse_with_the_cli():
    from app.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    if "serve" not in commands:
        pytest.skip("the serve command is not registered yet")
    args = container(extender_deployment(installed()))["args"]
    parsed = parser.parse_args(["serve", *args])      # an unknown flag exits with an error
    serve = pytest.importorskip("app.commands.serve")
    if not hasattr(serve, "settings_from"):
        pytest.skip("the serve command builds its settings differently")
    effective = serve.settings_from(parsed)
    assert (effective.port, effective.url_prefix, effective.scheduler_name) == (8888, "/scheduler", "tas-scheduler")
    assert effective.leader_elect and effective.in_cluster and effective.mode == "kubernetes"
    assert (effective.tls_cert, effective.tls_key) == (extender_flag(installed(), "tls-cert"),
                                                       extender_flag(installed(), "tls-key"))


# --- pod security --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["tas-extender", "tas-scheduler"])
def test_deployments_meet_the_restricted_pod_security_standard(name):
    docs = installed()
    deployment = get(docs, "Deployment", name)
    pod = deployment["spec"]["template"]["spec"]
    namespace = get(docs, "Namespace", deployment["metadata"]["namespace"])
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert not any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    for volume in pod["volumes"]:
        assert set(volume) - {"name"} <= {"configMap", "secret", "emptyDir", "projected", "downwardAPI"}
    for c in pod["containers"]:
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"]["drop"] == ["ALL"] and not sc["capabilities"].get("add")
        assert sc["seccompProfile"]["type"] == "RuntimeDefault"
        assert {"cpu", "memory"} <= set(c["resources"]["requests"])
        assert "memory" in c["resources"]["limits"]


def test_extender_runs_as_the_image_user():
    pod = extender_deployment(installed())["spec"]["template"]["spec"]
    assert f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}" == dockerfile()["USER"]


# --- RBAC ----------------------------------------------------------------------------------------------------------

EXTENDER_WRITES = {("", "pods/binding", "create"), ("", "pods", "patch"), ("", "pods/eviction", "create"),
                   ("", "events", "create"), ("", "events", "patch"),
                   ("scheduling.k8s.io", "podgroups", "create")}      # the native gate (app.kube.native_gate)


def extender_cluster_rules(docs: list[dict]) -> list[dict]:
    account = extender_deployment(docs)["spec"]["template"]["spec"]["serviceAccountName"]
    namespace = extender_deployment(docs)["metadata"]["namespace"]
    cluster_roles = [name for kind, _, name in roles_bound_to(docs, account, namespace) if kind == "ClusterRole"]
    assert cluster_roles == ["tas-extender"]
    return rules_of(docs, "ClusterRole", "tas-extender")


def granted(rules: list[dict]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}


def test_extender_can_read_every_watched_kind():
    rules = extender_cluster_rules(installed())
    for kind in WATCHED_KINDS:
        for verb in ("get", "list", "watch"):
            assert allows(rules, kind.group, kind.plural, verb), f"cannot {verb} {kind.plural}.{kind.group}"


def test_every_registered_workload_kind_has_its_rbac_line():
    """Adding a kind is one file in grouper/kinds/ plus its ClusterRole line: the registry is what is watched."""
    from grouper.kinds import KINDS
    rules = extender_cluster_rules(installed())
    for workload_kind in KINDS:
        for api in workload_kind.watch:
            assert api in WATCHED_KINDS
            for verb in ("get", "list", "watch"):
                assert allows(rules, api.group, api.plural, verb), \
                    f"{workload_kind.name}: the ClusterRole cannot {verb} {api.plural}.{api.group}"


DRA_RESOURCES = ("deviceclasses", "resourceslices", "resourceclaims", "resourceclaimtemplates")
DRA_READS = {("resource.k8s.io", plural, verb) for plural in DRA_RESOURCES for verb in ("get", "list", "watch")}


def test_extender_can_read_every_dra_kind():
    """Issue 38: the shipped ClusterRole could not list resourceslices, resourceclaims or deviceclasses (403)."""
    rules = extender_cluster_rules(installed())
    for group, plural, verb in DRA_READS:
        assert allows(rules, group, plural, verb), f"cannot {verb} {plural}.{group}"


@pytest.mark.xfail(not any(k.group == "resource.k8s.io" for k in WATCHED_KINDS), strict=True,
                   reason="the DRA kinds join app/ports.py with branch dra-core (issue 38)")
def test_every_dra_kind_is_watched():
    watched = {(k.group, k.plural) for k in WATCHED_KINDS}
    assert {(group, plural) for group, plural, _ in DRA_READS} <= watched


def test_extender_can_bind_annotate_evict_and_record_events():
    rules = extender_cluster_rules(installed())
    for group, resource, verb in EXTENDER_WRITES:
        assert allows(rules, group, resource, verb), f"cannot {verb} {resource}"


def test_extender_cluster_role_grants_nothing_else():
    rules = extender_cluster_rules(installed())
    reads = {(k.group, k.plural, v) for k in WATCHED_KINDS for v in ("get", "list", "watch")}
    assert granted(rules) == reads | DRA_READS | EXTENDER_WRITES
    assert not any("*" in rule[field] for rule in rules for field in ("apiGroups", "resources", "verbs"))
    assert not any(rule.get("resourceNames") or rule.get("nonResourceURLs") for rule in rules)


def test_extender_leader_lease_role_is_namespaced_and_named():
    docs = installed()
    deployment = extender_deployment(docs)
    namespace = deployment["metadata"]["namespace"]
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    roles = [(ns, name) for kind, ns, name in roles_bound_to(docs, account, namespace) if kind == "Role"]
    assert roles == [(namespace, "tas-extender-leader-election")]
    rules = rules_of(docs, "Role", "tas-extender-leader-election", namespace)
    lease = extender_flag(docs, "lease-name")
    assert allows(rules, "coordination.k8s.io", "leases", "create")
    for verb in ("get", "update"):
        assert allows(rules, "coordination.k8s.io", "leases", verb, lease)
        assert not allows(rules, "coordination.k8s.io", "leases", verb, "some-other-lease")
    assert granted(rules) == {("coordination.k8s.io", "leases", v) for v in ("create", "get", "update")}


def test_scheduler_has_the_kube_scheduler_roles_and_its_own_lease():
    docs = installed()
    deployment = scheduler_deployment(docs)
    namespace = deployment["metadata"]["namespace"]
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    get(docs, "ServiceAccount", account, namespace)
    bound = set(roles_bound_to(docs, account, namespace))
    assert ("ClusterRole", None, "system:kube-scheduler") in bound
    assert ("ClusterRole", None, "system:volume-scheduler") in bound
    assert ("Role", "kube-system", "extension-apiserver-authentication-reader") in bound
    election = scheduler_config(docs)["leaderElection"]
    assert election["leaderElect"] is True and election["resourceLock"] == "leases"
    assert "resourceNamespace" not in election         # the pod's own namespace, from the flag
    assert flag(container(deployment)["command"], "leader-elect-resource-namespace") == "$(POD_NAMESPACE)"
    (env,) = [e for e in container(deployment)["env"] if e["name"] == "POD_NAMESPACE"]
    assert env["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    lease_roles = [name for kind, ns, name in bound if kind == "Role" and ns == namespace]
    assert len(lease_roles) == 1
    rules = rules_of(docs, "Role", lease_roles[0], namespace)
    for verb in ("get", "update"):
        assert allows(rules, "coordination.k8s.io", "leases", verb, election["resourceName"])
    assert allows(rules, "coordination.k8s.io", "leases", "create")


def test_every_binding_subject_and_role_exists():
    docs = installed()
    accounts = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs if d["kind"] == "ServiceAccount"}
    builtin = {"system:kube-scheduler", "system:volume-scheduler", "extension-apiserver-authentication-reader"}
    for binding in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        for subject in binding["subjects"]:
            assert (subject["namespace"], subject["name"]) in accounts
        ref = binding["roleRef"]
        if ref["name"] not in builtin:
            get(docs, ref["kind"], ref["name"], binding["metadata"].get("namespace"))


# --- the webhook ---------------------------------------------------------------------------------------------------

def webhook_entry(docs: list[dict]) -> dict:
    (entry,) = get(docs, "MutatingWebhookConfiguration", "tas-extender")["webhooks"]
    return entry


def test_webhook_calls_mutate_on_the_service():
    docs = installed()
    entry, svc = webhook_entry(docs), service(docs)
    target = entry["clientConfig"]["service"]
    assert (target["name"], target["namespace"]) == (svc["metadata"]["name"], svc["metadata"]["namespace"])
    assert target["path"] == "/mutate"
    assert target.get("port", 443) in [p["port"] for p in svc["spec"]["ports"]]
    assert "url" not in entry["clientConfig"]
    assert "caBundle" not in entry["clientConfig"]     # written on the live object; apply must not clear it


def test_webhook_admission_settings():
    entry = webhook_entry(installed())
    assert entry["sideEffects"] == "None"
    assert entry["admissionReviewVersions"] == ["v1"]
    assert entry["reinvocationPolicy"] == "IfNeeded"
    assert entry["failurePolicy"] == "Ignore"
    assert 1 <= entry["timeoutSeconds"] <= 5
    (rule,) = entry["rules"]
    assert rule["operations"] == ["CREATE"] and rule["apiGroups"] == [""] and rule["resources"] == ["pods"]


def test_webhook_skips_kube_system_and_its_own_namespace():
    docs = installed()
    (expression,) = webhook_entry(docs)["namespaceSelector"]["matchExpressions"]
    assert expression["key"] == "kubernetes.io/metadata.name" and expression["operator"] == "NotIn"
    own = extender_deployment(docs)["metadata"]["namespace"]
    assert set(expression["values"]) == {"kube-system", own}


# --- the scheduler configuration -----------------------------------------------------------------------------------

DURATION = {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"}


def _closed(properties: dict, required: tuple = ()) -> dict:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


PLUGIN_SET = _closed({"enabled": {"type": "array"}, "disabled": {"type": "array"}})
# kube-scheduler decodes its config strictly: these are the field names of kubescheduler.config.k8s.io/v1.
KUBE_SCHEDULER_CONFIGURATION = _closed({
    "apiVersion": {"const": "kubescheduler.config.k8s.io/v1"},
    "kind": {"const": "KubeSchedulerConfiguration"},
    "parallelism": {"type": "integer", "minimum": 1},
    "leaderElection": _closed({
        "leaderElect": {"type": "boolean"}, "leaseDuration": DURATION, "renewDeadline": DURATION,
        "retryPeriod": DURATION, "resourceLock": {"enum": ["leases"]}, "resourceName": {"type": "string"},
        "resourceNamespace": {"type": "string"}}),
    "clientConnection": _closed({
        "kubeconfig": {"type": "string"}, "acceptContentTypes": {"type": "string"},
        "contentType": {"type": "string"}, "qps": {"type": "number"}, "burst": {"type": "integer"}}),
    "enableProfiling": {"type": "boolean"},
    "enableContentionProfiling": {"type": "boolean"},
    "percentageOfNodesToScore": {"type": "integer", "minimum": 0, "maximum": 100},
    "podInitialBackoffSeconds": {"type": "integer", "minimum": 1},
    "podMaxBackoffSeconds": {"type": "integer", "minimum": 1},
    "delayCacheUntilActive": {"type": "boolean"},
    "profiles": {"type": "array", "minItems": 1, "items": _closed({
        "schedulerName": {"type": "string"},
        "percentageOfNodesToScore": {"type": "integer", "minimum": 0, "maximum": 100},
        "plugins": {"type": "object", "additionalProperties": PLUGIN_SET},
        "pluginConfig": {"type": "array"}})},
    "extenders": {"type": "array", "items": _closed({
        "urlPrefix": {"type": "string"}, "filterVerb": {"type": "string"}, "preemptVerb": {"type": "string"},
        "prioritizeVerb": {"type": "string"}, "weight": {"type": "integer", "minimum": 1},
        "bindVerb": {"type": "string"}, "enableHTTPS": {"type": "boolean"},
        "tlsConfig": _closed({
            "insecure": {"type": "boolean"}, "serverName": {"type": "string"}, "certFile": {"type": "string"},
            "keyFile": {"type": "string"}, "caFile": {"type": "string"}, "certData": {"type": "string"},
            "keyData": {"type": "string"}, "caData": {"type": "string"}}),
        "httpTimeout": DURATION, "nodeCacheCapable": {"type": "boolean"},
        "managedResources": {"type": "array", "items": _closed(
            {"name": {"type": "string"}, "ignoredByScheduler": {"type": "boolean"}}, ("name",))},
        "ignorable": {"type": "boolean"}}, ("urlPrefix",))},
}, ("apiVersion", "kind"))


def extender_entry(config: dict) -> dict:
    (extender,) = config["extenders"]
    return extender


def test_scheduler_config_uses_only_kube_scheduler_v1_fields():
    jsonschema.Draft202012Validator(KUBE_SCHEDULER_CONFIGURATION).validate(scheduler_config(installed()))


def test_scheduler_config_field_check_catches_a_typo():
    config = scheduler_config(installed())
    extender_entry(config)["nodeCacheCapabel"] = True
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(KUBE_SCHEDULER_CONFIGURATION).validate(config)


def test_scheduler_profile_is_the_extenders_scheduler_name():
    docs = installed()
    (profile,) = scheduler_config(docs)["profiles"]
    assert profile["schedulerName"] == extender_flag(docs, "scheduler-name") == "tas-scheduler"
    assert profile.get("percentageOfNodesToScore", scheduler_config(docs).get("percentageOfNodesToScore")) == 100


def test_scheduler_reaches_the_extender_through_the_service():
    docs = installed()
    extender, svc = extender_entry(scheduler_config(docs)), service(docs)
    url = urlsplit(extender["urlPrefix"])
    assert url.scheme == "https" and extender["enableHTTPS"] is True
    # the Service's short name, resolved in the scheduler's own namespace: the config names no namespace
    assert url.hostname == svc["metadata"]["name"]
    assert scheduler_deployment(docs)["metadata"]["namespace"] == svc["metadata"]["namespace"]
    assert "hostNetwork" not in scheduler_deployment(docs)["spec"]["template"]["spec"]   # the cluster's DNS search
    (port,) = [p for p in svc["spec"]["ports"] if p["port"] == (url.port or 443)]
    # the verbs port, which requires a client certificate; never the webhook's port
    assert container_port(extender_deployment(docs), port["targetPort"]) == int(extender_flag(docs, "verbs-port"))
    assert int(extender_flag(docs, "verbs-port")) != int(extender_flag(docs, "port"))
    assert url.path == extender_flag(docs, "url-prefix")
    verbs = [extender[k] for k in ("filterVerb", "prioritizeVerb", "bindVerb", "preemptVerb")]
    assert {f"{url.path}/{verb}" for verb in verbs} == EXTENDER_ROUTES


def test_scheduler_extender_settings():
    extender = extender_entry(scheduler_config(installed()))
    assert extender["nodeCacheCapable"] is True
    assert extender["ignorable"] is False
    assert extender["weight"] >= 1
    assert "managedResources" not in extender        # every pod of the profile goes to the extender
    assert re.fullmatch(r"\d+s", extender["httpTimeout"]) and 1 <= int(extender["httpTimeout"][:-1]) <= 30


def test_scheduler_trusts_the_ca_of_the_extender_certificate():
    docs = installed()
    deployment = scheduler_deployment(docs)
    ca_file = extender_entry(scheduler_config(docs))["tlsConfig"]["caFile"]
    source = volume_source_of(deployment, ca_file)
    assert source["secret"]["secretName"] == volume_source_of(
        extender_deployment(docs), extender_flag(docs, "tls-cert"))["secret"]["secretName"]
    assert source["key"] == "ca.crt"
    assert [item["key"] for item in source["secret"]["items"]] == ["ca.crt"]   # never the private key


def test_scheduler_presents_a_client_certificate_the_extender_trusts():
    """The verbs port requires a client certificate signed by --client-ca: the scheduler's tlsConfig names
    one from its own Secret, and --client-ca is the CA of the Secret the extender serves with (both issued
    by scripts/gen-webhook-cert.sh or cert-manager from one CA)."""
    docs = installed()
    tls = extender_entry(scheduler_config(docs))["tlsConfig"]
    scheduler = scheduler_deployment(docs)
    cert, key = volume_source_of(scheduler, tls["certFile"]), volume_source_of(scheduler, tls["keyFile"])
    assert cert["secret"]["secretName"] == key["secret"]["secretName"] == "tas-scheduler-client-tls"
    assert (cert["key"], key["key"]) == ("tls.crt", "tls.key")
    ca = volume_source_of(extender_deployment(docs), extender_flag(docs, "client-ca"))
    assert (ca["secret"]["secretName"], ca["key"]) == ("tas-extender-tls", "ca.crt")


def test_the_extender_never_mounts_the_schedulers_client_key():
    pod = extender_deployment(installed())["spec"]["template"]["spec"]
    assert "tas-scheduler-client-tls" not in {(v.get("secret") or {}).get("secretName") for v in pod["volumes"]}


def test_debug_and_ui_listen_on_loopback_behind_port_forward():
    """/debug and /ui list pods of every namespace: in a cluster they are on 127.0.0.1:--debug-port, no
    Service or container port names it, and the Role tas-extender-debug grants port-forward to the pods."""
    docs = installed()
    debug_port = int(extender_flag(docs, "debug-port"))
    assert debug_port not in {p["containerPort"] for p in container(extender_deployment(docs))["ports"]}
    assert debug_port not in {p.get("targetPort") for p in service(docs)["spec"]["ports"]}
    rules = rules_of(docs, "Role", "tas-extender-debug", "tas-system")
    assert allows(rules, "", "pods/portforward", "create") and allows(rules, "", "pods", "get")
    assert not any(verb in rule["verbs"] for rule in rules for verb in ("*", "delete", "update", "patch"))


def test_network_policy_lets_only_the_scheduler_reach_the_verbs_port():
    docs = installed()
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
    deployment = extender_deployment(docs)
    assert policy["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= \
        deployment["spec"]["template"]["metadata"]["labels"].items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    by_port = {}
    for rule in policy["spec"]["ingress"]:
        for port in rule["ports"]:
            by_port[container_port(deployment, port["port"])] = rule.get("from")
    verbs, main = int(extender_flag(docs, "verbs-port")), int(extender_flag(docs, "port"))
    assert set(by_port) == {verbs, main}                    # nothing else (the debug port is loopback only)
    (source,) = by_port[verbs]
    scheduler_labels = scheduler_deployment(docs)["spec"]["template"]["metadata"]["labels"]
    assert set(source) == {"podSelector"}                   # the policy's namespace: tas-system
    assert source["podSelector"]["matchLabels"].items() <= scheduler_labels.items()
    assert by_port[main] is None                            # the API server (webhook), the kubelet, Prometheus


def test_scheduler_deployment_runs_kube_scheduler_with_leader_election():
    docs = installed()
    deployment = scheduler_deployment(docs)
    c = container(deployment)
    assert re.fullmatch(r"registry\.k8s\.io/kube-scheduler:v1\.\d+\.\d+", c["image"])
    assert deployment["spec"]["replicas"] >= 2
    assert scheduler_config(docs)["leaderElection"]["leaderElect"] is True
    cert_dir = flag(c["command"], "cert-dir")
    assert "emptyDir" in volume_source_of(deployment, cert_dir + "/x")


# --- examples --------------------------------------------------------------------------------------------------------

def test_example_job_uses_the_scheduler_and_the_example_topology():
    docs = installed()
    (job,) = load_docs(EXAMPLES / "training-job.yaml")
    assert job["spec"]["template"]["spec"]["schedulerName"] == scheduler_config(docs)["profiles"][0]["schedulerName"]
    annotations = job["metadata"]["annotations"]
    topology = example_topology()
    assert annotations["kai.scheduler/topology"] == topology["metadata"]["name"]
    names = {level["alias"] for level in topology["spec"]["levels"]} | \
        {level["nodeLabel"] for level in topology["spec"]["levels"]}
    template = job["spec"]["template"]["metadata"]["annotations"]
    assert annotations["kai.scheduler/topology-required-placement"] in names
    assert template["kai.scheduler/segment-topology-required-placement"] in names
    assert job["spec"]["completions"] % int(template["kai.scheduler/segment-size"]) == 0


# --- cert-manager ------------------------------------------------------------------------------------------------------

def test_cert_manager_overlay_issues_the_secret_the_deployments_mount():
    docs = build(CERT_MANAGER)
    svc = service(docs)
    namespace = svc["metadata"]["namespace"]
    certificate = get(docs, "Certificate", "tas-extender", namespace)["spec"]
    assert certificate["secretName"] == volume_source_of(
        extender_deployment(docs), extender_flag(docs, "tls-cert"))["secret"]["secretName"]
    assert f"{svc['metadata']['name']}.{namespace}.svc" in certificate["dnsNames"]
    assert urlsplit(extender_entry(scheduler_config(docs))["urlPrefix"]).hostname in certificate["dnsNames"]
    assert "server auth" in certificate["usages"]
    issuer = get(docs, certificate["issuerRef"]["kind"], certificate["issuerRef"]["name"], namespace)["spec"]
    ca = [d for d in docs if d["kind"] == "Certificate" and d["spec"].get("isCA")]
    assert [c["spec"]["secretName"] for c in ca] == [issuer["ca"]["secretName"]]
    root = get(docs, ca[0]["spec"]["issuerRef"]["kind"], ca[0]["spec"]["issuerRef"]["name"], namespace)
    assert "selfSigned" in root["spec"]
    client = get(docs, "Certificate", "tas-scheduler-client", namespace)["spec"]
    tls = extender_entry(scheduler_config(docs))["tlsConfig"]
    assert client["secretName"] == volume_source_of(scheduler_deployment(docs), tls["certFile"])["secret"]["secretName"]
    assert client["usages"] == ["client auth", "digital signature"]
    assert client["issuerRef"] == certificate["issuerRef"]          # the CA the extender's --client-ca holds
    annotations = get(docs, "MutatingWebhookConfiguration", "tas-extender")["metadata"]["annotations"]
    assert annotations["cert-manager.io/inject-ca-from"] == f"{namespace}/tas-extender"
    # renewed before expiry; the CA keeps its key, so what it signed before a CA renewal stays valid
    for cert in (certificate, client):
        assert cert["privateKey"]["rotationPolicy"] == "Always"
        assert 0 < hours(cert["renewBefore"]) < hours(cert["duration"]) / 3
    assert ca[0]["spec"]["privateKey"]["rotationPolicy"] == "Never"
    # kube-scheduler is rolled (by a reloader) when either Secret it mounts is renewed
    reload = scheduler_deployment(docs)["metadata"]["annotations"]["secret.reloader.stakater.com/reload"]
    mounted = {v["secret"]["secretName"] for v in scheduler_deployment(docs)["spec"]["template"]["spec"]["volumes"]
               if "secret" in v}
    assert set(reload.split(",")) == mounted == {certificate["secretName"], client["secretName"]}
    assert "caBundle" not in webhook_entry(docs)["clientConfig"]


def hours(duration: str) -> int:
    assert re.fullmatch(r"\d+h", duration), duration
    return int(duration[:-1])


def test_scheduler_rolls_one_pod_at_a_time():
    """A rollout (new image, renewed certificates) never leaves no kube-scheduler to hold the Lease."""
    deployment = scheduler_deployment(installed())
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate",
                                              "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    assert deployment["spec"]["replicas"] >= 2


# --- scripts/gen-webhook-cert.sh -------------------------------------------------------------------------------------

needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")


def run_script(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})


def openssl(*args: str) -> str:
    return subprocess.run(["openssl", *args], capture_output=True, text=True, check=True).stdout


def san_dns_names(cert: Path) -> set[str]:
    text = openssl("x509", "-in", str(cert), "-noout", "-ext", "subjectAltName")
    return set(re.findall(r"DNS:([^,\s]+)", text))


def test_script_is_executable():
    assert SCRIPT.stat().st_mode & stat.S_IXUSR


@needs_openssl
def test_script_certificate_names_the_service_of_the_manifests(tmp_path):
    svc = service(installed())
    result = run_script("--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    host = f"{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc"
    assert host in san_dns_names(tmp_path / "tls.crt")
    assert f"{host}.cluster.local" in san_dns_names(tmp_path / "tls.crt")
    # the name kube-scheduler dials (the Service's short name, from its own namespace)
    assert urlsplit(extender_entry(scheduler_config(installed()))["urlPrefix"]).hostname in san_dns_names(
        tmp_path / "tls.crt")
    # stdout is the caBundle alone: base64 of the CA that signed the certificate.
    assert base64.b64decode(result.stdout.strip()) == (tmp_path / "ca.crt").read_bytes()
    assert "OK" in openssl("verify", "-CAfile", str(tmp_path / "ca.crt"), str(tmp_path / "tls.crt"))
    assert "TLS Web Server Authentication" in openssl("x509", "-in", str(tmp_path / "tls.crt"), "-noout",
                                                      "-ext", "extendedKeyUsage")
    assert "CA:TRUE" in openssl("x509", "-in", str(tmp_path / "ca.crt"), "-noout", "-ext", "basicConstraints")
    cert_key = openssl("x509", "-in", str(tmp_path / "tls.crt"), "-noout", "-pubkey")
    assert cert_key == openssl("pkey", "-in", str(tmp_path / "tls.key"), "-pubout")
    assert (tmp_path / "tls.key").stat().st_mode & 0o077 == 0
    # kube-scheduler's client certificate for the verbs port: the same CA (the extender's --client-ca), client auth
    assert "OK" in openssl("verify", "-CAfile", str(tmp_path / "ca.crt"), str(tmp_path / "scheduler-client.crt"))
    usage = openssl("x509", "-in", str(tmp_path / "scheduler-client.crt"), "-noout", "-ext", "extendedKeyUsage")
    assert "TLS Web Client Authentication" in usage and "Server" not in usage
    assert (tmp_path / "scheduler-client.key").stat().st_mode & 0o077 == 0


@needs_openssl
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(service_name=st.from_regex(r"[a-z]([a-z0-9-]{0,14}[a-z0-9])?", fullmatch=True),
       namespace=st.from_regex(r"[a-z]([a-z0-9-]{0,14}[a-z0-9])?", fullmatch=True))
def test_script_names_any_service_and_namespace(tmp_path_factory, service_name, namespace):
    out = tmp_path_factory.mktemp("tls")
    result = run_script("--service", service_name, "--namespace", namespace, "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert f"{service_name}.{namespace}.svc" in san_dns_names(out / "tls.crt")


@pytest.mark.parametrize("args,message", [
    (["--days", "soon"], "--days must be a positive integer"),
    (["--days", "0"], "--days must be a positive integer"),
    (["--namespace"], "--namespace needs a value"),
    (["--colour", "blue"], "unknown argument '--colour'"),
    (["--timeout", "5"], "--timeout must be a duration like 90s, 5m or 1h, got '5'"),
    (["--timeout"], "--timeout needs a value"),
    (["--ca-days", "ten"], "--ca-days must be a positive integer"),
])
def test_script_rejects_bad_arguments(args, message):
    result = run_script(*args)
    assert result.returncode == 2
    assert message in result.stderr


FAKE_KUBECTL = """#!/usr/bin/env bash
# One write per call: the two kubectl of a pipeline run at the same time.
line=$(printf '%s\\x1f' "$@"); printf '%s\\n' "$line" >> "$KUBECTL_LOG"
case "$*" in
  *"get mutatingwebhookconfiguration"*) printf '%s\\n' $FAKE_WEBHOOKS ;;
  *"get secret"*) printf '%s' "${FAKE_SECRET_CA:-}" ;;
  *"create secret"*)
    # keep what each write of a Secret would hold: <log>.<secret>.<write number>.<key>
    n=$(ls "$KUBECTL_LOG.$6".*.tls.crt 2>/dev/null | wc -l)
    for arg in "$@"; do
      case "$arg" in --from-file=*) kv=${arg#--from-file=}; cp "${kv#*=}" "$KUBECTL_LOG.$6.$n.${kv%%=*}" ;; esac
    done
    echo "kind: Secret" ;;
  *"apply -f -"*) cat >/dev/null ;;
  *"rollout status deployment ${FAKE_ROLLOUT_FAILS:-none}"*) exit 1 ;;
esac
"""


@needs_openssl
def test_script_apply_writes_the_secret_and_patches_the_webhook(tmp_path):
    docs = installed()
    svc = service(docs)
    namespace = svc["metadata"]["namespace"]
    webhook = get(docs, "MutatingWebhookConfiguration", "tas-extender")
    bin_dir, log = tmp_path / "bin", tmp_path / "kubectl.log"
    bin_dir.mkdir()
    (bin_dir / "kubectl").write_text(FAKE_KUBECTL)
    (bin_dir / "kubectl").chmod(0o755)
    result = run_script("--out", str(tmp_path / "tls"), "--apply", env={
        "PATH": f"{bin_dir}:{os.environ['PATH']}", "KUBECTL_LOG": str(log),
        "FAKE_WEBHOOKS": " ".join(w["name"] for w in webhook["webhooks"])})
    assert result.returncode == 0, result.stderr
    calls = [line.rstrip("\x1f").split("\x1f") for line in log.read_text().splitlines()]
    ca_bundle = result.stdout.strip()

    secret_calls = [c for c in calls if c[:4] == ["-n", namespace, "create", "secret"]]
    secret_name = volume_source_of(extender_deployment(docs), extender_flag(docs, "tls-cert"))["secret"]["secretName"]
    client_name = volume_source_of(scheduler_deployment(docs), extender_entry(scheduler_config(docs))["tlsConfig"][
        "certFile"])["secret"]["secretName"]
    assert [c[4:6] for c in secret_calls] == [["generic", secret_name], ["generic", client_name]]
    for secret_call in secret_calls:
        assert "--type=kubernetes.io/tls" in secret_call
        keys = {arg.split("=", 2)[1] for arg in secret_call if arg.startswith("--from-file=")}
        assert keys == {"tls.crt", "tls.key", "ca.crt"}

    (patch_call,) = [c for c in calls if c[:1] == ["patch"]]
    assert patch_call[1:3] == ["mutatingwebhookconfiguration", webhook["metadata"]["name"]]
    patch = yaml.safe_load(patch_call[patch_call.index("-p") + 1])
    assert patch == [{"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": ca_bundle}
                     for i in range(len(webhook["webhooks"]))]

    # one Deployment at a time, the extender first: each restart is followed by its status before the next
    extender, scheduler = extender_deployment(docs)["metadata"]["name"], scheduler_deployment(docs)["metadata"]["name"]
    assert rollouts(calls) == [("restart", extender), ("status", extender), ("restart", scheduler),
                               ("status", scheduler)]
    assert all("--timeout=5m" in c for c in calls if c[2:4] == ["rollout", "status"])


def rollouts(calls: list[list[str]]) -> list[tuple[str, str]]:
    return [(c[3], c[5]) for c in calls if c[2:3] == ["rollout"]]


def fake_kubectl(tmp_path: Path, env: dict | None = None) -> tuple[dict, Path]:
    bin_dir, log = tmp_path / "bin", tmp_path / "kubectl.log"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "kubectl").write_text(FAKE_KUBECTL)
    (bin_dir / "kubectl").chmod(0o755)
    log.write_text("")
    webhook = get(installed(), "MutatingWebhookConfiguration", "tas-extender")
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "KUBECTL_LOG": str(log),
            "FAKE_WEBHOOKS": " ".join(w["name"] for w in webhook["webhooks"]), **(env or {})}, log


def logged_calls(log: Path) -> list[list[str]]:
    return [line.rstrip("\x1f").split("\x1f") for line in log.read_text().splitlines()]


def certificates_in(bundle: bytes) -> list[str]:
    """The subjects of the PEM certificates in a bundle, in order."""
    pems = re.findall(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----\n", bundle, re.S)
    return [subprocess.run(["openssl", "x509", "-noout", "-subject"], input=pem, capture_output=True,
                           check=True).stdout.decode().strip() for pem in pems]


def verifies(ca: Path, cert: Path) -> bool:
    return subprocess.run(["openssl", "verify", "-CAfile", str(ca), str(cert)], capture_output=True).returncode == 0


@needs_openssl
def test_script_renews_the_certificates_under_the_existing_ca(tmp_path):
    out = tmp_path / "tls"
    first = run_script("--out", str(out))
    ca, serving, client = (out / "ca.crt").read_bytes(), (out / "tls.crt").read_bytes(), \
        (out / "scheduler-client.crt").read_bytes()
    second = run_script("--out", str(out))
    assert first.returncode == second.returncode == 0, second.stderr
    assert (out / "ca.crt").read_bytes() == ca and second.stdout == first.stdout     # the same trust
    assert (out / "tls.crt").read_bytes() != serving and (out / "scheduler-client.crt").read_bytes() != client
    assert verifies(out / "ca.crt", out / "tls.crt") and verifies(out / "ca.crt", out / "scheduler-client.crt")
    assert "renewing the certificates under the existing CA" in second.stderr


@needs_openssl
def test_script_new_ca_keeps_the_old_one_trusted_until_the_next_renewal(tmp_path):
    out = tmp_path / "tls"
    assert run_script("--out", str(out)).returncode == 0
    old_ca = tmp_path / "old-ca.crt"
    old_ca.write_bytes((out / "ca.crt").read_bytes())
    changed = run_script("--out", str(out), "--new-ca")
    assert changed.returncode == 0, changed.stderr
    bundle = base64.b64decode(changed.stdout.strip())
    assert certificates_in(bundle) == certificates_in((out / "ca.crt").read_bytes() + old_ca.read_bytes())
    assert (out / "ca.crt").read_bytes() != old_ca.read_bytes()
    assert verifies(out / "ca.crt", out / "tls.crt") and not verifies(old_ca, out / "tls.crt")
    renewed = run_script("--out", str(out))
    assert renewed.returncode == 0, renewed.stderr
    assert base64.b64decode(renewed.stdout.strip()) == (out / "ca.crt").read_bytes()   # the old CA dropped
    assert not (out / "ca-previous.crt").exists()


@needs_openssl
def test_script_new_ca_apply_trusts_both_before_it_switches_certificates(tmp_path):
    out = tmp_path / "tls"
    assert run_script("--out", str(out)).returncode == 0
    old_serving, old_client = (out / "tls.crt").read_bytes(), (out / "scheduler-client.crt").read_bytes()
    env, log = fake_kubectl(tmp_path)
    result = run_script("--out", str(out), "--new-ca", "--apply", env=env)
    assert result.returncode == 0, result.stderr
    calls = logged_calls(log)
    steps = [("secret", i) if c[2:4] == ["create", "secret"] else ("patch",) if c[:1] == ["patch"] else
             (c[3], c[5]) for i, c in enumerate(calls) if c[2:4] == ["create", "secret"] or c[:1] == ["patch"]
             or c[2:3] == ["rollout"]]
    kinds = [s[0] for s in steps]
    assert kinds == ["secret", "secret", "patch", "restart", "status", "restart", "status",
                     "secret", "secret", "patch", "restart", "status", "restart", "status"]
    secret = volume_source_of(extender_deployment(installed()), extender_flag(installed(), "tls-cert"))[
        "secret"]["secretName"]
    saved = lambda name, write, key: Path(f"{log}.{name}.{write}.{key}").read_bytes()  # noqa: E731
    bundle = (out / "ca.crt").read_bytes() + (out / "ca-previous.crt").read_bytes()
    client_secret = "tas-scheduler-client-tls"
    # step 1: both CAs trusted, the old certificates still served and presented
    assert saved(secret, 0, "tls.crt") == old_serving and saved(client_secret, 0, "tls.crt") == old_client
    assert saved(secret, 0, "ca.crt") == saved(client_secret, 0, "ca.crt") == bundle
    # step 2: the new CA's certificates, both CAs still trusted
    assert saved(secret, 1, "tls.crt") == (out / "tls.crt").read_bytes() != old_serving
    assert saved(client_secret, 1, "tls.crt") == (out / "scheduler-client.crt").read_bytes() != old_client
    assert saved(secret, 1, "ca.crt") == bundle


@needs_openssl
def test_script_never_replaces_a_ca_it_was_not_asked_to(tmp_path):
    out = tmp_path / "tls"
    assert run_script("--out", str(out)).returncode == 0
    (out / "ca.key").unlink()
    lost_key = run_script("--out", str(out))
    assert lost_key.returncode == 1 and "ca.key is missing" in lost_key.stderr and "--new-ca" in lost_key.stderr
    env, _ = fake_kubectl(tmp_path, {"FAKE_SECRET_CA": "LS0tLS1CRUdJTg=="})
    elsewhere = run_script("--out", str(tmp_path / "empty"), "--apply", env=env)
    assert elsewhere.returncode == 1 and "already trusts a CA" in elsewhere.stderr, elsewhere.stderr
    assert not (tmp_path / "empty" / "ca.crt").exists() and "--new-ca" in elsewhere.stderr


@needs_openssl
def test_script_refuses_a_ca_that_expires_before_its_certificates(tmp_path):
    out = tmp_path / "tls"
    assert run_script("--out", str(out), "--ca-days", "10", "--days", "5").returncode == 0
    result = run_script("--out", str(out), "--days", "30")
    assert result.returncode == 1 and "expires within --days 30" in result.stderr


@needs_openssl
def test_script_stops_when_a_rollout_does_not_finish(tmp_path):
    env, log = fake_kubectl(tmp_path, {"FAKE_ROLLOUT_FAILS": "tas-extender"})
    result = run_script("--out", str(tmp_path / "tls"), "--apply", env=env)
    assert result.returncode == 1
    assert "the rollout of deployment/tas-extender did not finish within --timeout 5m" in result.stderr
    assert rollouts(logged_calls(log)) == [("restart", "tas-extender"), ("status", "tas-extender")]


# --- Dockerfile and docker-compose.yml ----------------------------------------------------------------------------------

@cache
def dockerfile() -> dict:
    """The last value of each instruction (continuation lines joined), plus every COPY source and ARG."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    instructions: dict = {"COPY": []}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        if word.upper() == "COPY":
            instructions["COPY"] += rest.split()[:-1]
        elif word.upper() == "ARG":
            instructions.setdefault("ARG", []).append(rest.strip())
        else:
            instructions[word.upper()] = rest.strip()
    return instructions


def dockerignore_excludes(path: str) -> bool:
    """Docker's rule: the last pattern that matches the path or one of its parents decides."""
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    parts = path.split("/")
    candidates = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    excluded = False
    for pattern in patterns:
        negated, pattern = pattern.startswith("!"), pattern.lstrip("!").rstrip("/")
        matches = any(fnmatch.fnmatchcase(c, pattern) or
                      (pattern.startswith("**/") and fnmatch.fnmatchcase(c.split("/")[-1], pattern[3:]))
                      for c in candidates)
        if matches:
            excluded = not negated
    return excluded


def test_dockerfile_builds_a_slim_non_root_image_of_the_service():
    df = dockerfile()
    assert df["FROM"] == "${PYTHON_IMAGE}"
    base = dict(arg.split("=", 1) for arg in df["ARG"])["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.11-slim(-[a-z]+)?@sha256:[0-9a-f]{64}", base), "pinned by digest"
    uid, _, gid = df["USER"].partition(":")
    assert uid.isdigit() and int(uid) > 0 and (not gid or int(gid) > 0)
    assert yaml.safe_load(df["ENTRYPOINT"]) == ["tas-extender", "serve"]
    assert "pip install --require-hashes --no-deps -r requirements.lock" in df["RUN"]
    assert "pip install --no-deps --no-index --no-build-isolation ." in df["RUN"]
    settings_module = pytest.importorskip("app.settings")
    assert df["EXPOSE"] == str(settings_module.Settings.model_fields["port"].default) == FLAG_DEFAULTS["port"]


def test_dockerfile_entrypoint_is_the_packages_console_script():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["tas-extender"] == "app.cli:main"


def test_docker_context_holds_the_copied_sources_and_nothing_secret():
    for source in dockerfile()["COPY"]:
        assert (ROOT / source).exists(), f"COPY {source}: missing"
        assert not dockerignore_excludes(source), f"COPY {source}: excluded by .dockerignore"
    assert not dockerignore_excludes("app/cli.py")
    for private in ("tls/ca.key", ".git/config", "tests/test_manifests.py", ".venv/bin/python",
                    "app/__pycache__/cli.cpython-311.pyc", "notes.md"):
        assert dockerignore_excludes(private), f"{private} would be sent to the build"


def compose_service() -> dict:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    (service_spec,) = compose["services"].values()
    return service_spec


def test_compose_runs_the_image_standalone_on_the_exposed_port():
    spec = compose_service()
    assert spec["build"] == "."
    assert "command" not in spec and "entrypoint" not in spec       # the image's `tas-extender serve`
    env = spec["environment"]
    assert {key[4:].lower().replace("_", "-") for key in env} <= FLAGS
    assert all(key.startswith("TAS_") for key in env)
    assert not {"TAS_KUBECONFIG", "TAS_IN_CLUSTER", "TAS_TLS_CERT", "TAS_TLS_KEY"} & set(env)   # demo, no TLS
    port = env.get("TAS_PORT", FLAG_DEFAULTS["port"])
    assert port == dockerfile()["EXPOSE"]
    (published,) = spec["ports"]
    assert published.split(":")[-1] == port
    assert spec["user"] == dockerfile()["USER"]


def test_compose_environment_builds_valid_settings():
    settings_module = pytest.importorskip("app.settings")
    env = compose_service()["environment"]
    parsed = settings_module.Settings(**{key[4:].lower(): value for key, value in env.items()})
    assert parsed.mode == "standalone" and parsed.tls_cert is None


def test_compose_healthcheck_probes_healthz_on_the_service_port():
    spec = compose_service()
    test = " ".join(spec["healthcheck"]["test"])
    url = re.search(r"http://[^'\"\s]+", test).group(0)
    assert urlsplit(url).path == "/healthz"
    assert str(urlsplit(url).port) == spec["environment"]["TAS_PORT"]
    assert spec["healthcheck"]["test"][0] == "CMD" and spec["healthcheck"]["test"][1] == "python"
