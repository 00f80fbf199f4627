"""The rendered Deployment's engine container, run for real: its command and environment are taken from
the synthesized manifest and started through containers/llama-server/entrypoint.py (EKS mode: the
entrypoint execs llama-server), with only what differs on a test machine swapped:

- MODEL_PATH → the local SmolLM2-135M GGUF (the init container would have put the model there),
- `python3 /opt/llama/entrypoint.py` → this interpreter and the same file in the repo (the image copies it),
- LLAMA_SERVER_BIN → the binary built from the engine pin (the image sets it in its ENV),
- LLAMA_HOST/LLAMA_PORT → loopback and a free port,
- LLAMA_ARG_REPACK=0 → this machine's hypervisor faults on AMX tile instructions (tests/runtime/router/conftest.py).

It must start, serve a completion, and expose both KEDA metrics — with the slot count the chart rendered
visible in them under a burst (processing = slots, the rest deferred).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import cdk8s
import httpx
import pytest

from cpu_inference import sizing
from cpu_inference.k8s.charts.llama_server_chart import LlamaServerChart, LlamaServerChartProps
from cpu_inference.k8s.specs.keda import RUNNING_METRIC, WAITING_METRIC
from cpu_inference.k8s.workloads.engine_container import ENGINE_COMMAND
from cpu_inference.k8s.workloads.model_workload import ModelWorkload
from cpu_inference.k8s.workloads.serving_policy import ServingPolicy
from tests.support.engine import free_port, stop_process, wait_healthy

pytestmark = pytest.mark.engine

ROOT = Path(__file__).resolve().parents[2]
ENGINE_DIR = ROOT / "containers" / "llama-server"
IMAGE_ENGINE_DIR = "/opt/llama"


@pytest.fixture(scope="module")
def container() -> tuple[LlamaServerChart, dict[str, Any]]:
    # A farm-style classifier: 1 vCPU (= 1 thread, right for a 2-vCPU shared test machine), sized on m7g.large.
    w = ModelWorkload(
        name="smollm2-135m",
        image="llama-server@sha256:" + "a" * 64,
        model_uri="s3://models/models/smollm2-135m/main/SmolLM2-135M-Instruct.Q4_1.gguf",
        spec=sizing.ModelSpec(0.135, quantization="Q4_1", task="classification", context_window=2048),
        cpu=1,
        node_type="m7g.large",
    )
    chart = LlamaServerChart(cdk8s.App(), "smollm2", props=LlamaServerChartProps(model=w, policy=ServingPolicy()))
    dep = next(o for o in chart.to_json() if o["kind"] == "Deployment")
    (c,) = [
        x for x in dep["spec"]["template"]["spec"]["containers"] if x["name"] == "llama-server"
    ]  # not the metrics sidecar
    return chart, c


def local_command(command: list[str]) -> list[str]:
    assert command == list(ENGINE_COMMAND)
    return [sys.executable, command[1].replace(IMAGE_ENGINE_DIR, str(ENGINE_DIR))]


def local_env(c: dict[str, Any], binary: Path, model: Path, port: int) -> dict[str, str]:
    rendered = {e["name"]: e["value"] for e in c["env"]}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_", "MODEL_"))}
    env.update(rendered)
    env.update(
        MODEL_PATH=str(model),
        LLAMA_SERVER_BIN=str(binary),
        LLAMA_HOST="127.0.0.1",
        LLAMA_PORT=str(port),
        LLAMA_ARG_REPACK="0",
    )
    return env


def metrics(client: httpx.Client, url: str) -> dict[str, float]:
    out = {}
    for line in client.get(f"{url}/metrics").text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_rendered_engine_command_starts_serves_and_exposes_keda_metrics(
    container, llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path
) -> None:
    chart, c = container
    s = chart.sizing
    port = free_port()
    env = local_env(c, llama_server_bin, smollm2_gguf, port)
    cmd = local_command(c["command"])

    printed = subprocess.run(
        [*cmd, "print-command"], env=env, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    argv = shlex.split(printed)
    flag = lambda name: argv[argv.index(name) + 1]  # noqa: E731
    assert argv[0] == str(llama_server_bin)
    assert flag("--threads") == flag("--threads-batch") == str(int(s.cpu_request))
    assert (flag("--parallel"), flag("--ctx-size")) == (str(s.slots), str(s.slots * s.ctx_per_slot))
    assert "--metrics" in argv and flag("--model") == str(smollm2_gguf) and flag("--alias") == "smollm2-135m"

    log = tmp_path / "engine.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, timeout=120)
        # EKS mode execs: the container's PID 1 is llama-server itself with exactly the printed argv.
        assert Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")[:-1] == [a.encode() for a in argv]
        with httpx.Client(timeout=120) as client:
            r = client.post(
                f"{url}/v1/chat/completions",
                json={"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8, "temperature": 0},
            )
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["model"] == "smollm2-135m" and body["choices"][0]["message"]["content"].strip()
            m = metrics(client, url)
            assert RUNNING_METRIC in m and WAITING_METRIC in m

            # A burst larger than the rendered slot count: the surplus waits in the engine's queue, which is
            # exactly what KEDA's `waiting` trigger reads.
            burst = s.slots + 2
            done: list[int] = []

            def ask() -> None:
                resp = httpx.post(
                    f"{url}/v1/completions",
                    json={"prompt": "Count: one, two, three,", "max_tokens": 48, "temperature": 0},
                    timeout=300,
                )
                done.append(resp.status_code)

            threads = [threading.Thread(target=ask) for _ in range(burst)]
            for t in threads:
                t.start()
            seen_running, seen_waiting = 0.0, 0.0
            while any(t.is_alive() for t in threads):
                m = metrics(client, url)
                seen_running = max(seen_running, m[RUNNING_METRIC])
                seen_waiting = max(seen_waiting, m[WAITING_METRIC])
                time.sleep(0.05)
            for t in threads:
                t.join()
            assert done == [200] * burst
            assert seen_running == s.slots, f"processing peaked at {seen_running}, slots {s.slots}"
            assert seen_waiting >= 1, "the queued requests never showed in llamacpp:requests_deferred"
    finally:
        stop_process(proc)
    assert proc.returncode in (0, -15), log.read_text()[-2000:]
