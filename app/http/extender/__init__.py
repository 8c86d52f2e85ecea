"""The kube-scheduler extender: wire models, routes and the gang logic behind them."""
from .routes import build_router

__all__ = ["build_router"]
