"""The kube-scheduler extender: wire models, routes and the gang logic behind them."""
from .routes import build_router, endpoints

__all__ = ["build_router", "endpoints"]
