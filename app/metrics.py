"""Prometheus metrics of one service instance (its own registry, so several apps can live in a test)."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

from .fragmentation import GaugeCache

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
PLANNING_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


def _bound_children(metric):
    """`metric.labels(*values)` answered from a dict of the children already made: prometheus_client's `labels`
    checks and joins the values and takes a lock on every call (a few per request). Children are never removed
    (the service calls neither `remove` nor `clear`), so the cache stays the metric's own."""
    children: dict[tuple, object] = {}
    make = metric.labels

    def labels(*values, **named):
        if named:
            return make(*values, **named)
        child = children.get(values)
        if child is None:
            child = children[values] = make(*values)
        return child
    metric.labels = labels
    return metric


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.latency = Histogram("tas_extender_request_seconds", "Extender request latency by verb (and the webhook's)",
                                 ["verb"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.planning = Histogram("tas_extender_planning_seconds", "Time to plan (or re-plan) one gang",
                                  ["kind"], buckets=PLANNING_BUCKETS, registry=self.registry)
        self.errors = Counter("tas_extender_request_errors", "Requests answered with an Error, by verb",
                              ["verb"], registry=self.registry)
        self.binds = Counter("tas_extender_binds", "Bind outcomes", ["result"], registry=self.registry)
        self.refusals = Counter("tas_extender_refusals", "Gang plans refused", registry=self.registry)
        self.wakeups = Counter("tas_extender_wakeups", "Refused pods patched so that kube-scheduler retries them",
                               registry=self.registry)
        self.member_waits = Counter("tas_extender_member_waits",
                                    "Filter calls held while their gang's last pods were created, by how the hold "
                                    "ended: whole (the gang was complete) or short (its time was up)",
                                    ["outcome"], registry=self.registry)
        self.member_wait_seconds = Histogram("tas_extender_member_wait_seconds",
                                             "How long each held filter call was held for its gang's last pods",
                                             buckets=LATENCY_BUCKETS, registry=self.registry)
        self.replans = Counter("tas_extender_replans", "Slots re-planned, by cause", ["cause"],
                               registry=self.registry)
        self.expired = Counter("tas_extender_reservations_expired", "Gang plans dropped by the reservation TTL",
                               registry=self.registry)
        self.connections = Counter("tas_extender_connections",
                                   "Connections accepted, by listener (main, verbs, debug); over TLS each one is a "
                                   "handshake", ["listener"], registry=self.registry)
        for metric in (self.latency, self.planning, self.errors, self.binds, self.member_waits, self.replans,
                       self.connections):
            _bound_children(metric)
        self.stale_evictions = Counter("tas_extender_stale_gang_evictions",
                                       "Gangs whose bound pods were evicted for staying below the gang's minimum "
                                       "past the staleness grace period", registry=self.registry)

    def watch_state(self, state) -> None:
        """Gang and reservation gauges, read from the plan store at scrape time."""
        self.registry.register(_StateCollector(state))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _StateCollector:
    def __init__(self, state) -> None:
        self.state = state
        self.fragmentation = GaugeCache()

    def describe(self):
        return []

    def collect(self):
        with self.state.lock:
            counts = self.state.plans.status_counts()
            reservations = self.state.plans.reservation_count()
            nodes = len(self.state.cluster.nodes)
            whole_free, largest = self.fragmentation.get(self.state)
            devices = self.state.cluster.devices
            class_errors = {name: devices.failure(name) for name in devices.errors}
        gangs = GaugeMetricFamily("tas_extender_gangs", "Gangs known to the service, by status", labels=["status"])
        for status, count in sorted(counts.items()):
            gangs.add_metric([status], count)
        yield gangs
        yield GaugeMetricFamily("tas_extender_reservations", "Slots holding reserved capacity", value=reservations)
        yield GaugeMetricFamily("tas_extender_nodes", "Nodes in the cluster model", value=nodes)
        free = GaugeMetricFamily("tas_extender_free_domains",
                                 "Domains of a topology level (and nodes) entirely free and usable now, counted in "
                                 "the unit resource (nvidia.com/gpu, else cpu)", labels=["topology", "level"])
        for topology, level, count in whole_free:
            free.add_metric([topology, level], count)
        yield free
        fits = GaugeMetricFamily("tas_extender_largest_placeable",
                                 "The most pods of a shape one domain of a level holds now (level cluster: "
                                 "anywhere): the largest gang of that shape requiring that level that fits",
                                 labels=["topology", "level", "shape"])
        for topology, level, shape, pods in largest:
            fits.add_metric([topology, level, shape], pods)
        yield fits
        skipped = GaugeMetricFamily("tas_extender_dra_class_errors",
                                    "DeviceClasses skipped because a CEL selector fails to compile or evaluate "
                                    "(failed: cel-compile or cel-evaluation; GET /debug/dra names the error)",
                                    labels=["deviceclass", "failed"])
        for name, failed in sorted(class_errors.items()):
            skipped.add_metric([name, failed], 1)
        yield skipped
