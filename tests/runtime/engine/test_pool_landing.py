"""A farm pool serves its models as their copies land (issue 25): the real `entrypoint.py pool` over the pinned router.

The catalog copies pooled models one by one after the deploy, so a replica starts with a preset naming files that are
not there yet. The supervisor gives the router only the landed sections, re-stats the missing files every poll, and
reloads the router in place when one lands (the running models keep serving); its side port answers what it knows
about every model (containers/inference_runtime/pool_status.py: states and JSON keys).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from inference_runtime.pool_status import COPY_FAILED, COPYING, LANDED
from tests.runtime.engine.pool_support import (
    ENTRYPOINT,
    MARKER,
    POLL,
    call,
    chat,
    child_serving,
    follow_events,
    land,
    pool_env,
    router_models,
    run_pool,
    until,
    write_preset,
)
from tests.support.engine import free_port, stop_process, wait_healthy


@pytest.mark.engine
def test_the_pinned_router_starts_with_no_model_and_lists_none(llama_server_bin: Path, tmp_path: Path) -> None:
    # A replica whose every copy is still running: the effective preset is only `[*]` (or empty). The router's
    # load_models reads it as no section (common/preset.cpp load_from_ini: `[*]` is the global preset, not a model)
    # and starts with an empty list (server-models.cpp log_available_models: "no models found"); a model named in a
    # request is the 400 the gateway turns into 503 "being copied".
    for text in ("version = 1\n[*]\nthreads = 1\nctx-size = 256\n", ""):
        (tmp_path / "p.ini").write_text(text)
        port = free_port()
        proc = subprocess.Popen(
            [str(llama_server_bin), "--host", "127.0.0.1", "--port", str(port), "--models-preset", "p.ini",
             "--models-max", "2"],
            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            base = f"http://127.0.0.1:{port}"
            wait_healthy(base, proc, timeout=30)
            assert call(base, "/models") == (200, {"data": [], "object": "list"})
            status, body = chat(base, "m-0001")
            assert status == 400 and body["error"]["message"] == "model 'm-0001' not found"
        finally:
            stop_process(proc)


@pytest.mark.engine
def test_a_model_that_lands_while_the_pool_serves_is_served_without_a_restart(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path
) -> None:
    farm = tmp_path / "farm"
    files = {name: farm / name / "0123456789abcdef" / smollm2_gguf.name for name in ("a", "b", "c")}
    land(smollm2_gguf, files["a"])  # only a's copy has landed when the replica starts
    preset = write_preset(tmp_path / "preset.ini", files)
    env = pool_env(llama_server_bin, preset, LLAMA_POOL_COPY_FAILED_FILE=MARKER)
    with run_pool(env, tmp_path) as pool:
        status, body = call(pool.status, "/status")
        assert status == 200 and body == {
            "total": 3,
            "landed": 1,
            "models": {
                "a": {"state": LANDED, "reason": None},
                "b": {"state": COPYING, "reason": None},
                "c": {"state": COPYING, "reason": None},
            },
        }
        assert call(pool.status, "/status?model=b") == (
            200,
            {"model": "b", "state": COPYING, "reason": None, "landed": 1, "total": 3},
        )
        assert call(pool.status, "/status?model=nope") == (
            404,
            {"model": "nope", "state": None, "reason": None, "landed": 1, "total": 3},
        )
        assert router_models(pool.base) == {"a": "unloaded"}  # the router knows only what has landed
        assert chat(pool.base, "b")[0] == 400  # what the gateway turns into 503 "being copied" (INTERFACE §3)
        assert chat(pool.base, "a")[0] == 200
        router = pool.router
        a_pid = child_serving(router, files["a"])
        events: list[dict] = []
        threading.Thread(target=follow_events, args=(pool.base, events), daemon=True).start()
        time.sleep(0.3)

        landed_at = time.monotonic()
        land(smollm2_gguf, files["b"])

        def b_landed() -> bool:
            """/status says b landed"""
            return call(pool.status, "/status?model=b")[1]["state"] == LANDED

        until(b_landed, timeout=30)
        seen = time.monotonic() - landed_at
        assert seen <= 2 * POLL + 1.0, seen  # the next poll, plus the reload
        assert set(router_models(pool.base)) == {"a", "b"}
        status, body = chat(pool.base, "b")
        assert status == 200 and body["model"] == "b", body
        # a was not restarted: the same child process, and no status change for it on the router's event stream.
        assert child_serving(router, files["a"]) == a_pid
        assert pool.router == router
        assert [e for e in events if e["event"] == "models_reload"], events
        assert not [e for e in events if e["model"] == "a"], events
        assert call(pool.status, "/status")[1]["landed"] == 2
        assert "model b landed (2 of 3)" in pool.text()


@pytest.mark.engine
def test_a_failed_copy_is_reported_with_its_reason_until_the_file_lands(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path
) -> None:
    farm = tmp_path / "farm"
    files = {name: farm / name / "0123456789abcdef" / smollm2_gguf.name for name in ("a", "b")}
    land(smollm2_gguf, files["a"])
    marker = files["b"].parent / MARKER  # catalog.failure_key: beside the GGUF's key
    marker.parent.mkdir(parents=True)
    marker.write_text(
        json.dumps(
            {"model": "b", "reason": "Hub answered 404 for model.gguf", "attempt": 3, "at": "2026-01-01T00:00:00Z"}
        )
    )
    env = pool_env(llama_server_bin, write_preset(tmp_path / "preset.ini", files), LLAMA_POOL_COPY_FAILED_FILE=MARKER)
    with run_pool(env, tmp_path) as pool:
        assert call(pool.status, "/status?model=b") == (
            200,
            {"model": "b", "state": COPY_FAILED, "reason": "Hub answered 404 for model.gguf", "landed": 1, "total": 2},
        )
        assert "warning: model b failed to copy: Hub answered 404 for model.gguf" in pool.text()
        # The catalog retries; a new marker's reason replaces the old one (the marker is overwritable).
        marker.write_text(json.dumps({"model": "b", "reason": "read timed out", "attempt": 4, "at": "x"}))

        def new_reason() -> bool:
            """the new reason is reported"""
            return call(pool.status, "/status?model=b")[1]["reason"] == "read timed out"

        until(new_reason, timeout=30)
        # A later attempt landed: the GGUF's presence wins over the marker left beside it.
        land(smollm2_gguf, files["b"])

        def b_landed() -> bool:
            """b is landed despite its old marker"""
            return call(pool.status, "/status?model=b")[1] == {
                "model": "b", "state": LANDED, "reason": None, "landed": 2, "total": 2
            }  # fmt: skip

        until(b_landed, timeout=30)
        status, body = chat(pool.base, "b")
        assert status == 200 and body["model"] == "b", body


@pytest.mark.engine
def test_a_preset_with_no_landed_model_starts_and_serves_the_first_that_lands(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path
) -> None:
    gguf = tmp_path / "farm" / "m" / "0123456789abcdef" / smollm2_gguf.name
    env = pool_env(llama_server_bin, write_preset(tmp_path / "preset.ini", {"m": gguf}))  # no marker variable
    with run_pool(env, tmp_path) as pool:
        assert router_models(pool.base) == {}
        assert call(pool.status, "/status")[1] == {
            "total": 1,
            "landed": 0,
            "models": {"m": {"state": COPYING, "reason": None}},
        }
        assert "0 of 1 models landed" in pool.text()
        land(smollm2_gguf, gguf)
        until(lambda: router_models(pool.base) == {"m": "unloaded"}, timeout=30)
        assert chat(pool.base, "m")[0] == 200


@pytest.mark.engine
def test_the_effective_preset_keeps_each_landed_section_as_written(tmp_path: Path) -> None:
    """The router compares a running model's options on reload: a kept section must reach it byte for byte."""
    from pool_landing import effective_preset

    text = (
        "version = 1 ; top\n[*]\nthreads = 1\n# a comment\n[a] ; first\nmodel = /m/a.gguf # inline\nctx-size = 256\n"
        "[b]\nmodel = /m/b.gguf\n[c]\r\nmodel = /m/c.gguf\r\n"
    )
    assert effective_preset(text, ["b"]) == (
        "version = 1 ; top\n[*]\nthreads = 1\n# a comment\n[a] ; first\nmodel = /m/a.gguf # inline\nctx-size = 256\n"
        "[c]\r\nmodel = /m/c.gguf\r\n"
    )
    assert effective_preset(text, ["a", "b", "c"]) == "version = 1 ; top\n[*]\nthreads = 1\n# a comment\n"


