"""`python -m model_download catalog --catalog s3://B/K --fingerprint F --bucket MODELS [...]` — the ModelCatalog
CodeBuild job: copies every entry of the catalog (catalog_copy), writes the receipt, exports it for the waiter.

Each model gets a log line; a failed model gets `model_download: catalog: failed: <name>: <reason>`, and the
run ends with ONE `model_download: error: N of M models failed: <every name> — <reasons>` line and exit 2: the
custom resource quotes that line when it fails the deployment (catalog_resource.completion). SIGTERM (CodeBuild
timeout, StopBuild) stops the copies in flight (their multipart uploads are aborted) and names what is left."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from .args import ENDPOINT_HELP, exit_with_one_line
from .buildspec import write_catalog_receipt
from .catalog_copy import DEFAULT_CONCURRENCY, DEFAULT_PARALLEL_MODELS, CatalogCopy, Hubs, load_catalog
from .copy import MIB, s3_client
from .errors import ERROR_PREFIX


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m model_download catalog", description="Copy every model of a farm catalog to S3, verified."
    )
    p.add_argument("--catalog", required=True, help="s3://bucket/key of the catalog JSON (the ModelCatalog asset)")
    p.add_argument("--fingerprint", default=None, help="the catalog's expected fingerprint (the custom resource's)")
    p.add_argument("--bucket", required=True, help="the model bucket (keys under farm/)")
    p.add_argument("--endpoint", default=None, help=ENDPOINT_HELP)
    p.add_argument(
        "--parallel-models",
        type=int,
        default=DEFAULT_PARALLEL_MODELS,
        help=f"models copied at once (default {DEFAULT_PARALLEL_MODELS})",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=DEFAULT_CONCURRENCY,
        help=f"ranged GETs per model (default {DEFAULT_CONCURRENCY})",
    )
    p.add_argument("--part-size-mib", type=int, default=None, help="bytes per range and S3 part, in MiB (default 16)")
    p.add_argument(
        "--receipt-env",
        default=None,
        metavar="FILE",
        help="write the receipt's key and counts as shell variables for CodeBuild to export",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # the copies notice it at their next chunk and abort
    try:
        s3 = s3_client(args.parallel_models * (args.concurrency + 2))
        catalog = load_catalog(s3, args.catalog, args.fingerprint)
        print(
            f"model_download: catalog {catalog.fingerprint()}: {len(catalog.entries)} models, layouts "
            f"{', '.join(catalog.layouts)} -> s3://{args.bucket}/farm/",
            flush=True,
        )
        hubs = Hubs(args.endpoint, pool_size=args.parallel_models * (args.concurrency + 2))
        job = CatalogCopy(
            catalog,
            bucket=args.bucket,
            s3=s3,
            hubs=hubs,
            parallel_models=args.parallel_models,
            concurrency=args.concurrency,
            part_size=args.part_size_mib * MIB if args.part_size_mib else None,
            stop=stop,
        )
        run = job.run()
    except Exception as exc:  # noqa: BLE001 - user-facing errors are one line; bugs keep their traceback
        return exit_with_one_line(exc)
    if run.failures:
        print(ERROR_PREFIX + run.error_line(), file=sys.stderr, flush=True)
        return 2
    assert run.receipt_key is not None
    if args.receipt_env:
        write_catalog_receipt(
            args.receipt_env,
            receipt_key=run.receipt_key,
            fingerprint=run.fingerprint,
            models=run.total,
            copied=len(run.copied),
        )
    print(
        f"model_download: catalog done: {len(run.copied)} of {run.total} models copied, the rest already present; "
        f"receipt s3://{args.bucket}/{run.receipt_key}",
        flush=True,
    )
    return 0
