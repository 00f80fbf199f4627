"""A pool replica applies a changed model list in place: no restart, loaded models stay warm.

The real `entrypoint.py pool` supervises the real router (engine pin) over a preset rendered by the pool chart's
`render_preset`, mounted the way the kubelet mounts a ConfigMap volume (`preset.ini -> ..data/preset.ini`,
`..data -> <version dir>`, a new version swapped in by renaming a new `..data` symlink over the old one;
kubernetes pkg/volume/util/atomic_writer.go). What the router does on `GET /models?reload=1` is its own code
(tools/server/server-models.cpp load_models, RELOAD branch): this test checks the whole chain against it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from cpu_inference.engines.pool_preset import PoolModel, render_preset
from cpu_inference.k8s.charts.model_pool_chart import PRESET_FILE
from tests.runtime.engine.pool_support import (
    ENTRYPOINT,
    POLL,
    chat,
    child_pids,
    child_serving,
    follow_events,
    pool_env,
    router_models,
    until,
)
from tests.support.engine import process_gone, stop_process, wait_healthy


class ConfigMapVolume:
    """A directory laid out and updated as the kubelet's atomic writer does it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.version = 0
        root.mkdir()

    @property
    def preset(self) -> Path:
        return self.root / PRESET_FILE

    def publish(self, text: str) -> None:
        self.version += 1
        data = self.root / f"..v{self.version}"
        data.mkdir()
        (data / PRESET_FILE).write_text(text)
        tmp = self.root / "..data_tmp"
        tmp.symlink_to(data.name)
        os.replace(tmp, self.root / "..data")  # rename(2): readers see the old or the new version, never a mix
        if not self.preset.is_symlink():
            self.preset.symlink_to(f"..data/{PRESET_FILE}")


