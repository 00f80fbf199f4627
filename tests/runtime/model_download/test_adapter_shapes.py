"""An adapter's SHAPE against its base (issue 26: "the adapter's base architecture and shape match the base model"):
every `<t>.lora_a`/`<t>.lora_b` pair must name a base tensor `<t>` with the shapes llama.cpp's llama-adapter.cpp
requires (the pin: lines 274-371), read from both GGUFs' tensor-info sections (gguf_meta.read_header). Real files: the
SmolLM2 stand-in base (its real header and tensor infos), the real trained adapter (tests/support/lora.py), and
adapters written by the pin's gguf-py. Real servers: the fake Hub → moto's S3 for the copy, and the real llama-server,
which must refuse exactly the adapters the copy refuses (our check is neither stricter nor looser than the engine)."""

from __future__ import annotations

import json
import struct
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from model_download.catalog import Catalog, CatalogEntry, failure_key, gguf_key
from model_download.catalog_copy import CatalogCopy, Hubs
from model_download.gguf_meta import ADAPTER_KEYS, GgufHeader, adapter_problem, read_header
from model_download.hub import RetryPolicy
from tests.runtime.model_download.fake_hub import FakeHub, ServedFile
from tests.runtime.model_download.test_catalog import _keys
from tests.support.engine import free_port, pinned_sdist, stop_process, wait_healthy
from tests.support.lora import lora_adapter_path

FAST_RETRY = RetryPolicy(attempts=3, backoff_seconds=0.01, max_backoff_seconds=0.02)
BASE_SLICE = 7 * 1024 * 1024  # the real header, its tensor infos and some tensors (the copy reads no further)
HIDDEN, FFN, VOCAB, RANK = 576, 1536, 49152, 8  # SmolLM2-135M: hidden 576, intermediate 1536, vocab 49152

# name -> tensors as numpy shapes (gguf-py writes dims reversed: numpy (rows, cols) is GGUF ne [cols, rows]).
ADAPTERS: dict[str, dict[str, tuple[int, ...]]] = {
    "fits": {  # attn_q (square) and ffn_down (1536 in, 576 out: ne[0] and ne[1] of the check differ)
        "blk.0.attn_q.weight.lora_a": (RANK, HIDDEN),
        "blk.0.attn_q.weight.lora_b": (HIDDEN, RANK),
        "blk.0.ffn_down.weight.lora_a": (RANK, FFN),
        "blk.0.ffn_down.weight.lora_b": (HIDDEN, RANK),
    },
    "wrong-inner": {  # lora_a reads 512 inputs, the base's attn_q has 576
        "blk.0.attn_q.weight.lora_a": (RANK, 512),
        "blk.0.attn_q.weight.lora_b": (HIDDEN, RANK),
    },
    "no-such-tensor": {  # SmolLM2-135M has 30 blocks
        "blk.99.attn_q.weight.lora_a": (RANK, HIDDEN),
        "blk.99.attn_q.weight.lora_b": (HIDDEN, RANK),
    },
    "rank-mismatch": {  # lora_a of rank 8, lora_b of rank 4
        "blk.0.attn_q.weight.lora_a": (RANK, HIDDEN),
        "blk.0.attn_q.weight.lora_b": (HIDDEN, 4),
    },
}
# What the copy's reason says, and the engine's own words for the same adapter (llama-adapter.cpp:335, 362, 369).
REFUSED = {
    "wrong-inner": (
        "tensor 'blk.0.attn_q.weight' has .lora_a [512, 8] and .lora_b [8, 576], which do not fit its base",
        "tensor 'blk.0.attn_q.weight' has incorrect shape",
    ),
    "no-such-tensor": (
        "adapts tensor 'blk.99.attn_q.weight', which its base",
        "LoRA tensor 'blk.99.attn_q.weight' does not exist in base model",
    ),
    "rank-mismatch": ("lora_a tensor is not transposed", "lora_a tensor is not transposed"),
}


