"""DRA device counts kept in place (issue 38 item 5): slice and class events applied to the model and the
Cluster's rows agree with a model built from scratch on the same objects; CEL answers are kept per (class,
device content) across models; pools are indexed by node."""
from __future__ import annotations

import copy

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from topology.cluster import Cluster
from topology.demo import (DRA_GPU_CLASS, DRA_MIG_CLASS, _node, dra_claim, dra_node, nvidia_slices)
from topology.dra import DeviceCache, DeviceModel
from topology.nodes import NodeInfo

GPU = "nvidia.com/gpu"
NODES = [f"node-{i:02d}" for i in range(1, 5)]


def nodes():
    return [NodeInfo.from_object(dra_node(_node(i, "zone-a", "block-1", f"rack-{(i - 1) // 2}"))) for i in range(1, 5)]


def slices(mig_node: str | None = "node-03"):
    return [s for n in NODES for s in nvidia_slices(n, mig=n == mig_node)]


def model(classes, slice_objects, claims=(), cache=None):
    return DeviceModel(classes, slice_objects, claims, nodes(), cache=cache)


def matrices(cluster: Cluster) -> dict:
    return {name: cluster.capacity.allocatable[:, column].tolist() for name, column in cluster.resources.column.items()} | \
        {f"free {name}": cluster.capacity.free[:, column].tolist() for name, column in cluster.resources.column.items()}


def fresh(classes, slice_objects, claims=()) -> dict:
    return matrices(Cluster(nodes(), (), model(copy.deepcopy(classes), copy.deepcopy(slice_objects), claims)))


def classes():
    return copy.deepcopy([DRA_GPU_CLASS, DRA_MIG_CLASS])


def test_a_slice_event_changes_only_its_nodes_rows_and_agrees_with_a_new_model():
    objects, kinds = slices(), classes()
    claim = dra_claim("c", "ns", "node-01", ["gpu-0", "gpu-1"])
    cluster = Cluster(nodes(), (), model(kinds, objects, [claim]))
    smaller = nvidia_slices("node-02")[0]
    smaller["spec"]["devices"] = smaller["spec"]["devices"][:5]
    before = next(s for s in objects if s["metadata"]["name"] == smaller["metadata"]["name"])
    touched = cluster.devices.apply_slice(before, smaller)
    assert touched == {"node-02"}
    assert cluster.devices_changed([cluster.node_index["node-02"]])
    objects = [smaller if s is before else s for s in objects]
    assert matrices(cluster) == fresh(kinds, objects, [claim])
    assert cluster.capacity.allocatable[cluster.node_index["node-02"], cluster.resources.column[GPU]] == 5


def test_a_deleted_slice_takes_its_devices_and_a_new_column_needs_a_new_cluster():
    objects, kinds = slices(mig_node=None), classes()[:1]
    cluster = Cluster(nodes(), (), model(kinds, objects))
    gone = objects[0]
    assert cluster.devices.apply_slice(gone, None) == {"node-01"}
    assert cluster.devices_changed([0])
    assert matrices(cluster) == fresh(kinds, objects[1:])
    # MIG devices appear on node-02: a class column the node did not count yet -> False, nothing changed
    mig = Cluster(nodes(), (), model(classes(), objects))
    kept = matrices(mig)
    new = nvidia_slices("node-02", mig=True)
    assert mig.devices.apply_slice(objects[1], new[1]) == {"node-02"}
    assert not mig.devices_changed([1])
    assert matrices(mig) == kept


