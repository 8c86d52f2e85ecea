"""Topology objects (KAI, Kueue, Volcano HyperNode) as domain trees over one node list."""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from .nodes import NodeInfo, _expression_matches
from .objects import api_group
from .tree import HOSTNAME_LABEL, Level, LevelError, TopologyTree

VOLCANO_TOPOLOGY_NAME = "volcano"


class TopologyError(ValueError):
    """A Topology or HyperNode object that cannot become a tree."""


def object_name(obj: Mapping) -> str:
    """metadata.name of a Topology or HyperNode, which every tree and message is keyed by."""
    metadata = obj.get("metadata") or {}
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if not name or not isinstance(name, str):
        raise TopologyError(f"{obj.get('kind') or 'object'} without metadata.name (a non-empty string)")
    return name


def spec_of(obj: Mapping) -> Mapping:
    """spec of a Topology or HyperNode ({} when absent); a TopologyError when it is not a mapping."""
    spec = obj.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise TopologyError(f"{obj.get('kind')} {object_name(obj)!r}: spec={spec!r:.60} is invalid; "
                            f"expected a mapping")
    return spec


def label_levels(obj: Mapping) -> list[Level]:
    """Levels of a KAI or Kueue Topology: spec.levels[].nodeLabel with an optional alias."""
    name = object_name(obj)
    levels = spec_of(obj).get("levels") or []
    if not levels or not isinstance(levels, list):
        raise TopologyError(f"Topology {name!r}: spec.levels must list at least one level with a nodeLabel")
    result = []
    for i, level in enumerate(levels):
        label = level.get("nodeLabel") if isinstance(level, Mapping) else None
        if not label or not isinstance(label, str):
            raise TopologyError(f"Topology {name!r}: spec.levels[{i}].nodeLabel is required "
                                f"(each level is a mapping such as {{nodeLabel: kubernetes.io/hostname}})")
        result.append(Level(label, level.get("alias")))
    keys = [level.key for level in result]
    if len(set(keys)) != len(keys):
        raise TopologyError(f"Topology {name!r}: spec.levels repeat a nodeLabel: {keys}")
    return result


def label_paths(nodes: Sequence[NodeInfo], levels: Sequence[Level]) -> tuple[list, dict[str, str]]:
    """Each node's label values along the levels, or None (with the reason) when one is missing."""
    columns = [[n.labels.get(HOSTNAME_LABEL, n.name) for n in nodes] if level.key == HOSTNAME_LABEL
               else [n.labels.get(level.key) for n in nodes] for level in levels]     # column by column: fast
    paths: list = list(zip(*columns)) if columns else [()] * len(nodes)
    excluded: dict[str, str] = {}
    for level, column in zip(levels, columns):
        for i in [i for i, value in enumerate(column) if value is None]:
            if paths[i] is not None:                 # the first missing label is the reason
                excluded[nodes[i].name] = f"missing level label {level.key}"
                paths[i] = None
    return paths, excluded


def tree_from_labels(obj: Mapping, nodes: Sequence[NodeInfo]) -> TopologyTree:
    levels = label_levels(obj)
    paths, excluded = label_paths(nodes, levels)
    source = f"{obj.get('apiVersion')}/{obj.get('kind')}"
    return TopologyTree(object_name(obj), source, levels, [n.name for n in nodes], paths, excluded)


# --- Volcano HyperNodes ---------------------------------------------------------------------------

MEMBER_TYPES = ("Node", "HyperNode")
Matcher = Callable[[str, Mapping[str, str]], bool]


def _member_matcher(hypernode: str, index: int, member) -> tuple[str, Matcher]:
    """The type of spec.members[index] and a test of (name, labels) against its selector; a bad member
    (unknown type, invalid regex) is an error naming the field."""
    field = f"HyperNode {hypernode!r}: spec.members[{index}]"
    member_type = member.get("type") if isinstance(member, Mapping) else None
    if member_type not in MEMBER_TYPES:
        raise TopologyError(f"{field}.type={member_type!r} is invalid; valid: {', '.join(MEMBER_TYPES)}")
    selector = member.get("selector") or {}
    if not isinstance(selector, Mapping) or not all(isinstance(selector[k] or {}, Mapping) for k in selector):
        raise TopologyError(f"{field}.selector={selector!r:.60} is invalid; expected a mapping with one of "
                            f"exactMatch, regexMatch, labelMatch (each a mapping)")
    if "exactMatch" in selector:
        exact = (selector["exactMatch"] or {}).get("name")
        return member_type, lambda name, labels: name == exact
    if "regexMatch" in selector:
        pattern = (selector["regexMatch"] or {}).get("pattern") or ""
        try:
            regex = re.compile(pattern)
        except re.error as err:
            raise TopologyError(f"{field}.selector.regexMatch.pattern={pattern!r} is not a valid regular "
                                f"expression: {err}") from None
        return member_type, lambda name, labels: bool(pattern) and regex.search(name) is not None
    if "labelMatch" in selector and member_type == "Node":      # Volcano: labelMatch selects only nodes
        match = selector["labelMatch"] or {}
        wanted = match.get("matchLabels") or {}
        expressions = match.get("matchExpressions") or []
        return member_type, lambda name, labels: (all(labels.get(k) == v for k, v in wanted.items())
                                                  and all(_expression_matches(labels, e) for e in expressions))
    return member_type, lambda name, labels: False