def _raw(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_the_side_port_answers_get_only_and_bounds_what_it_reads(tmp_path: Path, smollm2_gguf: Path) -> None:
    """A stub router (it never answers): the side port does not depend on it."""
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\nexec sleep 60\n")
    fake.chmod(0o755)
    env = pool_env(fake, write_preset(tmp_path / "preset.ini", {"a": smollm2_gguf}))
    port = int(env["LLAMA_POOL_STATUS_PORT"])
    proc = subprocess.Popen([sys.executable, str(ENTRYPOINT), "pool"], env=env, stderr=subprocess.PIPE, cwd=tmp_path)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, timeout=30, path="/status")
        assert _raw(port, b"POST /status HTTP/1.0\r\nContent-Length: 5\r\n\r\nhello").startswith(b"HTTP/1.0 501")
        assert _raw(port, b"GET /other HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.0 404")
        # Exactly what the server reads before it refuses (nothing left unread, so no reset races the answer):
        # a request line over 64 KiB (http.server handle_one_request: readline(65537) -> 414) ...
        assert _raw(port, b"GET /" + b"x" * (65537 - 5)).startswith(b"HTTP/1.0 414")
        # ... or more than 100 header lines (http.client.parse_headers, _MAXHEADERS -> 431).
        assert _raw(port, b"GET /status HTTP/1.0\r\n" + b"X-A: 1\r\n" * 101).startswith(b"HTTP/1.0 431")
        assert call(f"http://127.0.0.1:{port}", "/status?model=a")[1]["state"] == LANDED
    finally:
        stop_process(proc)
        assert proc.stderr is not None
        proc.stderr.close()


