"""Issue 29: one identity cache. The webhook groups a workload as the engine does (with the cluster's
PriorityClasses), from the same cache: a workload is grouped once for both."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

from app.http.webhook import webhook_context
from app.scheduling import planning
from topology.demo import demo_objects

from service_helpers import job_pods, make_client, service
from test_extender_priority_class import job_with_class, priority_class


def webhook_view(client):
    """The webhook's Context, as its route builds it for a request."""
    return asyncio.run(webhook_context(SimpleNamespace(app=client.app)))


def test_the_webhook_groups_a_gang_with_the_priority_its_priority_class_gives():
    job = job_with_class("urgent", "high")
    client = make_client(job, objects=[*demo_objects(), priority_class("high", 100000, policy="Never")])
    context = webhook_view(client)
    owner = context.objects.get("Job", "team-a", "urgent")
    [tree] = context.trees.trees(owner, context.topologies)
    assert (tree.priority, tree.preemption_policy) == (100000, "Never")


def test_the_webhook_and_the_engine_share_one_grouping_of_a_workload():
    job = job_with_class("shared", "high")
    client = make_client(job, objects=[*demo_objects(), priority_class("high", 100000)])
    context = webhook_view(client)
    [webhook_tree] = context.trees.trees(context.objects.get("Job", "team-a", "shared"), context.topologies)
    engine_tree = planning.identify(service(client), job_pods(job)[0]).tree
    assert engine_tree is webhook_tree
