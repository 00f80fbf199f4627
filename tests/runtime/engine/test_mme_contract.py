"""SageMaker's multi-model endpoint contract (docs.aws.amazon.com/sagemaker/latest/dg/mms-container-apis.html),
exercised on loopback against the container's real entrypoint, started as SageMaker starts it (`serve` with
SAGEMAKER_MULTI_MODEL=true), each model served by the real llama-server.

SageMaker downloads a model's .tar.gz and extracts it under /opt/ml/models/<model_name>/model only when the model
is first invoked, long after the container started: here every model directory is created (a real tar.gz of the
GGUF + engine.json, extracted) after the adapter answers /ping.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from inference_runtime.llama_flags import FIT
from tests.runtime.engine.serving import ENGINE_DIR, chat_body, serve_env
from tests.support.engine import child_pids, free_port, process_gone, wait_healthy

pytestmark = pytest.mark.engine

MIB = 1024 * 1024
TARGET = "m-0001/0123456789abcdef-89abcdef.tar.gz"  # what InvokeEndpoint's TargetModel looks like for a farm model


@dataclass
class Mme:
    url: str
    proc: subprocess.Popen
    log: Path
    models_root: Path  # SageMaker's /opt/ml/models

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def children(self) -> list[int]:
        return child_pids(self.proc.pid)

    def child_args(self) -> dict[str, list[str]]:
        """llama-server children by their --alias (the model_name)."""
        out = {}
        for pid in self.children():
            args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
            out[args[args.index("--alias") + 1]] = args
        return out

    def child_rss(self) -> dict[str, int]:
        rss = {}
        for pid in self.children():
            args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
            status = Path(f"/proc/{pid}/status").read_text()
            rss[args[args.index("--alias") + 1]] = int(re.search(r"^VmRSS:\s+(\d+) kB", status, re.M).group(1)) * 1024  # type: ignore[union-attr]
        return rss

    def arrive(self, name: str, gguf: Path, engine: dict | None = None) -> str:
        """What SageMaker does before POST /models: extract the model's .tar.gz (GGUF + engine.json) under
        /opt/ml/models/<name>/model. Returns that directory (the `url` of the load request)."""
        archive = self.models_root.parent / f"{name}.tar.gz"
        with tarfile.open(archive, "w:gz", compresslevel=0) as tar:  # stored: GGUF weights hardly compress
            tar.add(gguf, arcname=gguf.name)
            if engine is not None:
                data = json.dumps(engine).encode()
                info = tarfile.TarInfo("engine.json")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        target = self.models_root / name / "model"
        target.mkdir(parents=True)
        with tarfile.open(archive) as tar:
            tar.extractall(target, filter="data")
        archive.unlink()
        return str(target)

    def load(self, name: str, url: str, timeout: float = 120) -> httpx.Response:
        return httpx.post(f"{self.url}/models", json={"model_name": name, "url": url}, timeout=timeout)


@contextmanager
def mme_container(binary: Path, workdir: Path, mode: str = "serve", **extra: str) -> Iterator[Mme]:
    models_root = workdir / "opt-ml-models"
    models_root.mkdir()
    port = free_port()
    env = serve_env(binary, workdir, port, free_port(), **extra)
    env.pop("LLAMA_ENGINE_PORT")  # each child gets its own free loopback port
    env.pop("LLAMA_CACHE_RAM_MIB")  # the multi-model default (0: no host-RAM prompt cache per child)
    env.update(SAGEMAKER_MULTI_MODEL="true", LLAMA_CTX_PER_SLOT="256", LLAMA_PARALLEL="1")
    env.update(extra)
    log = workdir / "mme.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(ENGINE_DIR / "entrypoint.py"), mode], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    mme = Mme(f"http://127.0.0.1:{port}", proc, log, models_root)
    try:
        try:
            wait_healthy(mme.url, proc, timeout=30, path="/ping")
        except (RuntimeError, TimeoutError) as e:
            raise AssertionError(f"{e}\n{mme.log_text()}") from None
        yield mme
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_load_invoke_list_get_409_and_unload_a_model_that_arrives_after_start(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path
) -> None:
    with mme_container(llama_server_bin, tmp_path, MME_MEMORY_BUDGET_BYTES=str(4096 * MIB)) as mme:
        assert httpx.get(f"{mme.url}/models", timeout=5).json() == {"models": []}
        assert mme.children() == []
        url = mme.arrive("m-0001", smollm2_gguf, {"ctx-size": "512", "parallel": "1", "threads": "1"})

        r = mme.load("m-0001", url)
        assert r.status_code == 200, r.text + mme.log_text()
        args = mme.child_args()["m-0001"]  # engine.json reached the engine
        assert args[args.index("--ctx-size") + 1] == "512" and args[args.index("--threads") + 1] == "1"
        assert args[args.index("--host") + 1] == "127.0.0.1"  # only the adapter faces the network

        again = mme.load("m-0001", url)
        assert again.status_code == 409 and "already loaded" in again.json()["error"]["message"]
        assert len(mme.children()) == 1  # the second load started nothing

        assert httpx.get(f"{mme.url}/models", timeout=5).json() == {
            "models": [{"modelName": "m-0001", "modelUrl": url}]
        }
        assert httpx.get(f"{mme.url}/models/m-0001", timeout=5).json() == {"modelName": "m-0001", "modelUrl": url}
        assert httpx.get(f"{mme.url}/models/m-0002", timeout=5).status_code == 404

        r = httpx.post(
            f"{mme.url}/models/m-0001/invoke",
            json=chat_body("What is 2+2?", max_tokens=4),
            headers={"X-Amzn-SageMaker-Target-Model": TARGET},
            timeout=60,
        )
        assert r.status_code == 200, r.text
        assert r.json()["model"] == "m-0001" and r.json()["choices"][0]["message"]["content"]
        assert f"invoke model=m-0001 target_model={TARGET}" in mme.log_text()

        with httpx.stream(
            "POST",
            f"{mme.url}/models/m-0001/invoke",
            json=chat_body("Count to five.", max_tokens=8, stream=True),
            timeout=60,
        ) as s:
            assert s.status_code == 200 and s.headers["content-type"].startswith("text/event-stream")
            events = [line for line in s.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "data: [DONE]" and len(events) > 2

        missing = httpx.post(f"{mme.url}/models/m-0002/invoke", json=chat_body(), timeout=10)
        assert missing.status_code == 404 and "not loaded" in missing.json()["error"]["message"]

        child = mme.children()[0]
        r = httpx.delete(f"{mme.url}/models/m-0001", timeout=30)
        assert r.status_code == 200
        # "The resources provisioned to model_name should be reclaimed by the container when this API returns"
        assert process_gone(child)
        assert httpx.get(f"{mme.url}/models/m-0001", timeout=5).status_code == 404
        assert httpx.delete(f"{mme.url}/models/m-0001", timeout=5).status_code == 404
        assert httpx.post(f"{mme.url}/models/m-0001/invoke", json=chat_body(), timeout=10).status_code == 404
        assert httpx.get(f"{mme.url}/models", timeout=5).json() == {"models": []}


def test_every_child_starts_with_fit_off_unless_its_engine_json_names_fit(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path
) -> None:
    """Each SageMaker load is a cold load of a CPU-only child with ctx-size set: the pinned --fit dry run can change
    nothing there (common/fit.cpp common_params_fit_impl) and costs a third of a pool's cold load, so the children run
    with it off, as a pool's preset does (engines/pool_preset.py POOL_DEFAULTS). A model's engine.json still wins, once
    on the command line (common/arg.cpp parse_cli_args warns on a repeated flag)."""
    with mme_container(llama_server_bin, tmp_path, MME_MEMORY_BUDGET_BYTES=str(4096 * MIB)) as mme:
        engine = {"ctx-size": "256", "parallel": "1", "threads": "1"}
        for name, own in (("m-0001", {}), ("m-0002", {FIT.key: "on"})):
            r = mme.load(name, mme.arrive(name, smollm2_gguf, {**engine, **own}))
            assert r.status_code == 200, r.text + mme.log_text()
            r = httpx.post(f"{mme.url}/models/{name}/invoke", json=chat_body("What is 2+2?", max_tokens=4), timeout=60)
            assert r.status_code == 200, r.text
            assert r.json()["model"] == name and r.json()["choices"][0]["message"]["content"]
        args = mme.child_args()  # the real children's /proc/<pid>/cmdline
        fits = {
            name: [a[i + 1] for i, flag in enumerate(a) if flag in (FIT.flag, FIT.short)] for name, a in args.items()
        }
        assert fits == {"m-0001": ["off"], "m-0002": ["on"]}, args
        assert "specified multiple times" not in mme.log_text()


def test_fit_off_is_the_children_default_only(smollm2_gguf: Path) -> None:
    """The operator's --fit (llama-server's LLAMA_ARG_FIT, or LLAMA_EXTRA_ARGS) is left to the engine, and a single
    engine (`serve` without SAGEMAKER_MULTI_MODEL, EKS) keeps the engine's default: it loads once per process."""
    if str(ENGINE_DIR) not in sys.path:
        sys.path.insert(0, str(ENGINE_DIR))
    from inference_runtime.engine_flags import config_from_env, llama_server_args
    from mme_adapter import child_defaults

    assert child_defaults({}, binary="-", threads=1).fit == "off"
    assert child_defaults({FIT.arg_env: "on"}, binary="-", threads=1).fit is None
    assert child_defaults({"LLAMA_EXTRA_ARGS": f"{FIT.short} on"}, binary="-", threads=1).fit is None
    single = llama_server_args(config_from_env({"MODEL_PATH": str(smollm2_gguf)}, cpus=1, memory_limit=None))
    assert FIT.flag not in single and FIT.short not in single, single


