"""Gateway HTTP cost: the model farm's gateway (`python -m slm_router`, mode gateway, as the router image runs it) in
front of a FAST backend, so what is measured is the gateway's own work per request (parse the client's request,
route by `model`, relay to the pool replica over a keep-alive connection, parse its answer, answer the client).

The backend is nginx (Debian's, one worker) answering the OpenAI chat path with a fixed small JSON body; the load is
`wrk` (one thread, keep-alive) at 16 and 64 connections. For each tree the gateway runs from (this checkout, and with
--baseline-dir an older `containers/` tree, e.g. 7556443's hand-written HTTP parser before h11), both gateways run side
by side and are measured in alternating rounds, so load from other work hits both alike. Reported per tree and
connection count (medians over rounds): req/s, the gateway process's CPU per request (utime + stime from
/proc/<pid>/stat over the run, divided by the requests wrk completed; unlike req/s it hardly moves with other load on
the machine) and req/s as a share of nginx served directly (a reference for the same wrk on the same machine).

    apt-get install -y nginx wrk
    git -C . archive 7556443 containers | tar -x -C /tmp/old  # hand-written parser (mkdir -p /tmp/old first)
    .venv/bin/python benchmarks/gateway.py --baseline-dir /tmp/old/containers
    .venv/bin/python benchmarks/gateway.py --rounds 7 --duration 8 --json /tmp/gateway.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = "bench-model"
PATH = "/v1/chat/completions"
BODY = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 8})
# What llama-server answers a short non-streamed chat, trimmed: the relay's work depends on its size, not its words.
ANSWER = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1,
        "model": MODEL,
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Hi there!"}}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12},
    }
)
TICKS = os.sysconf("SC_CLK_TCK")

NGINX_CONF = """worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    keepalive_requests 10000000;
    keepalive_timeout 75s;
    upstream backend {{ server 127.0.0.1:{port}; keepalive 64; }}
    server {{
        # nginx as a proxy in front of the same backend (what the gateway does), the other reference.
        listen 127.0.0.1:{proxy_port} backlog=1024;
        location / {{ proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection ""; }}
    }}
    server {{
        listen 127.0.0.1:{port} backlog=1024;
        location = /health {{ default_type application/json; return 200 '{{"status":"ok"}}'; }}
        location = {path} {{ default_type application/json; return 200 '{answer}'; }}
    }}
}}
"""

WRK_SCRIPT = """wrk.method = "POST"
wrk.body = {body}
wrk.headers["Content-Type"] = "application/json"
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"{url} did not answer 200 within {timeout:.0f} s")
        time.sleep(0.1)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14 and 15 of proc(5))