@pytest.fixture(scope="module")
def adapter_files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """ADAPTERS written by the pin's gguf-py GGUFWriter (what its convert_lora_to_gguf.py writes with)."""
    dest = tmp_path_factory.mktemp("gguf-py")
    with tarfile.open(pinned_sdist()) as tar:
        members = [m for m in tar.getmembers() if "/vendor/llama.cpp/gguf-py/gguf/" in m.name]
        tar.extractall(dest, members=members, filter="data")
    (root,) = dest.glob("*/vendor/llama.cpp/gguf-py")
    sys.path.insert(0, str(root))
    import numpy as np
    from gguf import GGUFWriter

    out: dict[str, Path] = {}
    for name, tensors in ADAPTERS.items():
        path = dest / f"{name}-lora.gguf"
        w = GGUFWriter(str(path), "llama")
        w.add_type("adapter")
        w.add_string("adapter.type", "lora")
        w.add_float32("adapter.lora.alpha", 16.0)
        for tensor, shape in tensors.items():
            w.add_tensor(tensor, np.zeros(shape, dtype=np.float32))  # zeros: a loadable no-op delta
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        out[name] = path
    yield out
    sys.path.remove(str(root))


def _local_header(path: Path) -> GgufHeader:
    data = path.read_bytes()
    return read_header(lambda s, e: data[s : e + 1], len(data), ADAPTER_KEYS, label=path.name)


def test_the_tensor_infos_are_read_in_few_bounded_reads(smollm2_gguf: Path) -> None:
    calls: list[tuple[int, int]] = []
    with open(smollm2_gguf, "rb") as f:

        def read_range(start: int, end: int) -> bytes:
            calls.append((start, end))
            f.seek(start)
            return f.read(end - start + 1)

        header = read_header(read_range, smollm2_gguf.stat().st_size, ADAPTER_KEYS, label="base")
    assert header.keys["general.architecture"] == "llama"
    assert header.tensors["blk.0.attn_q.weight"] == (HIDDEN, HIDDEN, 1, 1)
    assert header.tensors["token_embd.weight"] == (HIDDEN, VOCAB, 1, 1)
    assert header.tensors["blk.0.ffn_down.weight"] == (FFN, HIDDEN, 1, 1)
    with open(smollm2_gguf, "rb") as f:
        (count,) = struct.unpack("<Q", f.read(16)[8:16])
    assert len(header.tensors) == count  # every tensor info read
    read = sum(end - start + 1 for start, end in calls)
    assert len(calls) <= 6 and read < 16 * 1024 * 1024  # the header only, never the 98 MB of tensor data


def test_the_real_adapter_and_a_fitting_one_pass_the_bad_shapes_fail_with_both_shapes(
    smollm2_gguf: Path, adapter_files: dict[str, Path]
) -> None:
    base = _local_header(smollm2_gguf)
    real = _local_header(lora_adapter_path())
    assert real.tensors and all(n.endswith((".lora_a", ".lora_b")) for n in real.tensors)
    assert adapter_problem(real, base, adapter_label="real", base_label="smol") is None
    assert adapter_problem(_local_header(adapter_files["fits"]), base, adapter_label="fits", base_label="smol") is None
    for name, (reason, _engine) in REFUSED.items():
        problem = adapter_problem(_local_header(adapter_files[name]), base, adapter_label=name, base_label="smol")
        assert problem is not None and reason in problem, (name, problem)
        assert "\n" not in problem


@pytest.fixture(scope="module")
def served(
    fake_hub: FakeHub, smollm2_gguf: Path, adapter_files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, ServedFile]:
    base = tmp_path_factory.mktemp("shape-base") / "smol.gguf"
    with open(smollm2_gguf, "rb") as src:
        base.write_bytes(src.read(BASE_SLICE))
    out = {"base": fake_hub.add_file("acme-shape/base", "smol.gguf", base)}
    out["real"] = fake_hub.add_file("acme-shape/real", "real-lora.gguf", lora_adapter_path())
    for name in ("fits", *REFUSED):
        out[name] = fake_hub.add_file(f"acme-shape/{name}", f"{name}-lora.gguf", adapter_files[name])
    return out