def test_507_under_memory_pressure_until_sagemaker_unloads_one(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path
) -> None:
    """A budget of 2.5 models: the third load is 507 (SageMaker's cue to unload one), DELETE frees the room, the
    same load then succeeds. Also: each child's measured RSS stays under the estimate it was admitted with."""
    if str(ENGINE_DIR) not in sys.path:
        sys.path.insert(0, str(ENGINE_DIR))
    from mme_adapter import ChildDefaults, child_config, memory_needed

    engine = {"ctx-size": "256", "parallel": "1", "threads": "1"}
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / smollm2_gguf.name).symlink_to(smollm2_gguf)
    (probe / "engine.json").write_text(json.dumps(engine))
    needed = memory_needed(child_config("probe", probe, ChildDefaults(binary="-", threads=1)))
    adapter_allowance = 64 * MIB  # the adapter's own RSS (Python + asyncio) counts against the budget
    budget = adapter_allowance + int(2.5 * needed)
    with mme_container(
        llama_server_bin, tmp_path, mode="serve-mme", MME_MEMORY_BUDGET_BYTES=str(budget), MME_LIST_PAGE_SIZE="1"
    ) as mme:
        urls = {name: mme.arrive(name, smollm2_gguf, engine) for name in ("a", "b", "c")}
        assert mme.load("a", urls["a"]).status_code == 200
        assert mme.load("b", urls["b"]).status_code == 200
        for name in ("a", "b"):
            assert (
                httpx.post(
                    f"{mme.url}/models/{name}/invoke", json=chat_body("Hi", max_tokens=2), timeout=60
                ).status_code
                == 200
            )
        rss = mme.child_rss()
        print(
            f"estimate {needed / MIB:.1f} MiB per model; measured child RSS after one request: "
            + ", ".join(f"{n} {v / MIB:.1f} MiB" for n, v in sorted(rss.items()))
            + f"; budget {budget / MIB:.0f} MiB"
        )
        assert all(v <= needed for v in rss.values()), (rss, needed)

        full = mme.load("c", urls["c"])
        assert full.status_code == 507, full.text
        assert "unload a model" in full.json()["error"]["message"]
        assert len(mme.children()) == 2  # nothing was started for it

        # Pagination, as SageMaker calls it: next_page_token in, nextPageToken out until the last page.
        first = httpx.get(f"{mme.url}/models", timeout=5).json()
        assert [m["modelName"] for m in first["models"]] == ["a"] and first["nextPageToken"]
        second = httpx.get(f"{mme.url}/models", params={"next_page_token": first["nextPageToken"]}, timeout=5).json()
        assert [m["modelName"] for m in second["models"]] == ["b"] and "nextPageToken" not in second

        assert httpx.delete(f"{mme.url}/models/a", timeout=30).status_code == 200
        r = mme.load("c", urls["c"])
        assert r.status_code == 200, r.text
        assert (
            httpx.post(f"{mme.url}/models/c/invoke", json=chat_body("Hi", max_tokens=2), timeout=60).status_code == 200
        )
        assert sorted(mme.child_args()) == ["b", "c"]

        # A model that needs more than the whole budget is a plain error: unloading others could never make room.
        huge = mme.arrive("huge", smollm2_gguf, {"ctx-size": "131072", "threads": "1"})
        r = mme.load("huge", huge)
        assert r.status_code == 500 and "more than this instance's whole" in r.json()["error"]["message"]

        # SIGTERM (SageMaker's stop): every child is stopped, the container exits 0.
        children = mme.children()
        mme.proc.terminate()
        assert mme.proc.wait(timeout=30) == 0, mme.log_text()
        assert all(not Path(f"/proc/{pid}").exists() for pid in children)


