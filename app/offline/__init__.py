"""Offline tools: `tas-extender plan` (would this workload fit, and where?) and `tas-extender simulate`
(replay a trace of workloads against a cluster dump with our planner or a comparison policy)."""
