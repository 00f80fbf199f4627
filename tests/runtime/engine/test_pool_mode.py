"""`entrypoint.py pool`: an EKS pool replica is llama-server in router mode over the pool's preset INI.

The real entrypoint runs the real router (its one child) over three distinct model files (byte copies of the
SmolLM2 and Gemma stand-ins, as a pool's Mountpoint volume holds one file per model) with LLAMA_MODELS_MAX=2; the
router facts it relies on are pinned in test_router_mode.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runtime.engine.serving import ENGINE_DIR
from tests.support.engine import free_port, stop_process, wait_healthy

ENTRYPOINT = ENGINE_DIR / "entrypoint.py"


def _env(binary: Path, preset: Path, **extra: str) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_", "MODEL_", "SAGEMAKER_"))}
    env.update(
        LLAMA_SERVER_BIN=str(binary),
        LLAMA_MODELS_PRESET=str(preset),
        LLAMA_MODELS_MAX="2",
        LLAMA_HOST="127.0.0.1",
        LLAMA_PORT=str(free_port()),
        LLAMA_POOL_STATUS_PORT="0",  # the side port: test_pool_landing.py
    )
    env.update(extra)
    return env


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ENTRYPOINT), *args], env=env, capture_output=True, text=True, timeout=60)


def _write_preset(path: Path, models: dict[str, tuple[Path, int]]) -> Path:
    lines = [
        "version = 1",
        "; per-model settings live here, never on the router's command line",
        "[*]",
        "threads = 1",
        "parallel = 1",
    ]
    for name, (model, ctx) in models.items():
        lines += [f"[{name}]", f"model = {model}", f"ctx-size = {ctx}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def _call(base: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def test_print_command_is_router_mode_with_per_model_settings_left_to_the_preset(tmp_path: Path) -> None:
    model = tmp_path / "a.gguf"
    model.write_bytes(b"GGUF")
    preset = _write_preset(tmp_path / "pool.ini", {"a": (model, 256)})
    out = _run(
        _env(Path("/bin/true"), preset, LLAMA_CACHE_RAM_MIB="", LLAMA_EXTRA_ARGS="--temp 0"), "print-command", "pool"
    )
    assert out.returncode == 0, out.stderr
    argv = out.stdout.split()
    assert argv[0] == "/bin/true"
    assert argv[argv.index("--models-preset") + 1] == str(preset) and argv[argv.index("--models-max") + 1] == "2"
    assert "--models-autoload" in argv and argv[argv.index("--host") + 1] == "127.0.0.1"
    # server-models.cpp load_models merges the router's own flags over every preset: these would override them.
    assert not {"--model", "-m", "--threads", "--ctx-size", "--parallel", "--alias"} & set(argv)
    assert {"--metrics", "--no-slots", "--offline", "--jinja"} <= set(argv) and argv[-2:] == ["--temp", "0"]


# A section whose model file is missing is no user error any more: its copy has not landed yet
# (test_pool_landing.py). Only a preset the router could never serve stops the start.
@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("[*]\nthreads = 1\n[beta]\nctx-size = 256\n", "section [beta] has no `model = <path of the .gguf>`"),
        ("version = 1\n", "has no model section"),
        ("[gamma\nmodel = x\n", "is not a valid preset INI"),
    ],
)
def test_a_preset_that_cannot_serve_fails_fast_with_one_line_naming_the_section(
    tmp_path: Path, body: str, message: str
) -> None:
    missing = tmp_path / "models" / "alpha.gguf"
    preset = tmp_path / "pool.ini"
    preset.write_text(body.format(missing=missing))
    out = _run(_env(Path("/bin/true"), preset), "pool")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"entrypoint: error: LLAMA_MODELS_PRESET {preset}"), out.stderr
    assert message.format(missing=missing) in lines[0]


@pytest.mark.parametrize("value", ["", "0", "two"])
def test_models_max_is_required(tmp_path: Path, value: str) -> None:
    model = tmp_path / "a.gguf"
    model.write_bytes(b"GGUF")
    out = _run(
        _env(Path("/bin/true"), _write_preset(tmp_path / "p.ini", {"a": (model, 256)}), LLAMA_MODELS_MAX=value), "pool"
    )
    assert out.returncode == 2 and "LLAMA_MODELS_MAX must be an integer" in out.stderr


@pytest.fixture(scope="module")
def pool(
    llama_server_bin: Path, smollm2_gguf: Path, gemma_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[subprocess.Popen, str]]:
    """The preset exactly as the pool chart renders it (k8s/charts/model_pool_chart.py render_preset) over the farm's
    key layout (<name>/<idhash>/<file>.gguf, catalog.gguf_key), with the volume's /models moved to a temp dir."""
    from cpu_inference.engines.pool_preset import PoolModel, render_preset

    work = tmp_path_factory.mktemp("pool")
    sources = {"m-0001": (smollm2_gguf, 256), "m-0002": (smollm2_gguf, 512), "m-0003": (gemma_gguf, 256)}
    models = []
    for name, (source, ctx) in sources.items():
        key = f"{name}/0123456789abcdef/{source.name}"
        (work / "farm" / key).parent.mkdir(parents=True)
        shutil.copyfile(source, work / "farm" / key)  # distinct files, as on the pool's volume
        models.append(PoolModel(name=name, path=key, ctx_size=ctx, parallel=1, threads=1))
    preset = work / "pool.ini"
    preset.write_text(render_preset(models, model_dir=str(work / "farm")))
    env = _env(llama_server_bin, preset)
    with open(work / "pool.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, str(ENTRYPOINT), "pool"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=work
        )
    base = f"http://127.0.0.1:{env['LLAMA_PORT']}"
    try:
        wait_healthy(base, proc, timeout=60)
        yield proc, base
    finally:
        stop_process(proc, timeout=30)


def _children(pid: int) -> list[int]:
    return [int(p) for task in Path(f"/proc/{pid}/task").iterdir() for p in (task / "children").read_text().split()]


@pytest.mark.engine
def test_pool_replica_serves_every_preset_model_with_its_settings_and_holds_the_cap(pool) -> None:
    proc, base = pool
    # The entrypoint supervises one router (pool_supervisor.py: a changed preset is applied in place, no exec).
    (router,) = _children(proc.pid)
    assert Path(f"/proc/{router}/exe").resolve().name == "llama-server"
    status, listing = _call(base, "/v1/models")
    assert status == 200 and {m["id"] for m in listing["data"]} == {"m-0001", "m-0002", "m-0003"}
    args = {m["id"]: m["status"]["args"] for m in listing["data"]}

    def opt(name: str, flag: str) -> str:
        return args[name][args[name].index(flag) + 1]

    assert (opt("m-0001", "--ctx-size"), opt("m-0002", "--ctx-size")) == ("256", "512")  # the preset's, per model
    assert opt("m-0003", "--threads") == "1" and opt("m-0003", "--parallel") == "1"
    answered = []
    for name in ("m-0001", "m-0002", "m-0003"):
        status, body = _call(
            base,
            "/v1/chat/completions",
            {"model": name, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "ignore_eos": True},
        )
        assert status == 200, body
        answered.append(body["model"])
        assert len(_children(router)) <= 2  # LLAMA_MODELS_MAX
    assert answered == ["m-0001", "m-0002", "m-0003"]
    states = {m["id"]: m["status"]["value"] for m in _call(base, "/v1/models")[1]["data"]}
    assert states == {"m-0001": "unloaded", "m-0002": "loaded", "m-0003": "loaded"}  # the LRU one went
    assert len(_children(router)) == 2
