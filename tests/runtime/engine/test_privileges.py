"""SageMaker starts containers as root; `entrypoint.py serve` checks the model, then drops to 65532:65532 for
good before the adapter or llama-server runs. Run as root here (the test machine's user), with the real
entrypoint and the real llama-server: both processes end up as uid/gid 65532 with no supplementary group, and
a model 65532 cannot read fails fast with one line that names the file, its owner and mode, and the fix."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import pytest

from tests.runtime.engine.serving import ENGINE_DIR, chat_body, serve_env, start_endpoint, stop_endpoint
from tests.support.engine import free_port

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: SageMaker starts the container as root")

NONROOT = 65532


def ids(pid: int) -> dict[str, list[int]]:
    """Real, effective, saved and filesystem uids and gids, and the supplementary groups, from /proc."""
    status = Path(f"/proc/{pid}/status").read_text()
    out = {}
    for key in ("Uid", "Gid", "Groups"):
        (line,) = re.findall(rf"^{key}:[ \t]*(.*)$", status, re.M)
        out[key] = [int(v) for v in line.split()]
    return out


@pytest.fixture()
def reachable(llama_server_bin: Path):
    """A 0755 directory outside root's 0700 home holding a copy of the engine binary: what the image has
    under /opt/llama (pytest's own tmp dirs are 0700, so 65532 could not reach them)."""
    base = Path(tempfile.mkdtemp(prefix="privileges-", dir="/tmp"))
    base.chmod(0o755)
    (base / "bin").mkdir(mode=0o755)
    binary = base / "bin" / "llama-server"
    shutil.copy2(llama_server_bin, binary)
    binary.chmod(0o755)
    yield base, binary
    shutil.rmtree(base, ignore_errors=True)


def test_serve_started_as_root_runs_adapter_and_engine_as_65532(reachable, smollm2_gguf: Path) -> None:
    base, binary = reachable
    # LLAMA_RUN_AS empty: the image's default, exactly what SageMaker runs.
    ep = start_endpoint(binary, smollm2_gguf, base, LLAMA_RUN_AS="")
    try:
        for pid in (ep.proc.pid, ep.engine_pid()):
            assert ids(pid) == {"Uid": [NONROOT] * 4, "Gid": [NONROOT] * 4, "Groups": []}, pid
        assert "dropped root: serving as uid 65532 gid 65532" in ep.log.read_text()
        r = httpx.post(f"{ep.url}/invocations", json=chat_body("Say hi.", max_tokens=4), timeout=120)
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] is not None
    finally:
        assert stop_endpoint(ep) == 0, ep.log_tail()


def run_serve(binary: Path, model_dir: Path) -> subprocess.CompletedProcess:
    env = serve_env(binary, model_dir, free_port(), free_port(), LLAMA_RUN_AS="")
    return subprocess.run(
        [sys.executable, str(ENGINE_DIR / "entrypoint.py"), "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_model_65532_cannot_read_fails_fast_and_says_why(reachable) -> None:
    base, binary = reachable
    model_dir = base / "opt-ml-model"
    model_dir.mkdir(mode=0o755)
    model = model_dir / "model.gguf"
    model.write_bytes(b"GGUF")
    model.chmod(0o600)  # root-only, as a root-run download could leave it
    result = run_serve(binary, model_dir)
    assert result.returncode == 2
    assert (
        f"entrypoint: error: model {model} is not readable by uid 65532 gid 65532: {model} is 0:0 mode 0600 "
        "(no read permission for 65532:65532). SageMaker starts the container as root and it serves as 65532:65532: "
        "make the model files readable by others (files 0644, directories 0755) or set LLAMA_RUN_AS=0:0 to serve as root"
    ) in result.stderr
    assert "adapter on" not in result.stderr  # nothing listened, no engine started


def test_an_unsearchable_model_directory_is_named(reachable) -> None:
    base, binary = reachable
    model_dir = base / "opt-ml-model"
    model_dir.mkdir(mode=0o755)
    (model_dir / "model.gguf").write_bytes(b"GGUF")
    model_dir.chmod(0o700)
    result = run_serve(binary, model_dir)
    assert result.returncode == 2
    assert f"directory {model_dir} is 0:0 mode 0700 (no search permission for 65532:65532)" in result.stderr


def test_eks_pods_run_as_the_uid_serve_drops_to() -> None:
    """The image's USER is root, so runAsNonRoot holds only through an explicit runAsUser/runAsGroup: the pod
    securityContext must name the same ids that `serve` drops to."""
    from cpu_inference.k8s.workloads.workload_defaults import container_security_context, pod_security_context
    from inference_runtime.privileges import DEFAULT_RUN_AS

    for ctx in (pod_security_context(), container_security_context()):
        assert (ctx.user, ctx.group) == DEFAULT_RUN_AS and ctx.ensure_non_root is True


@pytest.mark.parametrize("raw", ["root", "65532", "a:b", "-1:0"])
def test_run_as_must_be_numeric_ids(raw) -> None:
    from inference_runtime.engine_flags import EngineConfigError
    from inference_runtime.privileges import run_as

    with pytest.raises(EngineConfigError, match=r"LLAMA_RUN_AS must be UID:GID"):
        run_as({"LLAMA_RUN_AS": raw})
