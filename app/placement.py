"""Placement annotations the extender writes at bind, and the env vars the webhook derives from them.

At bind the extender annotates the pod with the domain value at every level of its topology:
    placement.tas-extender.io/topology: default
    placement.tas-extender.io/rack:     a-block-1-rack-2
The webhook declares downward-API env vars (KAI_TOPOLOGY_RACK, ...) that the kubelet resolves from
these annotations when the container starts (the pod is bound by then).
"""
from __future__ import annotations

import re

from grouper.names import ENV_PREFIX, PLACEMENT_PREFIX, TOPOLOGY_ANNOTATION
from topology.tree import Level

__all__ = ["ENV_PREFIX", "PLACEMENT_PREFIX", "TOPOLOGY_ANNOTATION", "downward_api_path", "level_slug",
           "placement_annotation", "placement_env_name"]


def level_slug(level: Level) -> str:
    """A level's short name usable in an annotation key: its alias, else the last part of its label."""
    name = level.alias or level.key.rsplit("/", 1)[-1]
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug[:63] or "level"


def placement_annotation(level: Level) -> str:
    return PLACEMENT_PREFIX + level_slug(level)


def placement_env_name(level: Level) -> str:
    return ENV_PREFIX + level_slug(level).upper().replace("-", "_")


def downward_api_path(annotation: str) -> str:
    """fieldRef path of an annotation for a downward-API env var."""
    return f"metadata.annotations['{annotation}']"