def test_a_broken_artifact_is_a_400_naming_it(llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path) -> None:
    """(A child that dies after loading is restarted in place: test_mme_restart.py.)"""
    with mme_container(llama_server_bin, tmp_path, mode="serve-mme", MME_MEMORY_BUDGET_BYTES=str(4096 * MIB)) as mme:
        empty = mme.models_root / "empty" / "model"
        empty.mkdir(parents=True)
        r = mme.load("empty", str(empty))
        assert r.status_code == 400 and "must hold exactly one .gguf" in r.json()["error"]["message"]
        url = mme.arrive("bad", smollm2_gguf, {"port": "9999"})
        r = mme.load("bad", url)
        assert r.status_code == 400 and "--port is set by the container" in r.json()["error"]["message"]
        assert mme.children() == []


def test_the_image_declares_the_multi_model_capability() -> None:
    """CreateModel in MultiModel mode refuses an image without this label ("does not contain required
    com.amazonaws.sagemaker.capabilities.multi-models=true Docker label(s)", aws/amazon-sagemaker-examples#3470;
    the label: docs.aws.amazon.com/sagemaker/latest/dg/build-multi-model-build-container.html)."""
    labels = re.findall(r"^LABEL (\S+=\S+)$", (ENGINE_DIR / "Dockerfile").read_text(), re.M)
    assert "com.amazonaws.sagemaker.capabilities.multi-models=true" in labels


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: SageMaker starts the container as root")
def test_started_as_root_the_adapter_and_every_child_run_as_65532(llama_server_bin: Path, smollm2_gguf: Path) -> None:
    """As `serve` (test_privileges.py): root drops to 65532:65532 before anything listens; a model that arrives
    later unreadable for 65532 is refused with the file and the fix named, and nothing is started for it."""
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="mme-privileges-", dir="/tmp"))  # 0755, outside root's 0700 home
    try:
        base.chmod(0o755)
        (base / "bin").mkdir(mode=0o755)
        binary = base / "bin" / "llama-server"
        shutil.copy2(llama_server_bin, binary)
        binary.chmod(0o755)
        with mme_container(binary, base, LLAMA_RUN_AS="", MME_MEMORY_BUDGET_BYTES=str(4096 * MIB)) as mme:
            assert "dropped root: serving as uid 65532 gid 65532" in mme.log_text()
            url = mme.arrive("m", smollm2_gguf, {"ctx-size": "256", "threads": "1"})
            assert mme.load("m", url).status_code == 200, mme.log_text()
            r = httpx.post(f"{mme.url}/models/m/invoke", json=chat_body("Say hi.", max_tokens=2), timeout=60)
            assert r.status_code == 200, r.text
            for pid in (mme.proc.pid, *mme.children()):
                status = Path(f"/proc/{pid}/status").read_text()
                assert re.search(r"^Uid:\s+65532\s+65532\s+65532\s+65532$", status, re.M), status
            locked = Path(mme.arrive("locked", smollm2_gguf)) / smollm2_gguf.name
            locked.chmod(0o600)
            r = mme.load("locked", str(locked.parent))
            assert (
                r.status_code == 500
                and f"{locked} is not readable by uid 65532 gid 65532" in r.json()["error"]["message"]
            )
            assert "LLAMA_RUN_AS=0:0" in r.json()["error"]["message"] and len(mme.children()) == 1
    finally:
        shutil.rmtree(base, ignore_errors=True)
