"""`python -m model_download --repo R --file F --bucket B --key-prefix P [...]` — the CodeBuild job's entry point
(`python -m model_download catalog ...`: the ModelCatalog job, see catalog_job; `python -m model_download snapshot
...`: a vLLM model's safetensors snapshot, see snapshot_job).

Logs a line per 10% (never the token); on failure prints `model_download: error: <one line>` and exits 2 —
the custom resource quotes that line when it fails the deployment."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time

from .args import add_arguments, exit_with_one_line, request_from_args
from .buildspec import write_receipt
from .copy import copy_model
from .credentials import read_token
from .errors import ERROR_PREFIX as ERROR_PREFIX  # re-exported
from .hub import Hub


class _LogProgress:
    def __init__(self) -> None:
        self.size = 0
        self.done = 0
        self.began = time.monotonic()
        self._next = 10
        self._lock = threading.Lock()

    def start(self, size: int, sha256: str) -> None:
        self.size = size
        self.began = time.monotonic()
        print(f"copying {size / 1e9:.2f} GB, expected sha256 {sha256}", flush=True)

    def add(self, n: int) -> None:
        with self._lock:
            self.done += n
            pct = self.done * 100 // max(self.size, 1)
            if pct < self._next:
                return
            self._next = pct // 10 * 10 + 10
        rate = self.done / 1e6 / max(time.monotonic() - self.began, 1e-6)
        print(f"progress: {pct}% ({self.done / 1e9:.2f} of {self.size / 1e9:.2f} GB, {rate:.0f} MB/s)", flush=True)


def _terminate(signum: int, _frame) -> None:  # noqa: ANN001
    # CodeBuild stops a timed-out build with SIGTERM: unwind so the multipart upload is aborted.
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["catalog"]:  # the ModelCatalog job: every pooled model of a stack
        from .catalog_job import main as catalog_main

        return catalog_main(argv[1:])
    if argv[:1] == ["snapshot"]:  # a vLLM model: the repo's safetensors snapshot
        from .snapshot_job import main as snapshot_main

        return snapshot_main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="python -m model_download", description="Copy a Hugging Face file to S3, verified."
    )
    add_arguments(parser)
    parser.add_argument(
        "--receipt-env",
        default=None,
        metavar="FILE",
        help="write where the object landed (commit, sha256, key, size) as shell variables for CodeBuild to export",
    )
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        req = request_from_args(args)
        where = (
            f"{req.key_prefix.strip('/')}/<commit>/{req.file}" if req.pin_commit and not req.pins_a_commit else req.key
        )
        print(f"model_download: hf://{req.ref} -> s3://{req.bucket}/{where}", flush=True)
        token, source = read_token(args.token_secret)
        hub = Hub(args.endpoint, token, token_source=source, pool_size=req.concurrency + 2)
        log = _LogProgress()
        result = copy_model(req, hub=hub, progress=log.add, on_start=log.start)
        if args.receipt_env:
            write_receipt(args.receipt_env, result)
    except Exception as exc:  # noqa: BLE001 - user-facing errors are one line; bugs keep their traceback
        return exit_with_one_line(exc)
    pinned = f" (commit {result.commit})" if req.pin_commit else ""
    if result.copied:
        print(
            f"model_download: done: {result.uri} ({result.size} bytes, sha256 {result.sha256}, "
            f"{result.parts} parts, {result.seconds:.1f} s, {result.mb_per_s:.0f} MB/s){pinned}",
            flush=True,
        )
    else:
        print(
            f"model_download: already present: {result.uri} (sha256 {result.sha256}){pinned}; nothing copied",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
