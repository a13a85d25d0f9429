"""The `ember` subcommands, one module each; `ember/cli.py` assembles them."""