def _tier(obj: Mapping) -> int:
    spec = spec_of(obj)
    try:
        tier = int(spec.get("tier"))
        if tier >= 1:
            return tier
    except (TypeError, ValueError):
        pass
    raise TopologyError(f"HyperNode {object_name(obj)!r}: spec.tier must be an integer >= 1, "
                        f"got {spec.get('tier')!r}")


def tree_from_hypernodes(hypernodes: Sequence[Mapping], nodes: Sequence[NodeInfo],
                         name: str = VOLCANO_TOPOLOGY_NAME) -> TopologyTree:
    """All HyperNodes form one forest; levels are the tiers, highest (coarsest) first."""
    by_name = {object_name(hn): hn for hn in hypernodes}
    tier = {hn_name: _tier(hn) for hn_name, hn in by_name.items()}
    parent_of: dict[str, str] = {}          # hypernode or node name -> the hypernode holding it
    for hn_name in sorted(by_name, key=lambda n: (tier[n], n)):
        members = spec_of(by_name[hn_name]).get("members") or []
        if not isinstance(members, list):
            raise TopologyError(f"HyperNode {hn_name!r}: spec.members must be a list of members")
        for index, member in enumerate(members):
            member_type, matches = _member_matcher(hn_name, index, member)
            if member_type == "HyperNode":
                for child in by_name:
                    if child != hn_name and matches(child, {}):
                        parent_of.setdefault("hn:" + child, hn_name)
            else:
                for node in nodes:
                    if matches(node.name, node.labels):
                        parent_of.setdefault("node:" + node.name, hn_name)
    tiers = sorted(set(tier.values()), reverse=True)
    tier_names = {t: _tier_name(by_name, tier, t) for t in tiers}
    levels = [Level(f"tier-{t}", tier_names[t]) for t in tiers]
    paths: list = []
    excluded: dict[str, str] = {}
    for node in nodes:
        chain = _chain(parent_of, "node:" + node.name)
        if not chain:
            excluded[node.name] = "in no HyperNode"
            paths.append(None)
            continue
        by_tier = {tier[hn]: hn for hn in chain}
        path, fill = [], chain[-1]          # a skipped tier repeats the nearest hypernode above it
        for t in tiers:
            fill = by_tier.get(t, fill)
            path.append(fill)
        paths.append(tuple(path))
    return TopologyTree(name, "topology.volcano.sh/v1alpha1/HyperNode", levels,
                        [n.name for n in nodes], paths, excluded)


def _chain(parent_of: Mapping[str, str], start: str) -> list[str]:
    chain: list[str] = []
    current = parent_of.get(start)
    while current is not None and current not in chain:
        chain.append(current)
        current = parent_of.get("hn:" + current)
    return chain


def _tier_name(by_name: Mapping, tier: Mapping[str, int], t: int) -> str | None:
    names = {(by_name[n].get("spec") or {}).get("tierName") for n in by_name if tier[n] == t} - {None, ""}
    return names.pop() if len(names) == 1 else None


class TopologyTrees(dict):
    """Topology trees by name. `errors` holds why each defined topology that could not be built is
    invalid, so that a workload naming one is told why rather than that no such topology exists."""

    def __init__(self, trees: Mapping[str, TopologyTree] | None = None, errors: Mapping[str, str] | None = None):
        super().__init__(trees or {})
        self.errors: dict[str, str] = dict(errors or {})


def build_trees(topology_objects: Sequence[Mapping], nodes: Sequence[NodeInfo]) -> TopologyTrees:
    """Every topology by name, with the errors of those that could not be built (name -> message)."""
    trees: dict[str, TopologyTree] = {}
    errors: dict[str, str] = {}
    hypernodes = [o for o in topology_objects if o.get("kind") == "HyperNode"]
    for obj in topology_objects:
        if obj.get("kind") == "HyperNode":
            continue
        metadata = obj.get("metadata") or {}
        name = str((metadata.get("name") if isinstance(metadata, Mapping) else None) or "")
        if name in trees:
            errors[name] = f"Topology {name!r} is defined more than once ({api_group(obj)} and another group)"
            continue
        try:
            trees[name] = tree_from_labels(obj, nodes)
        except (TopologyError, LevelError, KeyError) as err:
            errors[name] = str(err)
    if hypernodes:
        try:
            trees[VOLCANO_TOPOLOGY_NAME] = tree_from_hypernodes(hypernodes, nodes)
        except (TopologyError, LevelError, KeyError) as err:
            errors[VOLCANO_TOPOLOGY_NAME] = str(err)
    return TopologyTrees(trees, errors)
