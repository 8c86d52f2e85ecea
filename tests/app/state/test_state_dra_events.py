"""ResourceSlice and DeviceClass events applied in place by the service's state (issue 38 item 5): no new
model, the touched nodes' rows as a new model would have them, a freed node noted; a change of columns
still builds a new model."""
from __future__ import annotations

import copy

import numpy as np

from app.memory import load_into
from app.state import ServiceState
from app.state.service import kind_of
from topology.demo import DRA_GPU_CLASS, DRA_MIG_CLASS, demo_objects, nvidia_slices

GPU = "nvidia.com/gpu"


def state_of(objects) -> ServiceState:
    state = ServiceState()
    load_into(state, copy.deepcopy(objects))
    return state


def same_as_a_new_model(state: ServiceState) -> None:
    rebuilt = state_of([o for kind in ("Node", "Pod", "Topology", "DeviceClass", "ResourceSlice", "ResourceClaim",
                                       "ResourceClaimTemplate") for o in state.objects.list(kind)])
    mine, theirs = state.cluster, rebuilt.cluster
    assert mine.resources.names == theirs.resources.names
    assert np.array_equal(mine.capacity.allocatable, theirs.capacity.allocatable)
    assert np.array_equal(mine.capacity.free, theirs.capacity.free)


def test_a_slice_event_is_applied_in_place():
    state = state_of(demo_objects())
    rebuilds, evaluated = state.rebuilds, state.cluster.devices.cache.evaluations
    fewer = nvidia_slices("node-34")[0]
    fewer["spec"]["devices"] = fewer["spec"]["devices"][:6]
    state.apply(kind_of(fewer), "MODIFIED", fewer)
    state.refresh()
    assert state.rebuilds == rebuilds and not state.stale
    assert state.cluster.devices.cache.evaluations == evaluated        # the same devices: answers kept
    column, row = state.cluster.resources.column[GPU], state.cluster.node_index["node-34"]
    assert state.cluster.capacity.free[row, column] == 6
    same_as_a_new_model(state)
    mark = state.changes.mark()
    back = nvidia_slices("node-34")[0]
    state.apply(kind_of(back), "MODIFIED", back)
    assert state.cluster.capacity.free[row, column] == 8 and state.rebuilds == rebuilds
    only = np.zeros(len(state.cluster.nodes), dtype=bool)
    only[row] = True
    assert state.changes.freed_since(mark, only)                       # room came back: refusals look again
    same_as_a_new_model(state)


def test_a_slice_event_evaluates_cel_only_for_the_devices_it_changed():
    state = state_of(demo_objects())
    evaluated = state.cluster.devices.cache.evaluations
    changed = nvidia_slices("node-36")[0]
    changed["spec"]["devices"][2]["attributes"]["productName"] = {"string": "NVIDIA H200"}
    state.apply(kind_of(changed), "MODIFIED", changed)
    assert state.cluster.devices.cache.evaluations - evaluated == 2    # that device, for each of the two classes
    same_as_a_new_model(state)


def test_a_deleted_slice_takes_its_devices_away_in_place():
    state = state_of(demo_objects())
    rebuilds = state.rebuilds
    gone = next(s for s in state.objects.list("ResourceSlice", "resource.k8s.io") if s["spec"]["nodeName"] == "node-36")
    state.apply(kind_of(gone), "DELETED", gone)
    assert state.rebuilds == rebuilds and not state.stale
    assert state.cluster.capacity.free[state.cluster.node_index["node-36"], state.cluster.resources.column[GPU]] == 0
    same_as_a_new_model(state)


def test_a_class_event_is_applied_in_place_and_a_new_class_builds_a_new_model():
    state = state_of(demo_objects())
    rebuilds = state.rebuilds
    narrower = copy.deepcopy(DRA_GPU_CLASS)
    narrower["spec"]["selectors"].append(
        {"cel": {"expression": "device.attributes['resource.kubernetes.io'].pcieRoot == 'pci0000:00'"}})
    state.apply(kind_of(narrower), "MODIFIED", narrower)
    assert state.rebuilds == rebuilds and not state.stale
    assert state.cluster.capacity.allocatable[state.cluster.node_index["node-34"], state.cluster.resources.column[GPU]] == 4
    same_as_a_new_model(state)
    other = copy.deepcopy(DRA_MIG_CLASS)
    other["metadata"]["name"] = "mig-too"
    state.apply(kind_of(other), "ADDED", other)
    assert state.stale                                # a new column: rebuilt, once, by refresh()
    state.refresh()
    assert "mig-too" in state.cluster.resources.column
    same_as_a_new_model(state)


def test_a_rebuild_takes_over_the_cel_answers():
    state = state_of(demo_objects())
    evaluated = state.cluster.devices.cache.evaluations
    node = next(o for o in state.objects.list("Node") if o["metadata"]["name"] == "node-05")
    relabelled = copy.deepcopy(node)
    relabelled["metadata"]["labels"]["example.com/pool"] = "new"
    state.apply(kind_of(relabelled), "MODIFIED", relabelled)
    state.refresh()                                   # labels changed: a new model
    assert state.cluster.devices.cache.evaluations == evaluated
