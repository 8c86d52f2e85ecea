"""A gang waits for its minimum: while fewer pods exist than a PodGroup's minMember, none of them gets a
node (as KAI and coscheduling do), so a controller creating pods one by one never splits a gang."""
from __future__ import annotations

from topology.groups import GroupTree


def waiting_for_members(tree: GroupTree) -> str:
    """The refusal while some leaf has fewer pods than its minMember; "" once every minimum exists."""
    leaves = [group for group in tree.groups() if group.is_leaf]
    exist = sum(len(leaf.slots) for leaf in leaves)
    need = sum(max(len(leaf.slots), leaf.min_member or 0) for leaf in leaves)
    if exist >= need:
        return ""
    return f"waiting for {need - exist} more pods of gang {tree.key}: {exist} of {need} exist"
