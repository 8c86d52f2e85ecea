"""Adapters around the pure core: HTTP routes, cluster sync, settings and the command line."""
