"""`cpu-inference` — validate, size, download, bench, eval, local. Each subcommand lives in its own module
exposing `register(subparsers)`; user errors print one line each and exit 2, never a traceback."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# name -> module under cpu_inference.cli; a module missing from an install simply does not register.
SUBCOMMANDS = ("validate", "size", "stacks", "plan", "download", "bench", "eval", "local", "farm")


class UserError(Exception):
    """An error the user can fix; printed as-is with exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    from cpu_inference import __version__

    parser = argparse.ArgumentParser(
        prog="cpu-inference", description="CPU-first LLM/SLM inference on AWS: check, size and test before you deploy."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"cpu_inference.cli.{name}_cmd")
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("cpu_inference.cli."):
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from cpu_inference.config import ConfigError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        for problem in exc.problems:
            print(problem.render(exc.filename), file=sys.stderr)
        return 2
    except UserError as exc:
        print(f"cpu-inference {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except (
        BrokenPipeError
    ):  # `cpu-inference plan … | head`: the reader left; no traceback (Python docs, signal/SIGPIPE note)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    # Run as a script this module is `__main__`, a second copy whose UserError the subcommands never raise:
    # dispatch through the package's own module so user errors stay one line and exit 2.
    from cpu_inference.cli.main import main as package_main

    sys.exit(package_main())
