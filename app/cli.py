"""`tas-extender` entry point: every module in app/commands adds its own subcommand."""
from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from importlib.metadata import PackageNotFoundError, version

from . import commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tas-extender",
                                     description="Topology-aware gang and segment scheduler for Kubernetes")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in sorted(m.name for m in pkgutil.iter_modules(commands.__path__)):
        try:
            importlib.import_module(f"{commands.__name__}.{module}").register(subparsers)
        except Exception as error:       # noqa: BLE001 - one broken command must not take down the others
            _register_broken(subparsers, module, error)
    return parser


def _register_broken(subparsers, module: str, error: Exception) -> None:
    """A command whose module fails to import: it reports why when run, every other command still works."""
    name = module.replace("_", "-")
    if name in subparsers.choices:
        return
    why = f"{type(error).__name__}: {error}"
    parser = subparsers.add_parser(name, help=f"(unavailable: {why})", add_help=False,
                                   prefix_chars="\0")     # take any argument: only the error matters
    parser.add_argument("arguments", nargs="*")

    def unavailable(_args) -> int:
        print(f"tas-extender {name}: this command failed to load ({why})", file=sys.stderr)
        return 1
    parser.set_defaults(func=unavailable)


def _version() -> str:
    try:
        return version("tas-extender")
    except PackageNotFoundError:
        return "(not installed)"


def main(argv: list[str] | None = None) -> int:
    """Exit codes: 0 done, 1 a gang does not fit (plan), 2 bad input or settings; a closed output pipe
    (`| head`) ends the command quietly with 0."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        # the reader went away: nothing more to say, and Python must not fail flushing stdout at exit
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (AttributeError, OSError, ValueError):
            pass
        return 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
