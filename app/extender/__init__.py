"""The kube-scheduler extender: wire models, routes and the gang logic behind them."""
from .gang import GangScheduler
from .routes import build_router

__all__ = ["GangScheduler", "build_router"]
