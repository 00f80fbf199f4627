"""`python -m model_download catalog --catalog s3://B/K --fingerprint F --bucket MODELS [--names '["a","b"]'] [...]`
— one build of the ModelCatalog copy: the entries `--names` lists (one batch of the state machine's Distributed
Map, passed as buildspec.CATALOG_NAMES_ENV), or every entry of the catalog without it (catalog_copy).

Each model gets a log line; a failed model gets `model_download: catalog: failed: <name>: <reason>` and its failure
marker in S3, and the run ends with ONE `model_download: error: N of M models failed: <every name> — <reasons>`
line and exit 2: the build fails, so Step Functions retries the batch (models already in place are skipped) and
reports it in the execution's results. SIGTERM (CodeBuild timeout, StopBuild) stops the copies in flight (their
multipart uploads are aborted) and names what is left."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

from .args import ENDPOINT_HELP, exit_with_one_line
from .catalog_copy import DEFAULT_CONCURRENCY, DEFAULT_PARALLEL_MODELS, CatalogCopy, Hubs, load_catalog
from .copy import MIB, s3_client
from .errors import ERROR_PREFIX, DownloadError


def parse_names(text: str | None) -> list[str] | None:
    """`--names`: a JSON array of model names (what Step Functions' States.JsonToString of a batch gives) or a
    comma-separated list (by hand); None or empty = the whole catalog."""
    if text is None or not text.strip():
        return None
    text = text.strip()
    if text.startswith("["):
        try:
            names = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DownloadError(f"--names is not a JSON array of model names: {exc}") from None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise DownloadError(f"--names must be a JSON array of model names, got {text[:80]!r}")
    else:
        names = [n.strip() for n in text.split(",") if n.strip()]
    return names or None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m model_download catalog", description="Copy the models of a farm catalog to S3, verified."
    )
    p.add_argument("--catalog", required=True, help="s3://bucket/key of the catalog JSON (the ModelCatalog asset)")
    p.add_argument("--fingerprint", default=None, help="the catalog's expected fingerprint (the state machine's)")
    p.add_argument("--bucket", required=True, help="the model bucket (keys under farm/)")
    p.add_argument("--endpoint", default=None, help=ENDPOINT_HELP)
    p.add_argument(
        "--names",
        default=None,
        help="copy only these entries: a JSON array or a comma-separated list of model names (default: every entry)",
    )
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
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # the copies notice it at their next chunk and abort
    try:
        names = parse_names(args.names)
        s3 = s3_client(args.parallel_models * (args.concurrency + 2))
        catalog = load_catalog(s3, args.catalog, args.fingerprint)
        batch = catalog.subset(names)
        print(
            f"model_download: catalog {catalog.fingerprint()}: {len(batch.entries)} of {len(catalog.entries)} models, "
            f"layouts {', '.join(catalog.layouts)} -> s3://{args.bucket}/farm/",
            flush=True,
        )
        hubs = Hubs(args.endpoint, pool_size=args.parallel_models * (args.concurrency + 2))
        job = CatalogCopy(
            batch,
            bases=catalog,  # an adapter's base may be in another batch
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
    print(
        f"model_download: catalog done: {len(run.copied)} of {run.total} models copied, the rest already present",
        flush=True,
    )
    return 0
