"""Issue 13 item 3: a gang planned from its template takes the priority of the PriorityClass the template
names (or of the globalDefault class), as the Priority admission plugin will give its pods."""
from __future__ import annotations

from app.scheduling import planning
from app.state import kind_named
from grouper import group_workload
from topology.demo import demo_objects

from service_helpers import indexed_job, job_pods, make_client, service


def priority_class(name: str, value: int, *, default: bool = False, policy: str | None = None) -> dict:
    obj = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
           "metadata": {"name": name, "resourceVersion": "1"}, "value": value, "globalDefault": default}
    if policy:
        obj["preemptionPolicy"] = policy
    return obj


def job_with_class(name: str, class_name: str | None) -> dict:
    job = indexed_job(name, pods=4, gpus=4, segment=None)
    if class_name:
        job["spec"]["template"]["spec"]["priorityClassName"] = class_name
    return job


def tree_of(client, job: dict):
    return planning.identify(service(client), job_pods(job)[0]).tree


def test_template_priority_class_gives_the_gang_its_priority_before_any_pod_is_admitted():
    job = job_with_class("urgent", "high")
    client = make_client(job, objects=[*demo_objects(), priority_class("high", 100000, policy="Never")])
    tree = tree_of(client, job)
    assert (tree.priority, tree.preemption_policy) == (100000, "Never")


def test_global_default_class_applies_to_templates_naming_none_the_lowest_default_wins():
    job = job_with_class("plain", None)
    classes = [priority_class("everyone", 500, default=True), priority_class("also", 700, default=True),
               priority_class("high", 100000)]
    client = make_client(job, objects=[*demo_objects(), *classes])
    assert tree_of(client, job).priority == 500


def test_a_priority_class_created_later_is_seen_through_the_watch():
    job = job_with_class("later", "high")
    client = make_client(job)
    assert tree_of(client, job).priority == 0            # unknown class: nothing to go by yet
    service(client).apply(kind_named("PriorityClass", "scheduling.k8s.io"), "ADDED", priority_class("high", 4242))
    assert tree_of(client, job).priority == 4242


def test_template_spec_priority_wins_over_a_class():
    job = job_with_class("explicit", "high")
    job["spec"]["template"]["spec"]["priority"] = 7
    assert group_workload(job, None, [priority_class("high", 100000)])[0].priority == 7