def test_a_wrong_shape_fails_its_entry_at_copy_and_never_lands(
    hub: FakeHub,
    served: dict[str, ServedFile],
    s3,
    bucket: str,  # noqa: ANN001
) -> None:
    base = CatalogEntry(name="smol", hf_repo=served["base"].repo, file=served["base"].name)
    adapters = {
        n: CatalogEntry(name=n, hf_repo=served[n].repo, file=served[n].name, base="smol")
        for n in ("real", "fits", *REFUSED)
    }
    run = CatalogCopy(
        Catalog((base, *adapters.values())),
        bucket=bucket,
        s3=s3,
        hubs=Hubs(hub.url, retry=FAST_RETRY),
        log=lambda _l: None,
    ).run()
    assert sorted(f.name for f in run.failures) == sorted(REFUSED)
    keys = _keys(s3, bucket)
    for name in ("real", "fits"):
        assert gguf_key(adapters[name]) in keys and failure_key(adapters[name]) not in keys
    for name, (reason, _engine) in REFUSED.items():
        assert gguf_key(adapters[name]) not in keys
        marker = json.loads(s3.get_object(Bucket=bucket, Key=failure_key(adapters[name]))["Body"].read())
        assert reason in marker["reason"] and "smol (acme-shape/base/smol.gguf)" in marker["reason"], marker


def test_a_lora_bundle_member_with_a_wrong_shape_fails_the_bundle(
    hub: FakeHub,
    served: dict[str, ServedFile],
    s3,
    bucket: str,  # noqa: ANN001
) -> None:
    from model_download.catalog import CatalogAdapter

    bundle = CatalogEntry(
        name="smol-farm",
        hf_repo=served["base"].repo,
        file=served["base"].name,
        layouts=("lora",),
        adapters=(
            CatalogAdapter(name="real", hf_repo=served["real"].repo, file=served["real"].name),
            CatalogAdapter(name="bad", hf_repo=served["wrong-inner"].repo, file=served["wrong-inner"].name),
        ),
    )
    run = CatalogCopy(
        Catalog((bundle,)), bucket=bucket, s3=s3, hubs=Hubs(hub.url, retry=FAST_RETRY), log=lambda _l: None
    ).run()
    (failure,) = run.failures
    assert "adapter bad of the lora bundle" in failure.reason and REFUSED["wrong-inner"][0] in failure.reason
    assert [k for k in _keys(s3, bucket) if not k.endswith("copy-failed.json")] == []  # nothing of the bundle landed


def _engine_loads(binary: Path, model: Path, adapter: Path, log: Path) -> bool:
    """Start the real llama-server with `--lora adapter`: True once healthy, False when it exits refusing it."""
    import subprocess

    port = free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "--lora", str(adapter)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_healthy(f"http://127.0.0.1:{port}", proc, timeout=120)
            return True
        except RuntimeError:  # exited before it was healthy
            return False
        finally:
            stop_process(proc)


@pytest.mark.parametrize("name", ["real", "fits", *REFUSED])
def test_the_engine_refuses_exactly_what_the_copy_refuses(
    name: str,
    llama_server_bin: Path,
    smollm2_gguf: Path,
    adapter_files: dict[str, Path],
    tmp_path: Path,
) -> None:
    adapter = lora_adapter_path() if name == "real" else adapter_files[name]
    ours = adapter_problem(_local_header(adapter), _local_header(smollm2_gguf), adapter_label=name, base_label="smol")
    log = tmp_path / "llama-server.log"
    loaded = _engine_loads(llama_server_bin, smollm2_gguf, adapter, log)
    assert loaded == (ours is None), (ours, log.read_text(errors="replace")[-2000:])
    if name in REFUSED:
        assert REFUSED[name][1] in log.read_text(errors="replace")
