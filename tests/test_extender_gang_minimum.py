"""Issue 13 item 2: a gang's pods get no node until at least its minimum exists."""
from __future__ import annotations

from service_helpers import GPU, filter_, make_client, schedule, service


def podgroup(name: str, min_member: int) -> dict:
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}", "resourceVersion": "1"},
            "spec": {"minMember": min_member}}


def member(group: str, index: int) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{group}-{index}", "namespace": "team-a", "uid": f"uid-{group}-{index}",
                         "resourceVersion": "1", "labels": {"scheduling.x-k8s.io/pod-group": group}},
            "spec": {"containers": [{"name": "main", "image": "trainer",
                                     "resources": {"limits": {GPU: "8"}, "requests": {GPU: "8"}}}]},
            "status": {"phase": "Pending"}}


def test_no_pod_gets_a_node_until_the_minimum_exists():
    client = make_client(podgroup("pg-x", 4))
    pods = [member("pg-x", i) for i in range(4)]
    answer = filter_(client, pods[0])
    assert answer["NodeNames"] == []
    assert set(answer["FailedNodes"].values()) == {"waiting for 3 more pods of gang team-a/pg-x: 1 of 4 exist"}
    assert service(client).cluster.capacity.reserved.sum() == 0          # nothing held while waiting
    for pod in pods[1:3]:
        assert filter_(client, pod)["NodeNames"] == []
    placed = [schedule(client, pod) for pod in reversed(pods)]           # the fourth arrives: all land
    assert all(placed) and len(set(placed)) == 4
