"""The scheduling engine: the logic behind the extender verbs (filter, prioritize, bind, preempt), the gang
lifecycle (plan, reserve, steer, re-plan, stale, wake-ups, refusals, member waits) and gang preemption.
No web framework and no Kubernetes client here: the HTTP layer (app.http) calls GangScheduler, and the
cluster is reached through the ClusterWriter port (app.ports)."""
from .engine import GangScheduler
from .outcome import FilterOutcome

__all__ = ["FilterOutcome", "GangScheduler"]
