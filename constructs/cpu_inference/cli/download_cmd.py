"""`cpu-inference download --repo R --file F --bucket B --key-prefix P [--revision main] [--sha256 H]
[--token-secret NAME]`: the ModelArtifact copy job run from a laptop or CI — same code (`model_download`), with a
progress bar.

Honours HF_ENDPOINT, HF_TOKEN and botocore's endpoint settings (AWS_ENDPOINT_URL_S3 …), so it runs against a
Hub mirror or a local S3 unchanged. Also the way to pre-seed a bucket with a file too big for a deployment's
one-hour custom-resource window: the ModelArtifact then finds it in place and copies nothing."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

from cpu_inference.cli.main import UserError


def register(sub: argparse._SubParsersAction) -> None:
    try:
        from model_download.args import add_arguments
    except ModuleNotFoundError:  # an install without the lambda/ runtime packages: no download command
        return
    p = sub.add_parser("download", help="copy a Hugging Face model file to S3, sha256-verified, never half-written")
    add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from model_download import Hub, copy_model, read_token
    from model_download.args import one_line, request_from_args

    console = Console(stderr=True)
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )
    task = progress.add_task(args.file, total=None, start=False)

    def on_start(size: int, _sha256: str) -> None:
        progress.update(task, total=size)
        progress.start_task(task)

    try:
        req = request_from_args(args)
        token, source = read_token(args.token_secret)
        hub = Hub(args.endpoint, token, token_source=source, pool_size=req.concurrency + 2)
        with progress:
            result = copy_model(req, hub=hub, progress=lambda n: progress.advance(task, n), on_start=on_start)
    except Exception as exc:  # noqa: BLE001 - user-facing errors become one line; bugs keep their traceback
        line = one_line(exc)
        if line is None:
            raise
        raise UserError(line) from None
    if result.copied:
        print(
            f"copied {result.uri} ({result.size / 1e6:.1f} MB, sha256 {result.sha256}) "
            f"in {result.seconds:.1f} s ({result.mb_per_s:.0f} MB/s, {result.parts} parts)"
        )
    else:
        print(f"already present: {result.uri} (sha256 {result.sha256}); nothing copied")
    return 0
