"""Which workload or PodGroup a pod belongs to: each registered kind says how its pods find it
(grouper/kinds/), tried in the registry's order, else the pod's controller."""
from .kinds import OwnerRef, owner_of

__all__ = ["OwnerRef", "owner_of"]
