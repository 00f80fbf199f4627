"""Catalog copy fanned out over worker processes: throughput vs number of workers, and the wall time of 1,000 models.

    .venv/bin/python benchmarks/catalog_copy.py [--workers 1,2,4,8,16] [--sweep-models 96] [--models 1000] \
        [--batch-size 10] [--per-connection-mbps 10] [--min-mb 0.2] [--max-mb 8] [--json]

Loopback only, as benchmarks/model_download.py: the fake Hub (tests/runtime/model_download/fake_hub.py, 302 to a CDN
origin, every response throttled to --per-connection-mbps, as a CDN caps one connection) and moto's S3 server each
run in their own process. The catalog is published to moto as the construct publishes it (an S3 object + its
fingerprint). The state machine is modelled by what it does: the catalog's work list cut into batches of
--batch-size entries (ItemBatcher), at most W batches at once (MaxConcurrency); each batch runs the REAL worker in
its own process, `python -m model_download catalog --names <batch JSON>` (what one CodeBuild build runs), so every
batch pays a process start as a build pays its provisioning (much less, here).

Model sizes are log-uniform in [--min-mb, --max-mb] (seeded), distinct bytes per model; moto keeps every object in
RAM (1,000 models ≈ 2.4 GB at the defaults). Each configuration copies into a fresh bucket.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "lambda")]

from benchmarks.model_download import _free_port, _wait_port  # noqa: E402


def _sizes(count: int, lo_mb: float, hi_mb: float, seed: int) -> list[int]:
    rnd = random.Random(seed)
    return [int(math.exp(rnd.uniform(math.log(lo_mb), math.log(hi_mb))) * 1e6) for _ in range(count)]


def _write_models(root: Path, sizes: list[int], prefix: str) -> list[tuple[str, str, Path]]:
    """(repo, file, path) per model; distinct bytes (a per-model header over a shared random body)."""
    body = os.urandom(max(sizes))
    out = []
    for i, size in enumerate(sizes):
        path = root / f"{prefix}-{i:04d}.gguf"
        header = f"GGUF{prefix}-{i:06d}".encode()
        path.write_bytes(header + body[: size - len(header)])
        out.append((f"bench-farm/{prefix}-{i:04d}", f"{prefix}-{i:04d}-Q4.gguf", path))
    return out


def _serve_hub(files: list[tuple[str, str, str]], rate: float | None, conn) -> None:  # noqa: ANN001 - pipe
    from tests.runtime.model_download.fake_hub import FakeHub

    hub = FakeHub()
    for repo, name, path in files:
        hub.add_file(repo, name, Path(path))
    hub.per_connection_rate = rate
    hub.start()
    conn.send(hub.url)
    conn.recv()
    hub.stop()


def _run(
    s3, catalog, hub_url: str, env: dict[str, str], workers: int, batch_size: int, per_build: tuple[int, int]
) -> dict[str, float]:  # noqa: ANN001
    """Copy `catalog` into a fresh bucket with `workers` batches at once; wall time, bytes, batch outcomes."""
    from model_download.catalog import gguf_key

    bucket = f"bench-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    assets = f"assets-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=assets)
    key = f"{catalog.fingerprint()}.json"
    s3.put_object(Bucket=assets, Key=key, Body=catalog.to_json().encode())
    names = [e.name for e in catalog.entries]
    batches = [names[i : i + batch_size] for i in range(0, len(names), batch_size)]
    parallel_models, concurrency = per_build

    def build(batch: list[str]) -> int:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "model_download",
                "catalog",
                "--catalog",
                f"s3://{assets}/{key}",
                "--fingerprint",
                catalog.fingerprint(),
                "--bucket",
                bucket,
                "--endpoint",
                hub_url,
                "--names",
                json.dumps(batch, separators=(",", ":")),
                "--parallel-models",
                str(parallel_models),
                "--concurrency",
                str(concurrency),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        ).returncode

    began = time.monotonic()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        codes = list(pool.map(build, batches))
    seconds = time.monotonic() - began
    landed = 0
    for entry in catalog.entries:
        landed += s3.head_object(Bucket=bucket, Key=gguf_key(entry))["ContentLength"]
    return {"seconds": seconds, "bytes": landed, "batches": len(batches), "failed_batches": sum(c != 0 for c in codes)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", default="1,2,4,8,16")
    ap.add_argument("--sweep-models", type=int, default=96)
    ap.add_argument("--models", type=int, default=1000)
    ap.add_argument("--workers-for-all", type=int, default=8, help="workers for the --models run")
    ap.add_argument("--batch-size", type=int, default=10)
    ap.add_argument("--parallel-models", type=int, default=2, help="models at once inside one worker (build)")
    ap.add_argument("--concurrency", type=int, default=2, help="ranged GETs per model")
    ap.add_argument("--per-connection-mbps", type=float, default=10.0)
    ap.add_argument("--min-mb", type=float, default=0.2)
    ap.add_argument("--max-mb", type=float, default=8.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    workers = [int(w) for w in args.workers.split(",")]

    from model_download.catalog import Catalog, CatalogEntry

    tmp = Path(tempfile.mkdtemp(prefix="catalog-bench-"))
    sweep_files = _write_models(tmp, _sizes(args.sweep_models, args.min_mb, args.max_mb, 1), "s")
    all_files = _write_models(tmp, _sizes(args.models, args.min_mb, args.max_mb, 2), "a") if args.models else []
    port = _free_port()
    moto = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    parent, child = mp.Pipe()
    served = [(r, n, str(p)) for r, n, p in [*sweep_files, *all_files]]
    hub_proc = mp.get_context("spawn").Process(
        target=_serve_hub, args=(served, args.per_connection_mbps * 1e6, child), daemon=True
    )
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{port}",
        "PYTHONPATH": str(ROOT / "lambda"),
    }
    env.pop("HF_TOKEN", None)
    os.environ.update(
        {k: env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL_S3")}
    )
    try:
        _wait_port(port)
        hub_proc.start()
        hub_url = parent.recv()
        from model_download import s3_client

        s3 = s3_client(8)

        def catalog_of(files: list[tuple[str, str, Path]], prefix: str) -> Catalog:
            return Catalog(tuple(CatalogEntry(f"{prefix}-{i:04d}", r, n) for i, (r, n, _p) in enumerate(files)))

        per_build = (args.parallel_models, args.concurrency)
        sweep = {
            w: _run(s3, catalog_of(sweep_files, "s"), hub_url, env, w, args.batch_size, per_build) for w in workers
        }
        whole = (
            _run(s3, catalog_of(all_files, "a"), hub_url, env, args.workers_for_all, args.batch_size, per_build)
            if all_files
            else None
        )
        parent.send("stop")
    finally:
        moto.terminate()
        moto.wait(timeout=10)
        if hub_proc.is_alive():
            hub_proc.terminate()

    summary = {
        "cpus": os.cpu_count(),
        "per_connection_mbps": args.per_connection_mbps,
        "batch_size": args.batch_size,
        "per_build": {"parallel_models": args.parallel_models, "concurrency": args.concurrency},
        "sweep_models": args.sweep_models,
        "sweep": {
            w: {
                "seconds": round(r["seconds"], 1),
                "mb_s": round(r["bytes"] / 1e6 / r["seconds"], 1),
                "models_s": round(args.sweep_models / r["seconds"], 2),
                "mb": round(r["bytes"] / 1e6),
                "failed_batches": r["failed_batches"],
            }
            for w, r in sweep.items()
        },
        "all": None
        if whole is None
        else {
            "models": args.models,
            "workers": args.workers_for_all,
            "mb": round(whole["bytes"] / 1e6),
            "seconds": round(whole["seconds"], 1),
            "mb_s": round(whole["bytes"] / 1e6 / whole["seconds"], 1),
            "batches": whole["batches"],
            "failed_batches": whole["failed_batches"],
        },
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(
        f"{args.sweep_models} models ({summary['sweep'][workers[0]]['mb']} MB, {args.min_mb}-{args.max_mb} MB log-uniform), "
        f"batches of {args.batch_size}, per build {args.parallel_models} models x {args.concurrency} ranges, "
        f"{args.per_connection_mbps:g} MB/s per connection, {os.cpu_count()} CPUs"
    )
    print(f"{'workers':>8} {'seconds':>8} {'MB/s':>7} {'models/s':>9} {'failed batches':>15}")
    for w, r in summary["sweep"].items():
        print(f"{w:>8} {r['seconds']:>8.1f} {r['mb_s']:>7.1f} {r['models_s']:>9.2f} {r['failed_batches']:>15}")
    if summary["all"]:
        a = summary["all"]
        print(
            f"{a['models']} models, {a['mb']} MB, {a['workers']} workers, {a['batches']} batches: "
            f"{a['seconds']:.1f} s ({a['mb_s']:.1f} MB/s), failed batches {a['failed_batches']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