@pytest.mark.engine
def test_a_changed_preset_is_applied_in_place_and_loaded_models_stay_warm(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path
) -> None:
    farm = tmp_path / "farm"
    models = {}
    for name in ("a", "b", "c"):  # distinct files, as on the pool's volume (catalog key layout)
        key = f"{name}/0123456789abcdef/{smollm2_gguf.name}"
        (farm / key).parent.mkdir(parents=True)
        shutil.copyfile(smollm2_gguf, farm / key)
        models[name] = PoolModel(name, key, ctx_size=256, parallel=1, threads=1)

    def preset(*names: str, extra: tuple[PoolModel, ...] = ()) -> str:
        # Exactly as the chart renders its ConfigMap (model_pool_chart.py: `[*]` load-mode = none), /models moved.
        return render_preset([*(models[n] for n in names), *extra], model_dir=str(farm), defaults={"load-mode": "none"})

    volume = ConfigMapVolume(tmp_path / "preset")
    volume.publish(preset("a", "b"))
    env = pool_env(llama_server_bin, volume.preset)
    base = f"http://127.0.0.1:{env['LLAMA_PORT']}"
    log = tmp_path / "pool.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(ENTRYPOINT), "pool"], env=env, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path
        )
    try:
        wait_healthy(base, proc, timeout=60)
        (router,) = child_pids(proc.pid)  # the entrypoint supervises one router
        assert Path(f"/proc/{router}/exe").resolve().name == "llama-server"
        events: list[dict] = []
        threading.Thread(target=follow_events, args=(base, events), daemon=True).start()

        assert chat(base, "a")[0] == 200
        assert router_models(base) == {"a": "loaded", "b": "unloaded"}
        a_pid = child_serving(router, farm / models["a"].path)
        seen = len(events)

        # B out, C in, A's section unchanged.
        volume.publish(preset("a", "c"))

        def applied() -> bool:
            """the router lists a and c only"""
            return set(router_models(base)) == {"a", "c"}

        until(applied, timeout=30)
        status, body = chat(base, "c")
        assert status == 200 and body["model"] == "c", body
        assert router_models(base) == {"a": "loaded", "c": "loaded"}
        assert chat(base, "b")[0] in (400, 404)  # gone from the router, not merely unloaded
        # A never left `loaded`: the same child process, and no status change for it on the router's event stream.
        assert child_serving(router, farm / models["a"].path) == a_pid and not process_gone(a_pid)
        reloads = [e for e in events[seen:] if e["event"] == "models_reload"]
        assert reloads, events[seen:]
        assert not [e for e in events[seen:] if e["model"] == "a"], events[seen:]
        assert child_pids(proc.pid) == [router]  # not restarted

        # A section whose settings change restarts that model only (the RELOAD branch compares each preset).
        models["c"] = PoolModel("c", models["c"].path, ctx_size=512, parallel=1, threads=1)
        seen = len(events)
        volume.publish(preset("a", "c"))

        def c_stopped() -> bool:
            """the router stops c, whose preset changed"""
            return router_models(base)["c"] == "unloaded"

        until(c_stopped, timeout=30)
        assert not [e for e in events[seen:] if e["model"] == "a"], events[seen:]
        assert child_serving(router, farm / models["a"].path) == a_pid

        # A new preset naming a file that is not there yet is taken in: d is "copying" (its copy lands later,
        # test_pool_landing.py), and the router's preset does not change, so the router is not even reloaded.
        missing = PoolModel("d", "d/0123456789abcdef/missing.gguf", ctx_size=256)
        seen = len(events)
        volume.publish(preset("a", "c", extra=(missing,)))
        status_url = f"http://127.0.0.1:{env['LLAMA_POOL_STATUS_PORT']}/status?model=d"

        def copying() -> bool:
            """the side port reports d as copying"""
            try:
                with urllib.request.urlopen(status_url, timeout=10) as r:
                    return json.loads(r.read())["state"] == "copying"
            except urllib.error.HTTPError:
                return False

        until(copying, timeout=30)
        assert router_models(base) == {"a": "loaded", "c": "unloaded"}
        assert not [e for e in events[seen:] if e["event"] in ("models_reload", "status_change")], events[seen:]

        # A preset the router could never serve is refused with its section; the running set keeps serving.
        volume.publish(preset("a", "c") + "[e]\nctx-size = 256\n")

        def refused() -> bool:
            """the entrypoint logs the refused preset"""
            return "new preset refused" in log.read_text()

        until(refused, timeout=30)
        line = next(x for x in log.read_text().splitlines() if "new preset refused" in x)
        assert "section [e] has no `model = <path of the .gguf>`" in line, line
        time.sleep(2 * POLL)
        assert router_models(base) == {"a": "loaded", "c": "unloaded"}
        status, body = chat(base, "a")
        assert status == 200 and body["model"] == "a"
        assert child_serving(router, farm / models["a"].path) == a_pid
        assert not [e for e in events[seen:] if e["event"] in ("models_reload", "status_change")], events[seen:]
        assert log.read_text().count("new preset refused") == 1  # logged once, not every poll

        # SIGTERM: the router and its model children stop, the entrypoint exits with the router's status.
        children = child_pids(router)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        text = log.read_text()
        assert f"llama-server exited with {code}" in text and code == 0, text[-2000:]
        assert all(process_gone(p) for p in (router, *children))
    finally:
        stop_process(proc, timeout=30)


def test_the_entrypoint_exits_with_the_routers_status(tmp_path: Path) -> None:
    """Supervised, not exec'd: a router that fails still fails the container, with its own exit code."""
    model = tmp_path / "a.gguf"
    model.write_bytes(b"GGUF")
    preset = tmp_path / "pool.ini"
    preset.write_text(f"[a]\nmodel = {model}\nthreads = 1\n")
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    out = subprocess.run(
        [sys.executable, str(ENTRYPOINT), "pool"],
        env=pool_env(fake, preset),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 3, out.stderr
    assert "llama-server exited with 3" in out.stderr


@pytest.mark.parametrize("value", ["-1", "soon"])
def test_a_bad_poll_interval_fails_fast_naming_the_variable(tmp_path: Path, value: str) -> None:
    model = tmp_path / "a.gguf"
    model.write_bytes(b"GGUF")
    preset = tmp_path / "pool.ini"
    preset.write_text(f"[a]\nmodel = {model}\nthreads = 1\n")
    out = subprocess.run(
        [sys.executable, str(ENTRYPOINT), "pool"],
        env=pool_env(Path("/bin/true"), preset, LLAMA_PRESET_POLL_SECONDS=value),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and out.stderr.startswith("entrypoint: error: LLAMA_PRESET_POLL_SECONDS"), out.stderr
