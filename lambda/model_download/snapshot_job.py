"""`python -m model_download snapshot --repo R --revision V --bucket B --key-prefix models/<name> [...]` — the
copy job of a vLLM model (ModelArtifactProps(snapshot=True)): the repo's safetensors snapshot at the commit the
revision resolves to, sealed by its manifest (snapshot.copy_snapshot), and the receipt CodeBuild exports.

A line per file (never the token); on failure ONE `model_download: error: <line naming the file>` and exit 2 —
the custom resource quotes it when it fails the deployment. SIGTERM (CodeBuild timeout, StopBuild) unwinds, so
the multipart upload in flight is aborted; the manifest is never written by an interrupted run."""

from __future__ import annotations

import argparse
import signal

from .args import add_hub_arguments, exit_with_one_line
from .buildspec import write_snapshot_receipt
from .copy import DEFAULT_CONCURRENCY, MIB
from .credentials import read_token
from .hub import DEFAULT_REVISION, Hub
from .snapshot import MANIFEST_NAME, SnapshotRequest, copy_snapshot


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m model_download snapshot",
        description="Copy a Hugging Face repo's safetensors snapshot (what vLLM loads) to S3, verified.",
    )
    add_hub_arguments(p)
    p.add_argument("--bucket", required=True, help="destination S3 bucket")
    p.add_argument("--key-prefix", required=True, help="destination root; the snapshot lands at <prefix>/<commit>/")
    p.add_argument(
        "--concurrency",
        type=int,
        default=DEFAULT_CONCURRENCY,
        help=f"parallel ranged GETs per file (default {DEFAULT_CONCURRENCY})",
    )
    p.add_argument("--part-size-mib", type=int, default=None, help="bytes per range and S3 part, in MiB (default 16)")
    p.add_argument(
        "--receipt-env",
        default=None,
        metavar="FILE",
        help="write the receipt (commit, manifest sha256, prefix, size, files) as shell variables for CodeBuild to export",
    )
    return p


def _terminate(signum: int, _frame) -> None:  # noqa: ANN001
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        req = SnapshotRequest(
            repo=args.repo,
            revision=args.revision or DEFAULT_REVISION,
            bucket=args.bucket,
            key_prefix=args.key_prefix,
            concurrency=args.concurrency,
            part_size=args.part_size_mib * MIB if args.part_size_mib else None,
        )
        req.validate()
        print(
            f"model_download: hf://{req.repo}@{req.revision} (safetensors snapshot) -> "
            f"s3://{req.bucket}/{req.key_prefix.strip('/')}/<commit>/",
            flush=True,
        )
        token, source = read_token(args.token_secret)
        hub = Hub(args.endpoint, token, token_source=source, pool_size=req.concurrency + 2)
        result = copy_snapshot(req, hub=hub, log=lambda line: print(f"model_download: {line}", flush=True))
        if args.receipt_env:
            write_snapshot_receipt(
                args.receipt_env,
                commit=result.commit,
                sha256=result.sha256,
                prefix=result.prefix,
                size=result.size,
                files=len(result.files),
            )
    except Exception as exc:  # noqa: BLE001 - user-facing errors are one line; bugs keep their traceback
        return exit_with_one_line(exc)
    print(
        f"model_download: snapshot done: {result.uri} (commit {result.commit}, {len(result.files)} files, "
        f"{result.copied} copied, {result.size} bytes, {result.seconds:.1f} s); manifest {MANIFEST_NAME} sha256 {result.sha256}",
        flush=True,
    )
    return 0
