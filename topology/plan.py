"""What the planner is given and what it answers. The algorithm lives in topology/planner/."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .groups import GroupTree, Slot
from .resources import ResourceIndex
from .tree import TopologyTree


@dataclass
class PlanInput:
    tree: GroupTree
    topology: TopologyTree | None          # None: a plain gang without topology constraints
    free: np.ndarray                       # node x resource free capacity (a private snapshot)
    resources: ResourceIndex
    node_names: list[str]
    requests: dict[str, np.ndarray]        # role -> request row
    usable: dict[str, np.ndarray]          # role -> bool mask over nodes
    bound: dict[Slot, int] = field(default_factory=dict)     # slots already running -> node index
    strategy: str = "binpack"             # a placement policy's name (planner/policies/; the gang's own wins)
    # Per level, a bool mask over domains that hold pods of other gangs (for exclusive placement).
    occupied: list[np.ndarray] | None = None
    excluded: dict[str, int] = field(default_factory=dict)   # reason -> nodes excluded (for refusals)
    unplaceable: dict[str, str] = field(default_factory=dict)  # role -> why no node can ever hold it
    allocatable: np.ndarray | None = None  # node x resource when empty: refusals say "can never fit"
    # role -> the nodes the pod's own rules allow, before this attempt's candidates and pod affinity narrow
    # `usable`: "can never fit" is judged on these (None: on `usable`)
    possible: dict[str, np.ndarray] | None = None
    search_budget: int | None = None       # candidate tries before the search turns greedy (None: automatic)
    # Roles of which one node may hold only a few pods, whatever its room (required pod anti-affinity on the
    # hostname, host ports: 1; topology spread on the hostname: maxSkew): role -> that many.
    per_node: dict[str, int] = field(default_factory=dict)
    # Roles whose pods repel each other on a coarser level (required pod anti-affinity on a rack or block
    # key): role -> the topology level index; at most one pod of the role per domain of that level.
    one_per_domain: dict[str, int] = field(default_factory=dict)
    # Column pairs counting the same devices on some nodes (a DRA class and the extended resource it serves,
    # topology/dra_requests.py Links): a placement lowers both. Empty: every column is its own.
    links: object = ()
    # Unallocated ResourceClaims the gang's pods name (topology/dra_requests.py SharedClaim): each is
    # allocated once, on one node its pods then share; not in the roles' requests.
    shared: list = field(default_factory=list)
    # False: a refusal skips saying why (reason "does not fit"; the offline simulator asks again only for
    # the refusal it reports). Explained refusals tell in details["never_fits"] whether the gang could
    # fit even in the empty cluster.
    explain: bool = True
    # True: the caller never changes this tree in place, so its analysis (group sizes, minimums, slot
    # numbering) is kept for the next plan of the same tree object (the offline simulator's retries).
    keep_analysis: bool = False


@dataclass
class GroupPlacement:
    group: str
    level: str | None = None               # the level name the group is confined to (None: unconstrained)
    domain: str | None = None              # domain id (path of values) at that level
    spans: dict[str, int] = field(default_factory=dict)     # level name -> domains used at that level
    pods: int = 0                          # pods of the group's subtree in the plan (bound ones included)


@dataclass
class Plan:
    placed: bool
    slots: dict[Slot, int] = field(default_factory=dict)     # slot -> node index
    groups: dict[str, GroupPlacement] = field(default_factory=dict)
    reason: str = ""                       # why not placed (or why elastic pods were left out)
    unplaced: list[Slot] = field(default_factory=list)        # elastic slots that did not fit
    rank: tuple = ()
    details: dict = field(default_factory=dict)
