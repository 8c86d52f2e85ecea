"""Topology-aware gang preemption: free one whole domain for a high-priority gang in one step.

- candidates.py: who may be evicted (running pods of strictly lower priority, grouped by gang, with the
  pods each gang can spare without dropping below its minimum) and the ways to evict inside a domain;
- cost.py: the cost of a choice, compared in order: the highest victim priority, whole gangs broken,
  pods evicted, then the planner's usual placement rank;
- advice.py: what would make a refused gang fit (the same search, at its priority and at any), for the
  what-if advice and the refusal's "fits in X if Y is evicted" clause;
- select.py: evaluate each candidate domain at the gang's required level (or its preferred ladder) as if
  the victims were gone, and pick the cheapest that makes the whole plan fit.

Pure: other gangs come in as RunningGang values, the preemptor as the planner's PlanInput.
"""
from .advice import Advice, advise, beyond_priority, cannot_preempt_clause, protected_by_budgets
from .candidates import RunningGang, RunningPod, Victim, candidate_gangs
from .cost import Cost
from .select import DomainOutcome, PreemptionPlan, select_victims

__all__ = ["Advice", "advise", "beyond_priority", "cannot_preempt_clause", "protected_by_budgets", "Cost", "DomainOutcome", "PreemptionPlan", "RunningGang", "RunningPod", "Victim",
           "candidate_gangs", "select_victims"]
