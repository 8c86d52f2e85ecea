"""What the service knows about the cluster, fed by a cluster source (app.kube, app.memory):

- `service`: ServiceState, the ObjectSink that holds it all under one lock and keeps it in step;
- `objects`: the latest version of every watched object, and the shape checks objects pass first;
- `plans`: each gang's plan, reservations, bindings and status;
- `changes`: which nodes gained room or pods since a moment (when a cached refusal may be given again);
- `workload_pods`: how many live pods each workload has (gangs wait for the pods of a batch).
"""
from .service import (GANG_ANNOTATION, NODE_KIND, POD_KIND, SLOT_ANNOTATION, ServiceState, kind_named,
                      kind_of)

__all__ = ["GANG_ANNOTATION", "NODE_KIND", "POD_KIND", "SLOT_ANNOTATION", "ServiceState", "kind_named", "kind_of"]
