"""llama-server's router mode (the model farm's multi-model pools, issue 13), pinned against the real binary.

One router, a --models-dir of three names for the SmolLM2 GGUF, --models-max 2. Each fact cites the vendored
source in the llama-cpp-python 0.3.36 sdist (vendor/llama.cpp/tools/server/...), so a pin bump that changes
the behaviour the pool design relies on fails here first.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.engine import free_port, wait_healthy

pytestmark = pytest.mark.engine

MODELS = ("alpha", "beta", "gamma")


def _call(base: str, path: str, body: dict | None = None, timeout: float = 120) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read().decode()
            return r.status, json.loads(raw) if raw.startswith("{") else {"text": raw}
    except urllib.error.HTTPError as e:
        raw = e.read().decode()
        return e.code, json.loads(raw) if raw.startswith("{") else {"text": raw}


def _chat(base: str, model: str, max_tokens: int = 2) -> tuple[int, dict]:
    return _call(
        base,
        "/v1/chat/completions",
        {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": max_tokens, "ignore_eos": True},
    )


def _statuses(base: str) -> dict[str, str]:
    status, body = _call(base, "/v1/models")
    assert status == 200, body
    return {m["id"]: m["status"]["value"] for m in body["data"]}


def _children(pid: int) -> list[int]:
    """Child processes of the router (one llama-server per loaded model), from /proc."""
    kids: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        kids += [int(p) for p in (task / "children").read_text().split()]
    return kids


@contextmanager
def _router(binary: Path, cwd: Path, *args: str) -> Iterator[tuple[subprocess.Popen, str]]:
    """Run llama-server with no model (router mode) on loopback; yields (process, base URL)."""
    port = free_port()
    with open(cwd / "router.log", "wb") as log:
        proc = subprocess.Popen(
            [str(binary), "--host", "127.0.0.1", "--port", str(port), *args],
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            wait_healthy(base, proc, timeout=30)
            yield proc, base
        finally:
            proc.terminate()  # the router unloads every child on SIGTERM (server.cpp clean_up -> unload_all)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def router(llama_server_bin: Path, smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("router-mode")
    models = work / "models"
    models.mkdir()
    for name in MODELS:
        (models / f"{name}.gguf").symlink_to(smollm2_gguf)
    # Children inherit the router's own arguments (server-models.cpp load_models: preset.merge(base_preset)).
    with _router(
        llama_server_bin,
        work,
        "--models-dir",
        str(models),
        "--models-max",
        "2",
        "-t",
        "1",
        "-c",
        "256",
        "-np",
        "1",
        "--metrics",
    ) as running:
        yield running


def test_models_dir_lists_every_gguf_by_file_stem_unloaded(router) -> None:
    # common/preset.cpp load_from_models_dir: a top-level *.gguf is a model named by its file name minus
    # ".gguf"; server-models.cpp get_router_models: each with status.value and the args its child would get.
    _, base = router
    status, body = _call(base, "/v1/models")
    assert status == 200
    by_id = {m["id"]: m for m in body["data"]}
    assert set(by_id) == set(MODELS)
    for m in by_id.values():
        assert m["status"]["value"] == "unloaded" and m["source"] == "models_dir"
        args = m["status"]["args"]
        assert args[args.index("--ctx-size") + 1] == "256" and args[args.index("--threads") + 1] == "1"
    # GET /props without ?model answers for the router itself (server-models.cpp get_router_props).
    status, props = _call(base, "/props")
    assert (status, props["role"], props["max_instances"], props["models_autoload"]) == (200, "router", 2, True)


def test_first_request_to_a_model_loads_it_and_answers(router) -> None:
    # server-models.cpp proxy_post -> ensure_model_ready: an unloaded model is spawned (one child
    # llama-server on a free loopback port) and the request waits for it, then is proxied.
    proc, base = router
    status, body = _chat(base, "alpha")
    assert status == 200, body
    assert body["model"] == "alpha" and body["choices"][0]["message"]["content"]
    assert _statuses(base)["alpha"] == "loaded"
    assert len(_children(proc.pid)) == 1


def test_a_third_model_unloads_the_least_recently_used(router) -> None:
    # server_lru_sched::pick_victim: the idle loaded model with the oldest last_used (set by POSTs only,
    # proxy_request update_last_used) is stopped before the new child spawns, so at most --models-max run.
    proc, base = router
    assert _chat(base, "beta")[0] == 200
    assert _chat(base, "alpha")[0] == 200  # alpha is now the most recently used, beta the least
    assert _statuses(base) == {"alpha": "loaded", "beta": "loaded", "gamma": "unloaded"}
    status, body = _chat(base, "gamma")
    assert status == 200, body
    assert _statuses(base) == {"alpha": "loaded", "beta": "unloaded", "gamma": "loaded"}
    assert len(_children(proc.pid)) == 2


def test_unknown_or_missing_model_is_a_400_naming_it(router) -> None:
    # server-models.cpp router_validate_model: ERROR_TYPE_INVALID_REQUEST (400), nothing is spawned.
    proc, base = router
    before = len(_children(proc.pid))
    status, body = _chat(base, "no-such-model")
    assert status == 400 and body["error"]["message"] == "model 'no-such-model' not found"
    status, body = _call(base, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]})
    assert status == 400 and body["error"]["message"] == "model name is missing from the request"
    assert len(_children(proc.pid)) == before


def test_metrics_exist_per_child_only_and_autoload_false_does_not_load(router) -> None:
    # server.cpp: in router mode routes.get_metrics = proxy_get, which needs ?model= and autoloads unless
    # ?autoload=false (is_autoload). There is no aggregate over the children at the router.
    _, base = router
    assert _chat(base, "alpha")[0] == 200
    status, body = _call(base, "/metrics")
    assert status == 400 and body["error"]["message"] == "model name is missing from the request"
    status, body = _call(base, "/metrics?model=alpha&autoload=false")
    assert status == 200 and "llamacpp:requests_processing 0" in body["text"]
    assert "llamacpp:requests_deferred" in body["text"]
    unloaded = next(name for name, value in _statuses(base).items() if value == "unloaded")
    status, body = _call(base, f"/metrics?model={unloaded}&autoload=false")
    assert status == 400 and body["error"]["message"] == "model is not loaded"
    assert _statuses(base)[unloaded] == "unloaded"


def test_request_for_a_cold_model_waits_while_every_loaded_model_is_busy(router) -> None:
    # server_lru_sched: a busy model (req_count != 0) is never a victim; the cold request queues (no 429/503)
    # and is served once a loaded model goes idle (proxy cleanup -> tick evicts it).
    _, base = router
    assert _chat(base, "alpha")[0] == 200 and _chat(base, "gamma")[0] == 200  # beta is the cold one
    done: dict[str, float] = {}

    def busy(name: str) -> None:
        assert _chat(base, name, max_tokens=48)[0] == 200
        done[name] = time.monotonic()

    threads = [threading.Thread(target=busy, args=(n,)) for n in ("alpha", "gamma")]
    for t in threads:
        t.start()
    time.sleep(0.3)
    status, body = _chat(base, "beta")
    beta_done = time.monotonic()
    for t in threads:
        t.join()
    assert status == 200, body
    assert beta_done > min(done.values())  # beta was answered only after one busy model finished


def test_preset_ini_per_model_options_with_router_flags_winning(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path
) -> None:
    # README "Model presets": [*] is the default for every model, a model's section overrides it, and the
    # router's own command line overrides both (server-models.cpp load_models: preset.merge(base_preset)).
    # Listing renders each child's args without loading anything.
    (tmp_path / "farm.ini").write_text(
        "version = 1\n[*]\nthreads = 1\nc = 1024\n"
        f"[one]\nmodel = {smollm2_gguf}\nc = 256\nparallel = 3\n"
        f"[two]\nmodel = {smollm2_gguf}\n"
    )
    with _router(
        llama_server_bin, tmp_path, "--models-preset", str(tmp_path / "farm.ini"), "--models-max", "1", "-np", "1"
    ) as (_, base):
        status, body = _call(base, "/v1/models")
    assert status == 200
    args = {m["id"]: m["status"]["args"] for m in body["data"]}
    assert set(args) == {"one", "two"}

    def opt(name: str, flag: str) -> str:
        return args[name][args[name].index(flag) + 1]

    assert (opt("one", "--ctx-size"), opt("two", "--ctx-size")) == ("256", "1024")
    assert opt("one", "--parallel") == "1"  # the router's -np 1 beats the section's parallel = 3
    assert opt("two", "--threads") == "1"
    assert all(m["source"] == "preset" and m["status"]["value"] == "unloaded" for m in body["data"])
