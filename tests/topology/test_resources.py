"""A pod's effective request as the scheduler computes it, and the resource columns of the matrices."""
import numpy as np
import pytest

from topology.quantity import QuantityError
from topology.resources import ResourceIndex, container_requests, pod_requests

GPU = "nvidia.com/gpu"
GI = 2**30


def container(requests=None, limits=None, **extra):
    return {"name": "c", "resources": {"requests": requests or {}, "limits": limits or {}}, **extra}


def test_containers_add_up_and_take_one_pods_slot():
    spec = {"containers": [container({"cpu": "500m", "memory": "1Gi"}), container({"cpu": "1.5", GPU: "2"})]}
    assert pod_requests(spec) == {"cpu": 2000, "memory": GI, GPU: 2, "pods": 1}


def test_a_pod_without_requests_still_takes_a_pods_slot():
    assert pod_requests({"containers": [{"name": "c"}]}) == {"pods": 1}
    assert pod_requests({}) == {"pods": 1}


def test_limits_only_resources_request_their_limit():
    spec = {"containers": [container(limits={GPU: "4", "cpu": "2"}, requests={"cpu": "1"})]}
    assert pod_requests(spec) == {"cpu": 1000, GPU: 4, "pods": 1}
    assert container_requests({"resources": {"limits": {"memory": "1Gi"}}}) == {"memory": GI}


def test_the_largest_init_container_wins_per_resource():
    spec = {"containers": [container({"cpu": "1", "memory": "1Gi"})],
            "initContainers": [container({"cpu": "3"}), container({"memory": "4Gi"}), container({"cpu": "2"})]}
    assert pod_requests(spec) == {"cpu": 3000, "memory": 4 * GI, "pods": 1}


def test_init_containers_smaller_than_the_containers_change_nothing():
    spec = {"containers": [container({"cpu": "4"})], "initContainers": [container({"cpu": "1"})]}
    assert pod_requests(spec) == {"cpu": 4000, "pods": 1}


def test_sidecars_run_beside_the_containers_and_later_init_containers():
    sidecar = container({"cpu": "500m"}, restartPolicy="Always")
    # a sidecar adds to the containers; an init container started after it runs alongside it
    after = {"containers": [container({"cpu": "1"})], "initContainers": [sidecar, container({"cpu": "2"})]}
    assert pod_requests(after)["cpu"] == 2500           # max(1 + 0.5, 0.5 + 2)
    # an init container started before the sidecar runs alone
    before = {"containers": [container({"cpu": "1"})], "initContainers": [container({"cpu": "2"}), sidecar]}
    assert pod_requests(before)["cpu"] == 2000          # max(1 + 0.5, 2, 0.5)
    only = {"containers": [container({"cpu": "1"})], "initContainers": [sidecar]}
    assert pod_requests(only)["cpu"] == 1500


def test_sidecars_accumulate():
    spec = {"containers": [container({"memory": "1Gi"})],
            "initContainers": [container({"memory": "1Gi"}, restartPolicy="Always"),
                               container({"memory": "2Gi"}, restartPolicy="Always"),
                               container({"memory": "2Gi"})]}
    assert pod_requests(spec)["memory"] == 5 * GI        # max(1 + 1 + 2, 1 + 2 + 2)


def test_overhead_is_added_after_the_max():
    spec = {"containers": [container({"cpu": "1"})], "initContainers": [container({"cpu": "2"})],
            "overhead": {"cpu": "250m", "memory": "120Mi"}}
    assert pod_requests(spec) == {"cpu": 2250, "memory": 120 * 2**20, "pods": 1}


def test_pod_level_requests_replace_the_containers_sum_then_overhead_adds():
    """PodLevelResources (on by default since v1.34): spec.resources.requests of CPU, memory and hugepages
    stand for the whole pod; other resources still come from the containers."""
    spec = {"containers": [container({"cpu": "1", "memory": "1Gi", GPU: "4"}), container({"cpu": "1"})],
            "resources": {"requests": {"cpu": "16", "memory": "64Gi"}, "limits": {"cpu": "16"}},
            "overhead": {"cpu": "250m"}}
    assert pod_requests(spec) == {"cpu": 16250, "memory": 64 * GI, GPU: 4, "pods": 1}


def test_pod_level_limits_stand_for_requests_no_container_makes():
    """The API server's defaulting: a pod-level limit becomes the pod-level request of a resource no
    container requests; a resource the containers request keeps their sum."""
    spec = {"containers": [container({"memory": "2Gi"}, limits={GPU: "1"})],
            "resources": {"limits": {"cpu": "8", "memory": "16Gi", "hugepages-2Mi": "1Gi"}}}
    assert pod_requests(spec) == {"cpu": 8000, "memory": 2 * GI, "hugepages-2Mi": GI, GPU: 1, "pods": 1}


def test_pod_level_resources_the_api_server_does_not_support_are_ignored():
    spec = {"containers": [container({GPU: "2"})], "resources": {"requests": {GPU: "8"}, "limits": {GPU: "8"}}}
    assert pod_requests(spec) == {GPU: 2, "pods": 1}


def test_bad_pod_level_resources_are_named():
    with pytest.raises(ValueError, match=r"spec\.resources"):
        pod_requests({"containers": [], "resources": {"requests": {"cpu": "lots"}}})
    with pytest.raises(ValueError, match=r"spec\.resources"):
        pod_requests({"containers": [], "resources": ["cpu"]})


def test_a_bad_quantity_is_an_error():
    with pytest.raises(QuantityError, match="'2 cores'"):
        pod_requests({"containers": [container({"cpu": "2 cores"})]})


def test_resource_index_columns_and_vectors():
    index = ResourceIndex([GPU, "memory", "example.com/fpga", "cpu"])
    assert index.names == ("cpu", "memory", "pods", "example.com/fpga", GPU)
    assert len(index) == 5 and index.column[GPU] == 4
    row = index.vector({"cpu": 1500, GPU: 2, "pods": 1, "vendor.com/nic": 1})
    assert row.dtype == np.int64
    assert row.tolist() == [1500, 0, 1, 0, 2]
    assert index.unknown({"cpu": 1, "vendor.com/nic": 1, "other.com/x": 0}) == ["vendor.com/nic"]
    assert index.as_dict(row) == {"cpu": 1500, "pods": 1, GPU: 2}


def test_a_bad_quantity_error_names_the_container_field():
    spec = {"containers": [container({"cpu": "1"})], "initContainers": [container({"memory": "lots"})]}
    with pytest.raises(QuantityError, match=r"spec.initContainers\[0\].resources \(memory\): .*'lots'"):
        pod_requests(spec)
    with pytest.raises(QuantityError, match=r"spec.overhead.resources \(cpu\)"):
        pod_requests({"containers": [], "overhead": {"cpu": "x"}})


@pytest.mark.parametrize("spec, field", [
    ({"containers": ["main"]}, r"spec.containers\[0\]='main' is invalid"),
    ({"containers": [{"resources": ["cpu"]}]}, r"spec.containers\[0\].resources=\['cpu'\] is invalid"),
    ({"containers": [{"resources": {"requests": ["cpu", "1"]}}]}, r"spec.containers\[0\].resources.requests="),
])
def test_a_malformed_container_is_a_value_error_naming_the_field(spec, field):
    # a ValueError (as callers such as Cluster.add_pod expect), never AttributeError / TypeError
    with pytest.raises(ValueError, match=field):
        pod_requests(spec)
