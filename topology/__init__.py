"""The numpy core: cluster model, topology domain trees, capacity matrices, vectorized counts, planner.

Pure code: no I/O, no web or Kubernetes client imports.
"""