def test_a_class_event_matches_only_that_class_again():
    objects, kinds = slices(), classes()
    cache = DeviceCache()
    cluster = Cluster(nodes(), (), model(kinds, objects, cache=cache))
    evaluated = cache.evaluations
    first_gpus = copy.deepcopy(DRA_GPU_CLASS)
    first_gpus["spec"]["selectors"].append(
        {"cel": {"expression": "device.attributes['resource.kubernetes.io'].pcieRoot == 'pci0000:00'"}})
    touched = cluster.devices.apply_class(DRA_GPU_CLASS, first_gpus)
    assert touched == set(NODES)
    # only the new expressions were evaluated, once per device (mig.nvidia.com untouched)
    assert cache.evaluations - evaluated == sum(len(p.devices) for p in cluster.devices.pools.values()) == 48
    assert cluster.devices_changed([cluster.node_index[n] for n in touched])
    assert matrices(cluster) == fresh([first_gpus, DRA_MIG_CLASS], objects)
    assert cluster.capacity.allocatable[0, cluster.resources.column[GPU]] == 4
    # back to the first selectors: their answers are still cached
    evaluated = cache.evaluations
    cluster.devices.apply_class(first_gpus, DRA_GPU_CLASS)
    assert cache.evaluations == evaluated


def test_a_class_that_comes_goes_or_starts_failing_needs_a_new_model():
    objects = slices()
    devices = model(classes(), objects)
    assert devices.apply_class(None, DRA_GPU_CLASS | {"metadata": {"name": "other"}}) is None
    assert devices.apply_class(DRA_MIG_CLASS, None) is None
    broken = copy.deepcopy(DRA_MIG_CLASS)
    broken["spec"]["selectors"] = [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].nosuch == 1"}}]
    assert devices.apply_class(DRA_MIG_CLASS, broken) is None
    assert "mig.nvidia.com" in devices.errors


def versioned(objects):
    for i, obj in enumerate(objects):
        obj["metadata"] |= {"uid": f"uid-{i}", "resourceVersion": "7"}
    return objects


def test_a_new_model_evaluates_no_cel_for_slices_and_classes_it_has_seen():
    cache = DeviceCache()
    model(classes(), versioned(slices()), cache=cache)
    evaluated = cache.evaluations
    assert evaluated > 0
    again = model(classes(), versioned(slices()), cache=cache)     # a relist: other objects, same versions
    assert cache.evaluations == evaluated
    assert again.counts("node-03") == model(classes(), slices()).counts("node-03")
    changed = versioned(slices())
    changed[0]["spec"]["devices"][0]["attributes"]["productName"] = {"string": "NVIDIA B200"}
    changed[0]["metadata"]["resourceVersion"] = "8"
    model(classes(), changed, cache=cache)
    assert cache.evaluations - evaluated == 2              # the one device changed, for each of the two classes


def test_slices_are_parsed_once_per_object():
    cache = DeviceCache()
    objects = slices()
    first = model(classes(), objects, cache=cache)
    second = model(classes(), objects, cache=cache)
    assert all(second.slices[name] is first.slices[name] for name in first.slices)


def test_pools_are_indexed_by_node():
    devices = model(classes(), slices())
    assert [key for key, _ in devices.pools_of("node-03")] == [("gpu.nvidia.com", "node-03")]
    assert list(devices.pools_of("elsewhere")) == []


def test_identical_counter_maps_and_names_are_shared_between_nodes():
    devices = model(classes(), slices(mig_node=None) + nvidia_slices("node-05", mig=True)[1:])
    gpu0 = [d for p in devices.pools.values() for d in p.devices if d.name == "gpu-0"]
    assert len(gpu0) == 5 and len({id(d.name) for d in gpu0}) == 1
    consumes = [d.flat for p in devices.pools.values() for d in p.devices if d.flat]
    assert len({id(c) for c in consumes}) == 8 * 3          # per GPU: its own, each of its halves'


EVENTS = st.lists(st.tuples(st.sampled_from(NODES), st.sampled_from(["fewer", "more", "delete", "mig", "back"])),
                  min_size=1, max_size=6)


