"""A metrics-only port for pods whose server answers /metrics on its API port (llama-server, the router).

Why: a NetworkPolicy is L3/L4 — it can open a port, not a path. The AMP managed collector has no pod
identity; it scrapes from ENIs it creates in the subnets given to the scraper ("An Amazon Managed Service for
Prometheus collector creates an Elastic Network Interface (ENI) per subnet specified when creating the
scraper", AMP user guide), which by default are the cluster's private subnets — where the VPC CNI also gives
every pod its IP. Allowing those CIDRs on the API port therefore lets every pod call the model directly,
bypassing the router-only rule. So the API port admits only the clients, and the scrapers get this sidecar's
port, which answers GET /metrics (proxied from the server on loopback) and nothing else (404).

The sidecar runs the workload's own image (both are python:3.11-slim based, non-root) with this stdlib
script, so no other image is pulled; it is tiny (one thread per scrape, every 30 s).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import cdk8s_plus_27 as kplus

METRICS_PORT = 9091
CONTAINER = "metrics"
CPU_MILLIS = 20
MEMORY_MIB = 48
SIDECAR_CPU = CPU_MILLIS / 1000  # what the sidecar adds to a pod's requests (bin packing counts it)
SIDECAR_MEMORY_BYTES = MEMORY_MIB * 1024 * 1024

SCRIPT = r"""
import http.client, os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
UPSTREAM = int(os.environ["METRICS_UPSTREAM_PORT"])
PATH = os.environ.get("METRICS_PATH", "/metrics")
class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass
    def do_GET(self):
        if self.path.split("?", 1)[0] != PATH:
            self.send_error(404, "only " + PATH + " is served on this port")
            return
        try:
            conn = http.client.HTTPConnection("127.0.0.1", UPSTREAM, timeout=10)
            conn.request("GET", self.path)
            resp = conn.getresponse()
            body = resp.read()
        except OSError:
            self.send_error(503, "metrics upstream unavailable")
            return
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.getheader("Content-Type", "text/plain; version=0.0.4"))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
ThreadingHTTPServer(("0.0.0.0", int(os.environ["METRICS_PORT"])), Handler).serve_forever()
"""

COMMAND = ("python3", "-c", SCRIPT)


def metrics_env(upstream_port: int, path: str = "/metrics") -> dict[str, str]:
    return {"METRICS_PORT": str(METRICS_PORT), "METRICS_UPSTREAM_PORT": str(upstream_port), "METRICS_PATH": path}


def metrics_proxy_container(
    image: str, upstream_port: int, tmp_volume: kplus.Volume | None = None
) -> kplus.ContainerProps:
    """The sidecar: `image`'s python3 running SCRIPT on METRICS_PORT, requests = limits (small, fixed)."""
    import cdk8s  # here, not at the top: bin_packing (pure) reads the constants above without cdk8s
    import cdk8s_plus_27 as kplus

    from cpu_inference.k8s.workloads.workload_defaults import container_security_context

    cpu = kplus.Cpu.millis(CPU_MILLIS)
    mem = cdk8s.Size.mebibytes(MEMORY_MIB)
    return kplus.ContainerProps(
        name=CONTAINER,
        image=image,
        image_pull_policy=kplus.ImagePullPolicy.IF_NOT_PRESENT,
        command=list(COMMAND),
        env_variables={k: kplus.EnvValue.from_value(v) for k, v in sorted(metrics_env(upstream_port).items())},
        ports=[kplus.ContainerPort(number=METRICS_PORT, name="metrics")],
        resources=kplus.ContainerResources(
            cpu=kplus.CpuResources(request=cpu, limit=cpu),
            memory=kplus.MemoryResources(request=mem, limit=mem),
        ),
        security_context=container_security_context(),
        # Read-only root filesystem: the pod's /tmp emptyDir, should anything in Python want scratch space.
        volume_mounts=[kplus.VolumeMount(path="/tmp", volume=tmp_volume)] if tmp_volume is not None else None,
    )
