"""The HTTP layer: thin FastAPI adapters over the engine (app.scheduling) and the state.

- `extender`: POST <prefix>/filter, prioritize, bind, preempt (the kube-scheduler extender protocol);
- `webhook`: POST /mutate (the admission webhook; its decisions are app.webhook's);
- `debug`: the read-only JSON debug API under /debug;
- `ui`: the debug page under /ui.
Nothing here decides anything: each route parses, calls one engine or state method, and answers.
"""
