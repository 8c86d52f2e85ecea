"""The pods a workload's controller would create, with the labels, annotations, names and owner
references it sets (each kind's `pods`, grouper/kinds/). The offline simulator and the webhook tests feed
these to the grouper."""
from __future__ import annotations

from collections.abc import Mapping

from .errors import GroupingError, describe
from .kinds import workload_shape
from .kinds.generic import pods as generic_pods


def expand_pods(workload: Mapping) -> list[dict]:
    """Full Pod objects as the workload's controller would create them, in role then index order."""
    shape = workload_shape(workload)
    if not shape.roles:
        raise GroupingError(f"{describe(workload)}: no pod template found; expected spec.template, "
                            f"spec.replicatedJobs or a supported kind (Job, kubeflow jobs, LeaderWorkerSet)")
    return (shape.kind.pods or generic_pods)(workload, shape)
