"""Subcommands of the ``sbconform`` CLI: one module each.

A module here defines ``register(subparsers)``, which adds its parser and sets
``func`` (called with the parsed arguments, returning the exit code). The CLI finds
the modules by itself, so a new command is a new file.
"""
