"""The gang and segment planner: place a whole group tree on a topology, or refuse and say why.

- Required level (hard), at any group: all its pods in one domain of that level, inside its parent's.
- Every group climbs from the finest level upward (so a preferred level is met when possible, and a
  group is never placed more spread out than it must be), never above its required level; at the top it
  splits across as few domains as possible.
- Gang: the mandatory pods of the whole tree (minMember, minSubGroup k of n, recursively) are all placed
  or the plan is refused; elastic pods and extra subgroups follow, best effort, inside the required
  domains, as close as possible.
- Candidate domains are pruned with vectorized counts (candidates.fitting) and tried in the order of
  the gang's placement policy (policies/: binpack, tightest leftover first; spread, emptiest first), a
  bounded number per group and level. Exclusive groups take a domain that holds no
  other gang's pods. Running pods pin their groups. Same input, same plan.
"""
from .demand import PlanError
from .gang import evaluate_domain, plan_gang
from .inputs import build_plan_input, occupied_masks, plan_for
from .policies import PlacementPolicy, policy_named, policy_names, register
from .rank import common_level
from .replan import replan_slots

__all__ = ["PlacementPolicy", "PlanError", "build_plan_input", "common_level", "evaluate_domain", "occupied_masks",
           "plan_for", "plan_gang", "policy_named", "policy_names", "register", "replan_slots"]
