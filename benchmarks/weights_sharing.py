"""Weights on a node: one shared file (a node-level mount) vs a copy per pod (per-pod emptyDir downloads).

Issue 13 asks to choose how a pool reaches hundreds of GGUF files by measurement. What a node-shared mount buys
is page-cache sharing: two llama-server processes that mmap the SAME file map the same physical pages, while
two processes with their own copies each need their own. This script measures it on this machine with the
real engine, two processes per scenario (two replicas on one node), the stand-in Gemma-3-270M Q4_K_M:

  shared-mmap     both processes mmap one file                     (a node-level mount, llama.cpp's default)
  copies-mmap     each process mmaps its own byte copy             (per-pod emptyDir copies)
  shared-read     both read one file into their memory, no mmap    (`--load-mode none`: the pools on Mountpoint)

Per scenario: first-load time of each process (start to /health 200, weights loaded and warmed up) with the
file's page cache evicted first (posix_fadvise DONTNEED: "cold") — the second process of shared-* finds the
pages the first one read ("warm"); node memory after one request each: sum of the processes' PSS split into
anonymous and file-backed (/proc/<pid>/smaps_rollup), the page cache the model files hold (fincore, exact,
unaffected by other processes), the growth of Cached in /proc/meminfo (noisy on a shared machine), and
node_bytes = sum(Pss_Anon) + resident page cache of the model files (each physical page counted once).

    .venv/bin/python benchmarks/weights_sharing.py       # 3 rounds, medians; JSON + Markdown in benchmarks/results/
    .venv/bin/python benchmarks/weights_sharing.py --rounds 1 --model ~/.cache/cpu-inference/models/<x>.gguf

Weight repacking is off (LLAMA_ARG_REPACK=0, as in the tests: this machine's hypervisor faults on AMX); with
repacking on, repacked tensors are per-process anonymous copies and only the rest is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT), str(ROOT / "constructs")] + [
    p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"
]

from cpu_inference._internal.resources import cache_dir  # noqa: E402
from tests.support.engine import free_port, llama_server_path, stop_process, wait_healthy  # noqa: E402

SCENARIOS = {"shared-mmap": (True, "mmap"), "copies-mmap": (False, "mmap"), "shared-read": (True, "none")}
MIB = 1024 * 1024


@dataclass
class Result:
    scenario: str
    first_load_s: list[float]  # process 0, process 1
    pss_anon_bytes: int
    pss_file_bytes: int
    page_cache_bytes: int  # resident pages of the scenario's model files (fincore)
    cached_growth_bytes: int  # /proc/meminfo Cached after - before (whole machine)
    node_bytes: int  # pss_anon + page_cache: every physical page once
    disk_bytes: int  # model bytes on disk for the two replicas


def evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def resident_bytes(path: Path) -> int:
    out = subprocess.run(
        ["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)], capture_output=True, text=True, check=True
    )
    return int(out.stdout.split()[0])


def meminfo(key: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def pss(pid: int) -> tuple[int, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, value = line.split(":", 1)
        fields[name] = int(value.split()[0]) * 1024
    return fields["Pss_Anon"], fields["Pss_File"]


def chat(base: str) -> None:
    body = json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "ignore_eos": True}).encode()
    req = urllib.request.Request(base + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        r.read()


def run_scenario(name: str, binary: Path, source: Path, work: Path, threads: int) -> Result:
    shared, load_mode = SCENARIOS[name]
    files = [work / "shared.gguf"] * 2 if shared else [work / "copy-0.gguf", work / "copy-1.gguf"]
    for f in set(files):
        if not f.exists():
            shutil.copyfile(source, f)
        evict(f)
    cached_before = meminfo("Cached")
    procs: list[subprocess.Popen] = []
    loads: list[float] = []
    try:
        for f in files:
            port = free_port()
            start = time.monotonic()
            procs.append(
                subprocess.Popen(
                    [
                        str(binary),
                        "-m",
                        str(f),
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(port),
                        "-t",
                        str(threads),
                        "-c",
                        "256",
                        "-np",
                        "1",
                        "--load-mode",
                        load_mode,
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    env={**os.environ, "LLAMA_ARG_REPACK": os.environ.get("LLAMA_ARG_REPACK", "0")},
                )
            )
            base = f"http://127.0.0.1:{port}"
            wait_healthy(base, procs[-1], timeout=300)
            loads.append(time.monotonic() - start)
            chat(base)
        anon = file_ = 0
        for p in procs:
            a, fb = pss(p.pid)
            anon, file_ = anon + a, file_ + fb
        cache = sum(resident_bytes(f) for f in set(files))
        grown = meminfo("Cached") - cached_before
    finally:
        for p in procs:
            stop_process(p, timeout=30)
    disk = sum(f.stat().st_size for f in set(files))
    return Result(name, [round(x, 3) for x in loads], anon, file_, cache, grown, anon + cache, disk)


def read_seconds(path: Path, cold: bool) -> float:
    """Seconds to read the whole file sequentially (8 MiB reads) from the disk (cold) or the page cache (warm)."""
    if cold:
        evict(path)
    start = time.monotonic()
    with open(path, "rb", buffering=0) as f:
        while f.read(8 * MIB):
            pass
    return time.monotonic() - start


def median_result(rs: list[Result]) -> Result:
    med = lambda xs: int(statistics.median(xs))  # noqa: E731
    return Result(
        rs[0].scenario,
        [round(statistics.median(r.first_load_s[i] for r in rs), 3) for i in range(2)],
        med([r.pss_anon_bytes for r in rs]),
        med([r.pss_file_bytes for r in rs]),
        med([r.page_cache_bytes for r in rs]),
        med([r.cached_growth_bytes for r in rs]),
        med([r.node_bytes for r in rs]),
        rs[0].disk_bytes,
    )


def markdown(results: list[Result], model: Path, rounds: int, reads: dict[str, float]) -> str:
    size = model.stat().st_size / MIB
    lines = [
        f"Model {model.name} ({size:.0f} MiB), two llama-server processes per scenario, medians of {rounds} rounds. "
        f"Reading the file: cold (disk) {reads['cold']:.2f} s = {size / reads['cold']:.0f} MiB/s, warm (page cache) "
        f"{reads['warm']:.2f} s = {size / reads['warm']:.0f} MiB/s.",
        "",
        "| scenario | first load p0 (s) | first load p1 (s) | Σ Pss_Anon MiB | Σ Pss_File MiB | model page cache MiB | "
        "node MiB (anon + cache) | Δ Cached MiB | disk MiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.scenario} | {r.first_load_s[0]:.2f} | {r.first_load_s[1]:.2f} | {r.pss_anon_bytes / MIB:.0f} | "
            f"{r.pss_file_bytes / MIB:.0f} | {r.page_cache_bytes / MIB:.0f} | {r.node_bytes / MIB:.0f} | "
            f"{r.cached_growth_bytes / MIB:.0f} | {r.disk_bytes / MIB:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, help="GGUF file (default: the Gemma-3-270M stand-in)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    a = ap.parse_args()
    if shutil.which("fincore") is None:
        print("weights_sharing: needs fincore (util-linux) to read page-cache residency", file=sys.stderr)
        return 2
    if a.model is None:
        from tests.support.models import gemma_path

        a.model = gemma_path()
    binary = llama_server_path()
    runs: dict[str, list[Result]] = {s: [] for s in SCENARIOS}
    reads: dict[str, list[float]] = {"cold": [], "warm": []}
    cache_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="weights-sharing-", dir=cache_dir()) as tmp:  # a disk, not tmpfs
        probe = Path(tmp) / "read-probe.gguf"
        shutil.copyfile(a.model, probe)
        for _ in range(a.rounds):
            reads["cold"].append(read_seconds(probe, cold=True))
            reads["warm"].append(read_seconds(probe, cold=False))
        probe.unlink()
        for _ in range(a.rounds):
            for s in SCENARIOS:  # interleaved: machine load drifts across rounds, not across scenarios
                runs[s].append(run_scenario(s, binary, a.model, Path(tmp), a.threads))
                print(f"{s}: {asdict(runs[s][-1])}", file=sys.stderr)
    results = [median_result(rs) for rs in runs.values()]
    a.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    read = {k: statistics.median(v) for k, v in reads.items()}
    (a.out / f"weights_sharing-{stamp}.json").write_text(
        json.dumps({"file_read_s": read, "scenarios": [asdict(r) for r in results]}, indent=2)
    )
    text = markdown(results, a.model, a.rounds, read)
    (a.out / f"weights_sharing-{stamp}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
