"""The ``sbconform`` command line. Each subcommand lives in ``sbconform/commands/``."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import signal
import sys

from . import commands


def version() -> str:
    try:
        from importlib.metadata import version as dist_version

        return dist_version("sbconform")
    except Exception:  # running from a checkout that is not installed
        from . import __version__

        return __version__


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows an option's default unless there is none to show (None, an empty list, a flag's
    False) or its help already says it: never "(default: None)" nor a second default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        nothing = action.default is None or action.default is False or action.default in ([], argparse.SUPPRESS)
        if nothing or "default" in text:  # `0 in (False,)` is true: a default of 0 is shown
            return text
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose refusal of a command line is one line (what, where, and where
    the help is), exit 2: the usage block is for ``--help``, not for every typo."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="sbconform", description="Azure Service Bus conformance kit")
    parser.add_argument("--version", action="version", version=f"sbconform {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        importlib.import_module(f"{commands.__name__}.{info.name}").register(sub)
    for choice in sub.choices.values():  # every option shows its default in --help
        if choice.formatter_class in (argparse.HelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
            choice.formatter_class = DefaultsHelpFormatter
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminate)  # SIGTERM ends a command as Ctrl-C does
    try:
        return args.func(args)
    except KeyboardInterrupt:  # a command without its own handling: one line, no traceback
        print(f"sbconform {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `sbconform ... | head`
        sys.stderr.close()
        return 0


def _terminate(signum, frame):
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
