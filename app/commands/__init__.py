"""One module per `tas-extender` subcommand, each with `register(subparsers)` setting `func` on its parser."""
