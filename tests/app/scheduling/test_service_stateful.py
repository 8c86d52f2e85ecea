"""The service under interleaved events, as a real cluster delivers them: several gangs (Indexed Jobs
and an elastic PyTorchJob) scheduled pod by pod; pods deleted before and after binding, or failing, and
replaced by their controller; pods succeeding; other schedulers' pods taking room; nodes turning
NotReady and back, or removed with their pods and added again; jobs deleted; the service restarting;
reservations expiring; stale gangs evicted. After every step the books must agree: no node over its
capacity, every reservation held by a planned slot and every reserved slot holding one, no room held
for a finished slot, no pod in two slots, every running pod in its slot, each gang's running
pods inside its required domain and segments."""
from __future__ import annotations

import copy

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import app.state.service as service_module
from app.state import NODE_KIND, POD_KIND, SLOT_ANNOTATION, kind_of
from app.state.plans import BOUND, GANG_REFUSED, PLANNED, parse_slot, reservation_key
from topology.groups import Slot

from service_helpers import GPU, Clock, bind, domain_of, filter_, indexed_job, job_pods, make_client, plain_pod, service

TTL = 300.0
JOBS = {   # Indexed Jobs: name -> (pods, GPUs a pod, required level, segment size)
    "wide": (8, 4, "block", 4),
    "zonal": (6, 8, "zone", None),
    "small": (4, 2, "rack", 2),
    "big": (10, 8, "zone", None),         # one zone's free nodes at most: it waits while others hold them
}
ELASTIC = "elastic"                       # a PyTorchJob: a master and 5 workers, any 4 pods make it run
REQUIRED = {**{name: spec[2] for name, spec in JOBS.items()}, ELASTIC: "block"}


def elastic_job() -> dict:
    def replicas(count: int, gpus: int) -> dict:
        return {"replicas": count, "template": {"spec": {"containers": [
            {"name": "main", "image": "trainer", "resources": {"limits": {GPU: str(gpus)}}}]}}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": ELASTIC, "namespace": "team-a", "uid": f"uid-{ELASTIC}", "resourceVersion": "1",
                         "annotations": {"kai.scheduler/topology": "default",
                                         "kai.scheduler/topology-required-placement": "block"}},
            "spec": {"runPolicy": {"schedulingPolicy": {"minAvailable": 4}},
                     "pytorchReplicaSpecs": {"Master": replicas(1, 8), "Worker": replicas(5, 4)}}}


