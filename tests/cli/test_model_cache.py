"""`cpu-inference local`'s model cache against the fake Hugging Face Hub on loopback (real SmolLM2 GGUF bytes, a 302 to
a second "CDN" origin, Range, dropped connections, corrupted bytes, 401 without a token) and real files on disk."""

from __future__ import annotations

import hashlib
import io
import socket
import time
from pathlib import Path

import pytest
from rich.console import Console
from rich.progress import Progress

from cpu_inference import sizing
from cpu_inference.cli.main import UserError
from cpu_inference.cli.model_cache import (
    MachineMemory,
    cache_root,
    fetch_model,
    fetch_models,
    machine_memory,
    parse_model_map,
)
from cpu_inference.config import Config
from model_download import Hub, RetryPolicy
from tests.runtime.model_download.constants import FILE, GATED_REPO, GOOD_TOKEN, PUBLIC_REPO
from tests.runtime.model_download.fake_hub import FakeHub, sha256_file

MIB = 1024 * 1024
WINDOW = 8 * MIB  # several ranged GETs for the 98 MB file
FAST = RetryPolicy(attempts=4, backoff_seconds=0.01, max_backoff_seconds=0.05)
PLENTY = MachineMemory(64 * sizing.GIB, "available")
_PROXY_VARS = (
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
)


@pytest.fixture(scope="module")
def fake(smollm2_gguf: Path):  # noqa: ANN201
    hub = FakeHub(tokens={GOOD_TOKEN})
    hub.add_file(PUBLIC_REPO, FILE, smollm2_gguf)
    hub.add_file(GATED_REPO, FILE, smollm2_gguf, gated=True)
    with hub:
        yield hub