@settings(max_examples=40, deadline=None)
@given(EVENTS)
def test_any_sequence_of_slice_events_agrees_with_a_model_built_from_scratch(events):
    kinds = classes()
    current = {s["metadata"]["name"]: s for s in slices()}
    claims = [dra_claim("c1", "ns", "node-01", ["gpu-0"]),
              dra_claim("c3", "ns", "node-03", ["gpu-1-mig-3g40gb-9-0"])]
    cluster = Cluster(nodes(), (), model(kinds, list(current.values()), claims))
    for node, what in events:
        names = [n for n in current if n.startswith(f"{node}-")]
        if what == "delete" and names:
            gone = current.pop(names[-1])
            changes = [(gone, None)]
        else:
            new = nvidia_slices(node, mig=what == "mig")
            if what == "fewer":
                new[-1]["spec"]["devices"] = new[-1]["spec"]["devices"][:3]
            changes = [(current.pop(n), None) for n in names if n not in {s["metadata"]["name"] for s in new}]
            changes += [(current.get(s["metadata"]["name"]), s) for s in new]
            current.update({s["metadata"]["name"]: s for s in new})
        for before, after in changes:
            touched = cluster.devices.apply_slice(before, after)
            rows = [cluster.node_index[n] for n in touched or ()]
            if touched is None or not cluster.devices_changed(rows):
                cluster = Cluster(nodes(), (), model(kinds, list(current.values()), claims))
    rebuilt = Cluster(nodes(), (), model(kinds, list(current.values()), claims))
    for name, column in rebuilt.resources.column.items():
        mine = cluster.resources.column.get(name)
        theirs = rebuilt.capacity.allocatable[:, column]
        assert mine is not None or not theirs.any(), name
        if mine is not None:
            assert np.array_equal(cluster.capacity.allocatable[:, mine], theirs), name
            assert np.array_equal(cluster.capacity.free[:, mine], rebuilt.capacity.free[:, column]), name


def test_what_evicting_a_pod_frees_follows_a_class_event_in_place():
    from topology.demo import _pod
    claim = dra_claim("p-gpu", "research", "node-01", ["gpu-0", "gpu-1", "gpu-2", "gpu-3"])
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": "p", "uid": "demo-p"}]
    cluster = Cluster(nodes(), (), model(classes(), slices(mig_node=None), [claim]))
    cluster.add_pod(_pod("p", "node-01", 4))
    column = cluster.resources.column["gpu.nvidia.com"]
    assert cluster.eviction_usage("research/p")[column] == 4
    second_root = copy.deepcopy(DRA_GPU_CLASS)              # GPUs 4-7 only: none of the claim's
    second_root["spec"]["selectors"].append(
        {"cel": {"expression": "device.attributes['resource.kubernetes.io'].pcieRoot == 'pci0000:01'"}})
    touched = cluster.devices.apply_class(DRA_GPU_CLASS, second_root)
    assert cluster.devices_changed([cluster.node_index[n] for n in touched])
    assert cluster.eviction_usage("research/p")[column] == 0


def test_a_slice_event_with_request_selector_columns_asks_for_a_new_cluster():
    """A template asking a request selector has a column counted on the model it was built on
    (topology/dra_requests.py): a slice applied in place would leave that column counting the old devices, so
    the Cluster asks for a new one and changes nothing."""
    objects, kinds = slices(mig_node=None), classes()[:1]
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": "h100", "namespace": "ns"},
                "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                    "deviceClassName": DRA_GPU_CLASS["metadata"]["name"], "count": 1,
                    "selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].index >= 0"}}]}}]}}}}
    cluster = Cluster(nodes(), (), DeviceModel(kinds, objects, (), nodes(), [template]))
    assert cluster.request_columns.selectors
    kept = matrices(cluster)
    smaller = copy.deepcopy(objects[0])
    smaller["spec"]["devices"] = smaller["spec"]["devices"][:5]
    assert cluster.devices.apply_slice(objects[0], smaller) == {"node-01"}
    assert not cluster.devices_changed([0])
    assert matrices(cluster) == kept
