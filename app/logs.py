"""Structured logs: one JSON object per line, with the pod and gang a line is about.

    log = get_logger(__name__)
    log.info("planned", extra=fields(pod="team-a/llama-worker-0", gang="team-a/llama", node="node-03"))
"""
from __future__ import annotations

import logging
import sys
import time

import orjson

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}
_DROPPED = {"color_message"}        # uvicorn's copy of the message with ANSI colours


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in _DROPPED and not key.startswith("_"):
                line[key] = value
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


def fields(*, pod: str | None = None, gang: str | None = None, **more) -> dict:
    """The `extra` of a log call: pod and gang first (None values are left out). A name the LogRecord
    owns (`message`, `name`, `args`, ...) gets a trailing `_`: logging raises KeyError on it, which would
    fail the request being logged."""
    return {key + "_" if key in _STANDARD else key: value
            for key, value in {"pod": pod, "gang": gang, **more}.items() if value is not None}


def get_logger(name: str) -> logging.Logger:
    return logging.getLogger(name)


def configure(level: str = "info") -> None:
    """JSON lines on stderr for the app's loggers and uvicorn's."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    # urllib3 warns on every retry of every request (about 20 lines a second against a server that is
    # down); the sync logs each failure itself, once per backoff step
    logging.getLogger("urllib3").setLevel(logging.ERROR)