@pytest.fixture
def hub(fake: FakeHub, monkeypatch: pytest.MonkeyPatch) -> FakeHub:
    fake.reset()
    for var in (*_PROXY_VARS, "HF_TOKEN", "HF_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    return fake


def _config(repo: str = PUBLIC_REPO, **source: str) -> Config:
    return Config.model_validate(
        {
            "pattern": "model-farm",
            "models": [
                {
                    "name": "smollm2",
                    "parameters_billions": 0.135,
                    "quantization": "Q4_1",
                    "context_window": 2048,
                    "source": {"hf_repo": repo, "file": FILE, **source},
                }
            ],
        }
    )


def _client(fake: FakeHub, retry: RetryPolicy = FAST) -> Hub:
    return Hub(fake.url, retry=retry)


def _closed_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def _files(root: Path) -> list[str]:
    """What the cache holds, apart from the empty lock files under .locks/ (kept: unlinking a lock file races)."""
    return sorted(
        str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.relative_to(root).parts[0] != ".locks"
    )


def _quiet_bar() -> Progress:
    return Progress(console=Console(file=io.StringIO()), transient=True)


def test_first_run_downloads_with_progress_and_the_next_run_sends_no_request(hub: FakeHub, tmp_path: Path) -> None:
    served = hub.files[(PUBLIC_REPO, FILE)]
    config = _config(revision=hub.commit)
    bar = _quiet_bar()

    got = fetch_models(config, hub=_client(hub), cache_dir=tmp_path, memory=PLENTY, progress=bar, window=WINDOW)[
        "smollm2"
    ]

    assert got.how == "downloaded"
    assert got.path == tmp_path / PUBLIC_REPO / hub.commit / FILE
    assert sha256_file(got.path) == served.sha256 and got.size == served.size
    [task] = bar.tasks
    assert task.total == served.size and task.completed == served.size  # the bar saw every byte
    assert hub.stats.bytes_served == served.size and hub.stats.gets == -(-served.size // WINDOW)
    assert _files(tmp_path) == [f"{PUBLIC_REPO}/{hub.commit}/{FILE}", f"{PUBLIC_REPO}/{hub.commit}/{FILE}.sha256"]
    assert (tmp_path / PUBLIC_REPO / hub.commit / f"{FILE}.sha256").read_text() == f"{served.sha256}  {FILE}\n"

    hub.reset()
    bar = _quiet_bar()
    again = fetch_models(config, hub=_client(hub), cache_dir=tmp_path, memory=PLENTY, progress=bar)["smollm2"]

    assert again.how == "cached" and again.path == got.path and again.sha256 == served.sha256
    assert (hub.stats.heads, hub.stats.gets, hub.stats.bytes_served) == (0, 0, 0)  # a pinned commit needs no request
    assert bar.tasks == []


def test_a_pinned_sha256_on_a_branch_is_reused_without_a_request(hub: FakeHub, tmp_path: Path) -> None:
    served = hub.files[(PUBLIC_REPO, FILE)]
    fetch_model(_config().models[0], hub=_client(hub), cache_dir=tmp_path, window=WINDOW)
    hub.reset()

    again = fetch_model(
        _config(revision="main", sha256=served.sha256).models[0], hub=Hub(_closed_url()), cache_dir=tmp_path
    )

    assert again.how == "cached" and again.commit == hub.commit and again.offline is None
    assert (hub.stats.heads, hub.stats.gets) == (0, 0)


def test_a_branch_costs_one_head_and_offline_uses_its_last_cached_commit(hub: FakeHub, tmp_path: Path) -> None:
    first = fetch_model(_config(revision="main").models[0], hub=_client(hub), cache_dir=tmp_path, window=WINDOW)
    assert (tmp_path / PUBLIC_REPO / "refs" / "main").read_text() == f"{hub.commit}\n"
    hub.reset()

    again = fetch_models(
        _config(revision="main"), hub=_client(hub), cache_dir=tmp_path, memory=PLENTY, progress=_quiet_bar()
    )

    assert again["smollm2"].how == "cached" and again["smollm2"].path == first.path
    assert (hub.stats.heads, hub.stats.gets) == (1, 0)  # HEAD resolves main to its commit; no byte moves

    said: list[str] = []
    offline = fetch_models(
        _config(revision="main"),
        hub=Hub(_closed_url()),
        cache_dir=tmp_path,
        memory=PLENTY,
        progress=_quiet_bar(),
        notes=said.append,
    )["smollm2"]

    assert offline.path == first.path and "Connection refused" in (offline.offline or "")
    assert len(said) == 1 and said[0].startswith("smollm2: no network (cannot connect to 127.0.0.1:")
    assert f"from commit {hub.commit[:12]}, the last one seen for main" in said[0]


def test_an_interrupted_download_resumes_from_the_part_file_with_a_range(hub: FakeHub, tmp_path: Path) -> None:
    served = hub.files[(PUBLIC_REPO, FILE)]
    model = _config(revision=hub.commit).models[0]
    part = tmp_path / PUBLIC_REPO / hub.commit / f"{FILE}.part"
    hub.drop_once(2 * WINDOW, after=MIB)  # the connection dies 1 MiB into the third range

    with pytest.raises(UserError) as cut:
        fetch_model(model, hub=_client(hub, RetryPolicy(attempts=1)), cache_dir=tmp_path, window=WINDOW)

    assert hub.stats.drops == 1
    assert "download interrupted" in str(cut.value) and str(cut.value).endswith("run again to resume")
    assert part.stat().st_size == 2 * WINDOW  # the ranges before the cut, in order
    assert not (tmp_path / PUBLIC_REPO / hub.commit / FILE).exists()

    hub.reset()
    started: list[tuple[int, int]] = []
    counted: list[int] = []
    done = fetch_model(
        model,
        hub=_client(hub),
        cache_dir=tmp_path,
        window=WINDOW,
        on_start=lambda total, resumed: started.append((total, resumed)),
        on_bytes=counted.append,
    )

    assert started == [(served.size, 2 * WINDOW)]
    starts = sorted(int(r.split("-")[0]) for r in hub.stats.ranges)
    assert starts[0] == 2 * WINDOW  # Range: bytes=<.part size>-
    assert hub.stats.bytes_served == served.size - 2 * WINDOW == sum(counted)
    assert sha256_file(done.path) == served.sha256 and not part.exists()


def test_a_config_sha256_the_hub_disagrees_with_is_refused_before_any_byte(hub: FakeHub, tmp_path: Path) -> None:
    served = hub.files[(PUBLIC_REPO, FILE)]
    wrong = "0" * 64

    with pytest.raises(UserError) as refused:
        fetch_model(_config(sha256=wrong).models[0], hub=_client(hub), cache_dir=tmp_path)

    assert f"expected {wrong} (models[0].source.sha256), the Hub reports {served.sha256}" in str(refused.value)
    assert hub.stats.gets == 0 and _files(tmp_path) == []


def test_bytes_that_hash_wrong_are_refused_and_leave_no_file(hub: FakeHub, tmp_path: Path, smollm2_gguf: Path) -> None:
    served = hub.files[(PUBLIC_REPO, FILE)]
    flipped = bytearray(smollm2_gguf.read_bytes())
    flipped[5 * MIB] ^= 0xFF
    hub.corrupt(5 * MIB)

    with pytest.raises(UserError) as refused:
        fetch_model(_config(revision=hub.commit).models[0], hub=_client(hub), cache_dir=tmp_path, window=WINDOW)

    message = str(refused.value)
    assert f"expected {served.sha256}, got {hashlib.sha256(flipped).hexdigest()}" in message
    assert "nothing was kept in the cache" in message and "\n" not in message
    assert _files(tmp_path) == []  # no file, no .part, no sha256 line


@pytest.mark.parametrize("endpoint", ["closed-port", "http://nonexistent.invalid"])
def test_no_network_is_one_line_naming_the_ways_out(hub: FakeHub, tmp_path: Path, endpoint: str) -> None:
    url = _closed_url() if endpoint == "closed-port" else endpoint
    began = time.monotonic()

    with pytest.raises(UserError) as offline:
        fetch_models(_config(), hub=Hub(url), cache_dir=tmp_path, memory=PLENTY, progress=_quiet_bar())

    message = str(offline.value)
    assert time.monotonic() - began < 5  # no minute of retries before saying so
    assert "\n" not in message and message.startswith("no network: ")
    assert ("Connection refused" if endpoint == "closed-port" else "cannot resolve nonexistent.invalid") in message
    assert f"models[0] (smollm2) {PUBLIC_REPO}/{FILE}@main" in message
    assert "--model-map NAME=PATH (for smollm2)" in message and "--stand-ins" in message
    assert _files(tmp_path) == []


def test_a_model_too_large_for_this_machine_is_refused_up_front_with_the_numbers(hub: FakeHub, tmp_path: Path) -> None:
    served = hub.files[(PUBLIC_REPO, FILE)]
    small = MachineMemory(300 * MIB, "available")
    # KV: the sizing estimate for a sub-1B model without a shape (48 KiB/token) x 4 slots x 2048 tokens = 384 MiB.
    with pytest.raises(UserError) as refused:
        fetch_models(
            _config(),
            hub=_client(hub),
            cache_dir=tmp_path,
            memory=small,
            shapes={"smollm2": (4, 2048)},
            progress=_quiet_bar(),
        )

    weights_mib = round(served.size / MIB)  # the size the Hub's HEAD reported, not the parameter-count estimate
    runtime_mib = round((256 * MIB + 0.10 * served.size) / MIB)
    total_mib = round((served.size + 384 * MIB + 256 * MIB + int(0.10 * served.size)) / MIB)
    assert str(refused.value) == (
        f"models[0] (smollm2): needs {total_mib} MiB (weights {weights_mib} MiB + KV cache 384 MiB for 4 slot(s) × 2048 "
        f"tokens + runtime {runtime_mib} MiB) but this machine has 300 MiB available — use --model-map smollm2=PATH "
        "with a smaller quantization, or --stand-ins"
    )
    assert (hub.stats.heads, hub.stats.gets) == (1, 0) and _files(tmp_path) == []  # refused before any byte


def test_engines_that_fit_alone_but_not_together_are_refused(hub: FakeHub, tmp_path: Path) -> None:
    config = Config.model_validate(
        {
            "pattern": "model-farm",
            "models": [
                {
                    "name": n,
                    "parameters_billions": 0.135,
                    "quantization": "Q4_1",
                    "source": {"hf_repo": PUBLIC_REPO, "file": FILE},
                }
                for n in ("a", "b")
            ],
        }
    )

    with pytest.raises(UserError) as refused:
        fetch_models(
            config,
            hub=_client(hub),
            cache_dir=tmp_path,
            memory=MachineMemory(600 * MIB, "available"),
            shapes={"a": (1, 512), "b": (1, 512)},
            progress=_quiet_bar(),
        )

    assert str(refused.value).startswith("the 2 engines together need ")
    assert "but this machine has 600 MiB available — start fewer (--models)" in str(refused.value)
    assert hub.stats.gets == 0


def test_a_gated_model_downloads_with_hf_token_and_hf_endpoint_from_the_environment(
    hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("CPU_INFERENCE_CACHE", str(tmp_path))

    with pytest.raises(UserError) as no_token:
        fetch_models(_config(GATED_REPO), memory=PLENTY, progress=_quiet_bar())
    assert str(no_token.value).startswith(f"models[0] (smollm2): {GATED_REPO}/{FILE}@main needs a Hugging Face token")
    assert str(no_token.value).endswith("(`cpu-inference local` reads the token from HF_TOKEN)")

    monkeypatch.setenv("HF_TOKEN", GOOD_TOKEN)
    got = fetch_models(_config(GATED_REPO), memory=PLENTY, progress=_quiet_bar())["smollm2"]

    assert (
        got.path
        == cache_root() / GATED_REPO / hub.commit / FILE
        == tmp_path / "models" / GATED_REPO / hub.commit / FILE
    )
    assert sha256_file(got.path) == hub.files[(GATED_REPO, FILE)].sha256
    assert hub.stats.auth_seen_by_cdn == 0  # the token went to the Hub only


def test_an_unknown_file_keeps_model_downloads_404_wording(hub: FakeHub, tmp_path: Path) -> None:
    config = Config.model_validate(
        {
            "pattern": "model-farm",
            "models": [
                {"name": "x", "parameters_billions": 1, "source": {"hf_repo": PUBLIC_REPO, "file": "nope-Q4_K_M.gguf"}}
            ],
        }
    )

    with pytest.raises(UserError) as missing:
        fetch_models(config, hub=_client(hub), cache_dir=tmp_path, memory=PLENTY, progress=_quiet_bar())

    assert str(missing.value) == (
        f"models[0] (x): {PUBLIC_REPO}/nope-Q4_K_M.gguf@main not found on {hub.url} "
        "(HTTP 404: file not found): check hf_repo, file and revision"
    )


def test_parse_model_map(tmp_path: Path, smollm2_gguf: Path) -> None:
    assert parse_model_map([f"smollm2={smollm2_gguf}"], known=["smollm2"]) == {"smollm2": smollm2_gguf}
    text = tmp_path / "notes.gguf"
    text.write_text("not a model")
    bad = {
        "smollm2": "--model-map 'smollm2': expected NAME=PATH",
        f"other={smollm2_gguf}": "--model-map other: no such model in the config — use one of smollm2",
        f"smollm2={tmp_path / 'missing.gguf'}": "is not a file",
        f"smollm2={text}": "is not a GGUF file",
    }
    for item, words in bad.items():
        with pytest.raises(UserError, match="^--model-map ") as err:
            parse_model_map([item], known=["smollm2"])
        assert words in str(err.value)
    with pytest.raises(UserError, match="given twice"):
        parse_model_map([f"smollm2={smollm2_gguf}", f"smollm2={smollm2_gguf}"])


def test_machine_memory_reads_memavailable(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:        8000000 kB\nMemFree:          100000 kB\nMemAvailable:    1153434 kB\n")

    assert machine_memory(meminfo, cgroup=tmp_path / "no-cgroup") == MachineMemory(1153434 * 1024, "available")

    group = tmp_path / "cgroup"  # cgroup v2 files of a container limited to 1 GiB, 900 MiB used, 200 MiB reclaimable
    group.mkdir()
    (group / "memory.max").write_text(f"{1024 * MIB}\n")
    (group / "memory.current").write_text(f"{900 * MIB}\n")
    (group / "memory.stat").write_text(f"anon {700 * MIB}\nfile {200 * MIB}\ninactive_file {200 * MIB}\n")
    assert machine_memory(meminfo, cgroup=group) == MachineMemory(
        324 * MIB, "available under this container's memory limit"
    )
    (group / "memory.max").write_text("max\n")
    assert machine_memory(meminfo, cgroup=group).kind == "available"

    here = machine_memory()
    assert here is not None and here.bytes > 0