class ServiceUnderEvents(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        # a stale model (a node deleted) is rebuilt when next read, not by a timer thread at any moment:
        # the same steps always give the same run
        self.rebuild_delay, service_module.STALE_REBUILD_DELAY = service_module.STALE_REBUILD_DELAY, 3600.0
        self.clock = Clock()
        self.jobs = {name: indexed_job(name, pods=pods, gpus=gpus, required=required, segment=segment)
                     for name, (pods, gpus, required, segment) in JOBS.items()}
        self.jobs[ELASTIC] = elastic_job()
        self.templates = {name: job_pods(job) for name, job in self.jobs.items()}   # the controllers' pods
        self.client = make_client(*self.jobs.values(), clock=self.clock, reservation_ttl=TTL)
        self.state = service(self.client)
        self.pods: dict[tuple[str, int], dict] = {}      # the live pod of each (workload, position)
        self.generation: dict[tuple[str, int], int] = {}  # replacements made, for fresh names and uids
        self.deleted_jobs: set[str] = set()
        self.others: list[dict] = []                        # pods bound by another scheduler
        self.removed: dict[str, dict] = {}                  # nodes deleted, by name
        self.foreign = 0
        for name, templates in self.templates.items():
            for index in range(len(templates)):
                self._create((name, index))

    def teardown(self):
        service_module.STALE_REBUILD_DELAY = self.rebuild_delay
        if self.state._settle is not None:
            self.state._settle.cancel()

    # --- what the cluster does ------------------------------------------------------------------------
    def _create(self, key: tuple[str, int]) -> None:
        """The controller makes the pod of (workload, position); after the first, a replacement."""
        name, index = key
        pod = copy.deepcopy(self.templates[name][index])
        generation = self.generation.get(key, 0)
        if generation:          # the controller's replacement: a new name and uid, the same labels
            pod["metadata"]["name"] = f"{name}-{index}-r{generation}"
            pod["metadata"]["uid"] = f"uid-{name}-{index}-r{generation}"
        self.generation[key] = generation + 1
        self.pods[key] = pod
        self.state.apply(POD_KIND, "ADDED", pod)

    def _bound(self, key: tuple[str, int]) -> bool:
        return bool(self.pods[key].get("spec", {}).get("nodeName"))

    def _keys(self, bound: bool) -> list[tuple[str, int]]:
        return sorted(k for k in self.pods if self._bound(k) == bound and
                      self.pods[k]["status"]["phase"] in ("Pending", "Running"))

    def _pick(self, data, bound: bool) -> tuple[str, int] | None:
        """A pending (or running, when `bound`) pod's key, drawn; None when there is none."""
        keys = self._keys(bound=bound)
        return data.draw(st.sampled_from(keys)) if keys else None

    @rule(data=st.data(), count=st.integers(1, 8))
    @precondition(lambda self: self._keys(bound=False))
    def schedule_pending_pods(self, data, count):
        """kube-scheduler takes pending pods one at a time (in any order): filter, then bind the node."""
        for _ in range(count):
            key = self._pick(data, bound=False)
            if key is None:
                return
            self._schedule(key)

    def _schedule(self, key: tuple[str, int]) -> None:
        pod = self.pods[key]
        answer = filter_(self.client, pod)
        assert answer["Error"] == ""
        if not answer["NodeNames"]:
            event("filter: no node")
            return
        event("filter: bound")
        node = answer["NodeNames"][0]
        assert bind(self.client, pod, node) == ""
        metadata = pod["metadata"]
        bound = copy.deepcopy(self.state.find_pod(metadata["namespace"], metadata["name"]))
        assert bound["spec"]["nodeName"] == node
        bound["status"] = {"phase": "Running"}
        self.pods[key] = bound
        self.state.apply(POD_KIND, "MODIFIED", copy.deepcopy(bound))   # the watch: bound, with our annotations

    @rule(data=st.data(), bound=st.booleans())
    def delete_a_pod_and_replace_it(self, data, bound):
        key = self._pick(data, bound)
        if key is None:
            return
        self.state.apply(POD_KIND, "DELETED", self.pods.pop(key))
        self._create(key)

    @rule(data=st.data())
    def a_running_pod_fails_and_is_replaced(self, data):
        """The failed pod stays (as the API keeps it) and the Job controller creates a new one."""
        key = self._pick(data, bound=True)
        if key is None:
            return
        failed = self.pods.pop(key)
        failed["status"] = {"phase": "Failed"}
        self.state.apply(POD_KIND, "MODIFIED", copy.deepcopy(failed))
        self._create(key)

    @rule(data=st.data())
    def a_running_pod_succeeds(self, data):
        key = self._pick(data, bound=True)
        if key is None:
            return
        pod = self.pods[key]
        pod["status"] = {"phase": "Succeeded"}
        self.state.apply(POD_KIND, "MODIFIED", copy.deepcopy(pod))

    @rule(node=st.sampled_from(["node-03", "node-05", "node-11", "node-19", "node-27", "node-30"]),
          ready=st.booleans())
    def a_node_changes_readiness(self, node, ready):
        current = next(o for o in self.state.objects.list("Node") if o["metadata"]["name"] == node)
        changed = copy.deepcopy(current)
        changed["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
        self.state.apply(NODE_KIND, "MODIFIED", changed)

    @rule(node=st.sampled_from([f"node-{i:02d}" for i in range(1, 33)]), gpus=st.sampled_from([2, 4, 8]))
    def a_pod_of_another_scheduler_lands(self, node, gpus):
        """A pod bound by someone else (nodeName set, another scheduler) on room the node really has,
        reservations aside: the kubelet admits it, so a gang that reserved that room must move."""
        if node in self.removed:
            return
        with self.state.lock:
            self.state.refresh()                # the model as the next verb sees it
            cluster = self.state.cluster
            index, gpu = cluster.node_index[node], cluster.resources.column[GPU]
            room = cluster.capacity.allocatable[index, gpu] - cluster.capacity.used[index, gpu]
        if room < gpus:
            return
        self.foreign += 1
        pod = plain_pod(f"web-{self.foreign}", gpus=gpus)
        pod["spec"]["nodeName"] = node
        pod["status"] = {"phase": "Running"}
        self.others.append(pod)
        self.state.apply(POD_KIND, "ADDED", pod)

    @rule(data=st.data())
    @precondition(lambda self: self.others)
    def a_pod_of_another_scheduler_ends(self, data):
        pod = self.others.pop(data.draw(st.integers(0, len(self.others) - 1)))
        self.state.apply(POD_KIND, "DELETED", pod)

    @rule(node=st.sampled_from(["node-04", "node-12", "node-20", "node-28"]))
    def a_node_is_removed_and_its_pods_collected(self, node):
        """The node object goes (scaled down, replaced); the pod garbage collector deletes its pods and
        their controllers make new ones."""
        current = next((o for o in self.state.objects.list("Node") if o["metadata"]["name"] == node), None)
        if current is None:
            return
        self.removed[node] = copy.deepcopy(current)
        self.state.apply(NODE_KIND, "DELETED", current)
        for key in [k for k, p in self.pods.items() if p.get("spec", {}).get("nodeName") == node]:
            self.state.apply(POD_KIND, "DELETED", self.pods.pop(key))
            self._create(key)
        for pod in [p for p in self.others if p["spec"]["nodeName"] == node]:
            self.others.remove(pod)
            self.state.apply(POD_KIND, "DELETED", pod)

    @rule(data=st.data())
    @precondition(lambda self: self.removed)
    def a_removed_node_comes_back(self, data):
        node = data.draw(st.sampled_from(sorted(self.removed)))
        self.state.apply(NODE_KIND, "ADDED", self.removed.pop(node))

    @rule(name=st.sampled_from(sorted([*JOBS, ELASTIC])))
    def a_job_is_deleted_with_its_pods(self, name):
        if name in self.deleted_jobs:
            return
        self.deleted_jobs.add(name)
        for key in [k for k in self.pods if k[0] == name]:
            self.state.apply(POD_KIND, "DELETED", self.pods.pop(key))
        self.state.apply(kind_of(self.jobs[name]), "DELETED", self.jobs[name])

    @rule()
    def the_service_restarts(self):
        """A new process reads the cluster as it is (reservations are not kept) and gives partly bound
        gangs their plans back."""
        kinds = ("Node", "Topology", "Job", "PyTorchJob", "Pod", "DeviceClass", "ResourceSlice", "ResourceClaim",
                 "ResourceClaimTemplate")                      # the DRA kinds: the demo's DRA rack
        objects = [copy.deepcopy(o) for kind in kinds for o in self.state.objects.list(kind)]
        self.teardown()
        self.client = make_client(objects=objects, clock=self.clock, reservation_ttl=TTL)
        self.state = service(self.client)
        service_module.STALE_REBUILD_DELAY = 3600.0

    @rule(seconds=st.sampled_from([30, 61]))
    def stale_gangs_are_evicted(self, seconds):
        """Time passes and the leader's stale-gang check runs: a gang left below its minimum past the
        grace period (60 s) loses its bound pods, and their controllers make new ones."""
        self.clock.now += seconds
        self.client.app.state.engine.stale.evict_due()
        for key, pod in list(self.pods.items()):
            metadata = pod["metadata"]
            if self.state.find_pod(metadata["namespace"], metadata["name"]) is None:     # evicted
                event("stale gang evicted")
                del self.pods[key]
                self._create(key)

    @rule()
    def reservations_run_out(self):
        self.clock.now += TTL + 1
        self.state.expire(self.clock.now)

    # --- what must always hold ------------------------------------------------------------------------
    @invariant()
    def no_node_over_capacity(self):
        with self.state.lock:
            self.state.refresh()                # node events only mark the model stale: check it rebuilt
            assert (self.state.cluster.free >= 0).all(), "a node holds more than it has"

    @invariant()
    def reservations_and_reserved_slots_match(self):
        with self.state.lock:
            self.state.refresh()
            held = {key for key in self.state.cluster.reservations if key.startswith("gang:")}
            reserved = {reservation_key(plan.key, s.slot) for plan in self.state.plans
                        for s in plan.slots.values() if s.reserved}
            assert held == reserved
            for plan in self.state.plans:
                for s in plan.slots.values():
                    if s.reserved:      # so a finished (done) slot holds no room either
                        assert s.status == PLANNED and s.node is not None, f"{plan.key} {s.slot} reserved as {s.status}"

    @invariant()
    def no_pod_holds_two_slots(self):
        with self.state.lock:
            holders = [s.pod for plan in self.state.plans for s in plan.slots.values()
                       if s.pod is not None and s.status in (PLANNED, BOUND)]
            assert len(holders) == len(set(holders)), "one pod holds two slots"

    def _plan(self, name: str):
        return next((plan for plan in self.state.plans if plan.tree.workload == name), None)

    def _pods_of(self, name: str, phase: str) -> dict[Slot, dict]:
        """The workload's pods in this phase that we bound, by the slot our bind wrote on them."""
        found = {}
        for (workload, _), pod in self.pods.items():
            annotations = pod["metadata"].get("annotations") or {}
            if workload == name and pod["status"]["phase"] == phase and SLOT_ANNOTATION in annotations:
                found[parse_slot(annotations[SLOT_ANNOTATION])] = pod
        return found

    @invariant()
    def a_refused_gang_holds_nothing(self):
        with self.state.lock:
            for plan in self.state.plans:
                if plan.status == GANG_REFUSED:
                    assert not any(s.reserved for s in plan.slots.values()), f"refused {plan.key} holds room"

    @invariant()
    def every_running_pod_of_a_planned_gang_holds_its_slot(self):
        with self.state.lock:
            for name in self.jobs:
                plan = self._plan(name)
                if plan is None or plan.status == GANG_REFUSED:
                    continue
                for slot, pod in self._pods_of(name, "Running").items():
                    key = f"team-a/{pod['metadata']['name']}"
                    held = plan.slots.get(slot)
                    assert held is not None and held.pod == key, f"{key} runs but does not hold {slot} of {plan.key}"
                    assert held.status == BOUND and held.node == pod["spec"]["nodeName"]

    @invariant()
    def bound_pods_keep_their_gangs_domains(self):
        for name, required in REQUIRED.items():
            nodes = {k[1]: p["spec"]["nodeName"] for k, p in self.pods.items()
                     if k[0] == name and self._bound(k) and p["status"]["phase"] == "Running"}
            assert len({domain_of(self.client, n, required) for n in nodes.values()}) <= 1, \
                f"{name}: running pods in two {required}s"
            pods, _, _, segment = JOBS.get(name, (0, 0, None, None))
            if segment:
                for start in range(0, pods, segment):
                    members = {nodes[i] for i in range(start, start + segment) if i in nodes}
                    assert len({domain_of(self.client, n, "rack") for n in members}) <= 1, \
                        f"{name}: a segment's running pods in two racks"


ServiceUnderEvents.TestCase.settings = settings(max_examples=100, stateful_step_count=60, deadline=None,
                                                suppress_health_check=[HealthCheck.too_slow])
test_the_service_keeps_its_books_under_interleaved_events = ServiceUnderEvents.TestCase