def start_nginx(tmp: Path) -> tuple[subprocess.Popen, int, int]:
    port, proxy_port = free_port(), free_port()
    for d in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (tmp / d).mkdir(parents=True, exist_ok=True)
    conf = tmp / "nginx.conf"
    conf.write_text(NGINX_CONF.format(tmp=tmp, port=port, proxy_port=proxy_port, path=PATH, answer=ANSWER))
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    proc = subprocess.Popen([nginx, "-p", str(tmp), "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_http(f"http://127.0.0.1:{port}/health")
    wait_http(f"http://127.0.0.1:{proxy_port}/health")
    return proc, port, proxy_port


def gateway_env(tree: Path, config: Path) -> dict[str, str]:
    """The router image's environment: slm_router and (from issue 24 on) inference_runtime on PYTHONPATH, from `tree`
    (a `containers/` directory); ahead of the project venv's editable install, which maps slm_router to this
    checkout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROUTER_")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(tree / "router"), str(tree)]),
        ROUTER_CONFIG=str(config),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",
    )
    return env


def loaded_from(tree: Path, env: dict[str, str]) -> str:
    """Where the gateway's HTTP layer is imported from with that environment (a check that each tree runs its own)."""
    code = (
        "import sys, slm_router.server as s; print([m.__file__ for n, m in sys.modules.items() "
        "if n.endswith('http1')][0])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, cwd=tempfile.gettempdir()
    )
    path = Path(out.stdout.strip())
    if not path.resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"the gateway for {tree} imports its HTTP layer from {path}")
    return str(path)


def start_gateway(tree: Path, backend_port: int, tmp: Path, log_level: str) -> tuple[subprocess.Popen, int, str]:
    port = free_port()
    config = tmp / "router.json"
    config.write_text(
        json.dumps(
            {
                "mode": "gateway",
                "listen_host": "127.0.0.1",
                "listen_port": port,
                "log_level": log_level,
                "gateway": {
                    "pools": [
                        {
                            "name": "bench",
                            "models": [MODEL],
                            "replicas": [f"http://127.0.0.1:{backend_port}"],
                            "replication": 1,
                        }
                    ]
                },
            }
        )
    )
    env = gateway_env(tree, config)
    http1 = loaded_from(tree, env)
    log = open(tmp / "gateway.log", "wb")  # noqa: SIM115 (kept open for the process's life)
    proc = subprocess.Popen(
        [sys.executable, "-m", "slm_router"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tempfile.gettempdir()
    )
    wait_http(f"http://127.0.0.1:{port}/ready")
    return proc, port, http1


def wrk(port: int, connections: int, seconds: float, script: Path, pid: int | None) -> dict:
    before = cpu_seconds(pid) if pid else 0.0
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "-s", str(script), f"http://127.0.0.1:{port}{PATH}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    cpu = cpu_seconds(pid) - before if pid else 0.0
    requests = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    if bad or errors:
        raise SystemExit(f"wrk saw failures on port {port}:\n{out}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    return {"rps": rps, "requests": requests, "cpu_ms_per_request": cpu * 1000 / requests if pid else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline-dir", type=Path, help="a `containers/` tree to measure side by side (e.g. HEAD's)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per wrk run")
    ap.add_argument("--connections", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--log-level", default="INFO", help="the gateway's log_level (the config default: INFO)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    for tool in ("nginx", "wrk"):
        if not (shutil.which(tool) or Path(f"/usr/sbin/{tool}").exists()):
            raise SystemExit(f"{tool} not found: apt-get install -y nginx wrk")
    trees = {"after": ROOT / "containers"}
    if args.baseline_dir:
        trees = {"before": args.baseline_dir.resolve(), **trees}

    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="gateway-bench-") as tmpdir:
        tmp = Path(tmpdir)
        script = tmp / "post.lua"
        script.write_text(WRK_SCRIPT.format(body=json.dumps(BODY)))
        try:
            nginx, nginx_port, proxy_port = start_nginx(tmp / "nginx")
            procs.append(nginx)
            gateways = {}
            for name, tree in trees.items():
                (tmp / name).mkdir()
                proc, port, http1 = start_gateway(tree, nginx_port, tmp / name, args.log_level)
                procs.append(proc)
                gateways[name] = (proc, port)
                print(f"{name}: {tree} (HTTP layer {http1}), gateway pid {proc.pid} on :{port}", file=sys.stderr)
            for _, port in gateways.values():  # warm-up: connections, code paths, the replica's keep-alive pool
                wrk(port, max(args.connections), 2, script, None)
            results: dict = {name: {c: [] for c in args.connections} for name in [*trees, "nginx", "nginx-proxy"]}
            names = list(gateways)
            for r in range(args.rounds):
                order = names if r % 2 == 0 else names[::-1]
                for c in args.connections:
                    for name in order:
                        proc, port = gateways[name]
                        results[name][c].append(wrk(port, c, args.duration, script, proc.pid))
                    results["nginx"][c].append(wrk(nginx_port, c, args.duration, script, None))
                    results["nginx-proxy"][c].append(wrk(proxy_port, c, args.duration, script, None))
                    done = ", ".join(f"{n} {results[n][c][-1]['rps']:.0f}" for n in [*order, "nginx", "nginx-proxy"])
                    print(f"round {r + 1}/{args.rounds}, {c} connections: req/s {done}", file=sys.stderr)
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            for proc in procs:
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()

    summary: dict = {
        "rounds": args.rounds,
        "duration_s": args.duration,
        "trees": {k: str(v) for k, v in trees.items()},
        "results": {},
    }
    print(
        f"\n{'tree':<11} {'conns':>5} {'req/s':>8} {'CPU ms/req':>11} {'x nginx':>8} {'x nginx-proxy':>14}   "
        f"(medians of {args.rounds} rounds)"
    )
    for c in args.connections:
        nginx_rps = statistics.median(x["rps"] for x in results["nginx"][c])
        proxy_rps = statistics.median(x["rps"] for x in results["nginx-proxy"][c])
        for name in trees:
            runs = results[name][c]
            rps = statistics.median(x["rps"] for x in runs)
            cpu = statistics.median(x["cpu_ms_per_request"] for x in runs)
            summary["results"].setdefault(name, {})[c] = {
                "rps": rps,
                "cpu_ms_per_request": cpu,
                "x_nginx": rps / nginx_rps,
                "x_nginx_proxy": rps / proxy_rps,
                "runs": runs,
            }
            print(f"{name:<11} {c:>5} {rps:>8.0f} {cpu:>11.3f} {rps / nginx_rps:>7.2f}x {rps / proxy_rps:>13.2f}x")
        summary["results"].setdefault("nginx", {})[c] = {"rps": nginx_rps}
        summary["results"].setdefault("nginx-proxy", {})[c] = {"rps": proxy_rps}
        print(f"{'nginx':<11} {c:>5} {nginx_rps:>8.0f}")
        print(f"{'nginx-proxy':<11} {c:>5} {proxy_rps:>8.0f}")
    if "before" in trees:
        for c in args.connections:
            b, a = summary["results"]["before"][c], summary["results"]["after"][c]
            print(
                f"after/before at {c} connections: CPU per request {a['cpu_ms_per_request'] / b['cpu_ms_per_request']:.3f}x, "
                f"req/s {a['rps'] / b['rps']:.3f}x"
            )
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
