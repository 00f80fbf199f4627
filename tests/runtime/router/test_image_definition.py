"""The router image definition: lint-clean, the engine's base digest, hash-pinned wheels, non-root."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from tests.runtime.router.harness import ROUTER_DIR

DOCKERFILE = ROUTER_DIR / "Dockerfile"
ENGINE_DOCKERFILE = ROUTER_DIR.parent / "llama-server" / "Dockerfile"
BIN = Path(sys.executable).parent


def test_hadolint_clean() -> None:
    result = subprocess.run([str(BIN / "hadolint"), str(DOCKERFILE)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_same_base_digest_as_the_engine_image() -> None:
    froms = re.findall(r"^FROM (\S+)", DOCKERFILE.read_text(), re.M)
    engine_froms = set(re.findall(r"^FROM (\S+)", ENGINE_DOCKERFILE.read_text(), re.M))
    assert len(froms) == 2 and set(froms) == engine_froms and len(engine_froms) == 1
    assert re.fullmatch(r"[\w./-]+:[\w.-]+@sha256:[0-9a-f]{64}", froms[0])


def test_wheels_are_pinned_with_hashes_and_cover_every_third_party_import() -> None:
    lines = [ln for ln in (ROUTER_DIR / "requirements.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    pins = {}
    for line in lines:
        m = re.fullmatch(r"([a-z0-9-]+)==(\S+) --hash=sha256:[0-9a-f]{64}", line)
        assert m, line
        pins[m.group(1)] = m.group(2)
    assert {"prometheus-client", "botocore", "jmespath", "python-dateutil", "six", "urllib3"} <= set(pins)
    # Every non-stdlib top-level import of the package is installed by requirements.txt.
    imported = set()
    for path in (ROUTER_DIR / "slm_router").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names) - {"__future__"}
    # inference_runtime is the shared package (its own wheels: tests/runtime/test_inference_runtime.py).
    assert third_party == {"prometheus_client", "botocore", "inference_runtime"}
    assert "--require-hashes" in DOCKERFILE.read_text() and "--no-deps" in DOCKERFILE.read_text()


def test_runs_the_package_as_numeric_non_root() -> None:
    text = DOCKERFILE.read_text()
    user = re.findall(r"^USER (\S+)", text, re.M)
    assert user and re.fullmatch(r"[1-9]\d*:[1-9]\d*", user[-1])
    assert "COPY router/slm_router/ /opt/router/app/slm_router/" in text
    assert "COPY inference_runtime/ /opt/router/app/inference_runtime/" in text  # on PYTHONPATH, beside slm_router
    assert 'ENTRYPOINT ["python3", "-m", "slm_router"]' in text
    assert "EXPOSE 8000" in text
    assert re.search(r"^ENV PYTHONPATH=/opt/router/app:/opt/router/lib", text, re.M)


def test_serves_sagemaker_without_privileges_or_a_writable_directory(tmp_path: Path) -> None:
    """F10: the image keeps USER 65532 on SageMaker too. "SageMaker AI expects all containers to run with root users
    ... users that do not have root-level access can cause permissions issues" (docs.aws.amazon.com/sagemaker/latest/
    dg/your-algorithms-inference-code.html) is about the files SageMaker mounts: /opt/ml and /tmp (AWS docs, encryption
    at rest: "Endpoints - /opt/ml/ and /tmp/"). The router reads no model data (RouterEndpoint gives it none), takes
    its config from ROUTER_CONFIG_JSON and writes no file, so a root-owned mount cannot break it; the EKS charts run it
    as 65532 anyway (k8s/workload_defaults.NON_ROOT_UID). Shown here: `serve` as SageMaker starts it, with no
    capabilities (a root-owned 0755 mount is then as closed to it as to uid 65532), its working directory, HOME and
    TMPDIR read-only — /ping and /invocations answer, the process stays up, and nothing is written."""
    import json
    import os
    import shutil
    import time

    import httpx

    from tests.runtime.router.harness import router_config
    from tests.support.engine import free_port, stop_process

    closed = tmp_path / "sagemaker-tmp"
    closed.mkdir()
    closed.chmod(0o555)
    port = free_port()
    cfg = router_config("http://127.0.0.1:9", "http://127.0.0.1:9")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROUTER_", "AWS_", "PYTHON"))}
    env.update(
        ROUTER_CONFIG_JSON=json.dumps(cfg),
        ROUTER_PORT=str(port),
        PYTHONPATH=str(ROUTER_DIR),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",
        HOME=str(closed),
        TMPDIR=str(closed),
    )
    setpriv = shutil.which("setpriv")
    assert setpriv, "util-linux setpriv is needed to drop every capability"
    log = tmp_path / "router.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [setpriv, "--inh-caps=-all", "--bounding-set=-all", "--", sys.executable, "-m", "slm_router", "serve"],
            cwd=closed,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        status = f"/proc/{proc.pid}/status"
        assert "CapEff:\t0000000000000000" in Path(status).read_text()
        assert httpx.get(f"{url}/ping", timeout=10).status_code in (200, 503)
        answer = httpx.post(
            f"{url}/invocations",
            json={"messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 4},
            timeout=60,
        )
        assert answer.status_code in (200, 502, 503, 504), answer.text  # the upstreams are unreachable: an HTTP answer
        assert proc.poll() is None, log.read_text()
        assert list(closed.iterdir()) == []
        assert "Permission denied" not in log.read_text() and "Traceback" not in log.read_text()
    finally:
        stop_process(proc, timeout=30)