def test_status_port_zero_is_off_and_a_bad_value_fails_fast(tmp_path: Path, smollm2_gguf: Path) -> None:
    preset = write_preset(tmp_path / "preset.ini", {"a": smollm2_gguf})
    out = subprocess.run(
        [sys.executable, str(ENTRYPOINT), "pool"],
        env=pool_env(Path("/bin/true"), preset, LLAMA_POOL_STATUS_PORT="http"),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2 and out.stderr.startswith("entrypoint: error: LLAMA_POOL_STATUS_PORT"), out.stderr
    out = subprocess.run(
        [sys.executable, str(ENTRYPOINT), "pool"],
        env=pool_env(Path("/bin/true"), preset, LLAMA_POOL_COPY_FAILED_FILE="a/b.json"),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2 and "LLAMA_POOL_COPY_FAILED_FILE must be a file name" in out.stderr, out.stderr
    out = subprocess.run(
        [sys.executable, str(ENTRYPOINT), "pool"],
        env=pool_env(Path("/bin/true"), preset, LLAMA_POOL_STATUS_PORT="0"),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0 and "status on" not in out.stderr, out.stderr


def _preset_with(path: Path, files: dict[str, Path], extra: dict[str, str]) -> Path:
    write_preset(path, files)
    text = path.read_text()
    for name, line in extra.items():
        text = text.replace(f"[{name}]\nmodel = {files[name]}\n", f"[{name}]\nmodel = {files[name]}\n{line}\n")
    path.write_text(text)
    return path


@pytest.mark.engine
def test_a_bad_key_fails_the_start_and_a_late_one_is_left_out_by_name(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path
) -> None:
    # The router's INI loader rejects an option it does not know, naming the section (common/preset.cpp
    # load_from_ini: "option '%s' not recognized in preset '%s'"). In a landed section at start: the start fails,
    # with the router's own line, as before this issue.
    farm = tmp_path / "farm"
    files = {n: farm / n / "0123456789abcdef" / smollm2_gguf.name for n in ("a", "b", "c")}
    land(smollm2_gguf, files["a"])
    start = tmp_path / "start"
    start.mkdir()
    env = pool_env(llama_server_bin, _preset_with(start / "p.ini", {"a": files["a"]}, {"a": "no-such-option = 1"}))
    out = subprocess.run(
        [sys.executable, str(ENTRYPOINT), "pool"], env=env, capture_output=True, text=True, timeout=60, cwd=start
    )
    assert out.returncode != 0 and "option 'no-such-option' not recognized in preset 'a'" in out.stderr, out.stderr
    # In a section whose file lands later: that section is left out and reported (the gateway's 500 names it),
    # the running models keep serving, and a model landing after it is still served.
    env = pool_env(llama_server_bin, _preset_with(tmp_path / "p.ini", files, {"b": "no-such-option = 1"}))
    with run_pool(env, tmp_path) as pool:
        assert chat(pool.base, "a")[0] == 200
        a_pid = child_serving(pool.router, files["a"])
        land(smollm2_gguf, files["b"])

        def b_reported() -> dict:
            """b is reported with the router's reason"""
            body = call(pool.status, "/status?model=b")[1]
            return body if body["state"] == COPY_FAILED else {}

        body = until(b_reported, timeout=30)
        assert "option 'no-such-option' not recognized in preset 'b'" in body["reason"], body
        assert "error: preset section [b] left out" in pool.text()
        land(smollm2_gguf, files["c"])
        until(lambda: set(router_models(pool.base)) == {"a", "c"}, timeout=30)
        assert chat(pool.base, "c")[0] == 200
        assert child_serving(pool.router, files["a"]) == a_pid
