"""Command-line arguments shared by `python -m model_download` (the CodeBuild job) and `cpu-inference download`."""

from __future__ import annotations

import argparse
import sys

from .copy import DEFAULT_CONCURRENCY, MIB, CopyRequest
from .hub import DEFAULT_ENDPOINT, DEFAULT_REVISION

# --endpoint of every job CLI (copy, snapshot, catalog): None lets the Hub client read HF_ENDPOINT, then the default.
ENDPOINT_HELP = f"Hub endpoint (default: HF_ENDPOINT or {DEFAULT_ENDPOINT})"


def add_hub_arguments(p: argparse.ArgumentParser) -> None:
    """Where on the Hub and how to reach it: the same four options for the file copy and the snapshot copy."""
    p.add_argument("--repo", required=True, help="Hugging Face repo, owner/name")
    p.add_argument("--revision", default=DEFAULT_REVISION, help=f"branch, tag or commit (default: {DEFAULT_REVISION})")
    p.add_argument(
        "--token-secret",
        default=None,
        metavar="NAME",
        help="Secrets Manager secret holding a Hugging Face token, for gated models (default: HF_TOKEN if set)",
    )
    p.add_argument("--endpoint", default=None, help=ENDPOINT_HELP)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_hub_arguments(p)
    p.add_argument("--file", required=True, help="file inside the repo, e.g. model-Q4_K_M.gguf")
    p.add_argument("--bucket", required=True, help="destination S3 bucket")
    p.add_argument("--key-prefix", required=True, help="destination prefix; the object is <prefix>/<file>")
    p.add_argument(
        "--pin-commit",
        action="store_true",
        help="put the object at <prefix>/<commit>/<file>, commit = what the Hub resolves --revision to (as ModelArtifact does)",
    )
    p.add_argument("--sha256", default=None, help="expected sha256 (default: the one the Hub reports for the LFS file)")
    p.add_argument(
        "--concurrency",
        type=int,
        default=DEFAULT_CONCURRENCY,
        help=f"parallel ranged GETs (default {DEFAULT_CONCURRENCY})",
    )
    p.add_argument(
        "--part-size-mib",
        type=int,
        default=None,
        help="bytes per range and S3 part, in MiB (default 16, grown for huge files)",
    )


def request_from_args(args: argparse.Namespace) -> CopyRequest:
    return CopyRequest(
        repo=args.repo,
        file=args.file,
        revision=args.revision or DEFAULT_REVISION,
        bucket=args.bucket,
        key_prefix=args.key_prefix,
        sha256=(args.sha256 or None),
        concurrency=args.concurrency,
        part_size=args.part_size_mib * MIB if args.part_size_mib else None,
        pin_commit=bool(getattr(args, "pin_commit", False)),
    )


def one_line(exc: BaseException) -> str | None:
    """The one-line message for errors a user can act on (ours and AWS's); None for bugs."""
    from botocore.exceptions import BotoCoreError, ClientError

    from .errors import DownloadError

    if isinstance(exc, DownloadError):
        return str(exc)
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        op = getattr(exc, "operation_name", "?")
        return f"AWS {op} failed: {err.get('Code', '?')}: {err.get('Message', '')}".strip()
    if isinstance(exc, BotoCoreError):
        return f"AWS: {exc}"
    return None


def exit_with_one_line(exc: BaseException) -> int:
    """Inside an `except`: print the error a user can act on as one ERROR_PREFIX line and return the exit code
    2; re-raise a bug with its traceback."""
    from .errors import ERROR_PREFIX

    line = one_line(exc)
    if line is None:
        raise exc
    print(ERROR_PREFIX + line, file=sys.stderr, flush=True)
    return 2
