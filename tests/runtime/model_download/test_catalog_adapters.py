"""LoRA adapters in a farm's catalog (issue 26): an adapter is an entry with a `base`, copied like a model (same
identity key, layout and marker), and checked before anything of it is written: its GGUF header must be what the
engine loads over its base's (llama.cpp src/llama-adapter.cpp: general.type adapter, adapter.type lora, the base's
general.architecture). A wrong one fails its entry alone, with the reason in its marker. Real servers: the fake Hub
over HTTP → moto's S3 server; the adapter GGUFs are written by gguf-py's GGUFWriter from the pinned llama.cpp tree
(what its convert_lora_to_gguf.py writes with), the base is a slice of the real SmolLM2 GGUF (its real header)."""

from __future__ import annotations

import json
import sys
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from model_download.catalog import Catalog, CatalogEntry, CatalogError, failure_key, gguf_key
from model_download.catalog_copy import CatalogCopy, Hubs
from model_download.catalog_job import main as catalog_main
from model_download.gguf_meta import ADAPTER_KEYS, read_keys
from model_download.hub import RetryPolicy
from tests.runtime.model_download.fake_hub import FakeHub, ServedFile
from tests.runtime.model_download.test_catalog import _keys, _publish
from tests.support.engine import pinned_sdist

FAST_RETRY = RetryPolicy(attempts=3, backoff_seconds=0.01, max_backoff_seconds=0.02)
BASE_SLICE = 7 * 1024 * 1024  # the real header (vocabulary included) and some tensors


@pytest.fixture(scope="module")
def gguf_writer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Path]]:
    """write(path, arch, general_type, adapter_type) → a small LoRA-shaped GGUF written by the pin's gguf-py."""
    dest = tmp_path_factory.mktemp("gguf-py")
    with tarfile.open(pinned_sdist()) as tar:
        members = [m for m in tar.getmembers() if "/vendor/llama.cpp/gguf-py/gguf/" in m.name]
        tar.extractall(dest, members=members, filter="data")
    (root,) = dest.glob("*/vendor/llama.cpp/gguf-py")
    sys.path.insert(0, str(root))
    import numpy as np
    from gguf import GGUFWriter

    def write(path: Path, arch: str, general_type: str = "adapter", adapter_type: str = "lora") -> Path:
        w = GGUFWriter(str(path), arch)
        w.add_type(general_type)
        w.add_string("adapter.type", adapter_type)
        w.add_float32("adapter.lora.alpha", 16.0)
        rng = np.random.default_rng(0)
        w.add_tensor("blk.0.attn_q.weight.lora_a", rng.standard_normal((8, 576), dtype=np.float32))
        w.add_tensor("blk.0.attn_q.weight.lora_b", rng.standard_normal((576, 8), dtype=np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return path

    yield write
    sys.path.remove(str(root))


@pytest.fixture(scope="module")
def served_adapters(
    fake_hub: FakeHub, smollm2_gguf: Path, gguf_writer, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, ServedFile]:
    root = tmp_path_factory.mktemp("adapters")
    base = root / "base.gguf"
    with open(smollm2_gguf, "rb") as src:
        base.write_bytes(src.read(BASE_SLICE))
    out = {"base": fake_hub.add_file("acme-lora/base", "smol-Q4.gguf", base)}
    for name, arch, kind in (
        ("tuned", "llama", "adapter"),  # SmolLM2 is a llama-architecture model
        ("wrong-arch", "qwen2", "adapter"),
        ("not-adapter", "llama", "model"),
    ):
        out[name] = fake_hub.add_file(
            f"acme-lora/{name}", f"{name}-lora.gguf", gguf_writer(root / f"{name}.gguf", arch, kind)
        )
    return out


def _entries(served: dict[str, ServedFile]) -> tuple[CatalogEntry, ...]:
    base = CatalogEntry(name="smol", hf_repo=served["base"].repo, file=served["base"].name)
    adapters = tuple(
        CatalogEntry(name=n, hf_repo=served[n].repo, file=served[n].name, base="smol")
        for n in ("tuned", "wrong-arch", "not-adapter")
    )
    return (base, *adapters)


def test_a_model_entry_keeps_its_json_and_an_adapter_records_its_base() -> None:
    model = CatalogEntry(name="smol", hf_repo="acme/smol", file="smol.gguf")
    adapter = CatalogEntry(name="tuned", hf_repo="acme/tuned", file="tuned-lora.gguf", base="smol")
    assert "base" not in model.to_dict()  # catalogs without adapters keep their bytes and fingerprint
    assert adapter.to_dict()["base"] == "smol"
    catalog = Catalog((model, adapter))
    assert Catalog.from_json(catalog.to_json()) == catalog
    # Same identity key and layout as a model's GGUF: farm/<name>/<idhash>/<file>.
    assert catalog.keys(adapter) == {"gguf": gguf_key(adapter)}
    assert gguf_key(adapter).startswith("farm/tuned/") and gguf_key(adapter).endswith("/tuned-lora.gguf")


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ((CatalogEntry("a", "acme/a", "a.gguf", base="nowhere"),), "'a': base 'nowhere' is not a model of the catalog"),
        (
            (
                CatalogEntry("m", "acme/m", "m.gguf"),
                CatalogEntry("a", "acme/a", "a.gguf", base="m"),
                CatalogEntry("b", "acme/b", "b.gguf", base="a"),
            ),
            "'b': base 'a' is not a model of the catalog",
        ),
        ((CatalogEntry("a", "acme/a", "a.gguf", base="a"),), "'a': base must be the name of another entry"),
    ],
)
def test_a_bad_adapter_entry_is_refused_in_one_line(entries: tuple[CatalogEntry, ...], message: str) -> None:
    with pytest.raises(CatalogError, match=message):
        Catalog(entries).validate()


def test_a_batch_without_the_base_is_valid_against_the_whole_catalog() -> None:
    whole = Catalog((CatalogEntry("m", "acme/m", "m.gguf"), CatalogEntry("a", "acme/a", "a.gguf", base="m")))
    whole.subset(["a"]).validate(whole=False)
    with pytest.raises(CatalogError, match="base 'm' is not a model"):
        whole.subset(["a"]).validate()


def test_the_header_reader_agrees_with_what_gguf_py_wrote(served_adapters: dict[str, ServedFile]) -> None:
    data = served_adapters["tuned"].path.read_bytes()
    calls: list[tuple[int, int]] = []

    def read_range(start: int, end: int) -> bytes:
        calls.append((start, end))
        return data[start : end + 1]

    found = read_keys(read_range, len(data), ADAPTER_KEYS, label="tuned")
    assert found == {"general.architecture": "llama", "general.type": "adapter", "adapter.type": "lora"}
    assert len(calls) == 1  # an adapter's header is one ranged read
    data = served_adapters["base"].path.read_bytes()
    calls.clear()
    assert read_keys(read_range, len(data), frozenset({"general.architecture"}), label="base") == {
        "general.architecture": "llama"
    }
    assert len(calls) == 1  # general.architecture leads a base's header: its vocabulary is never read


def test_a_wrong_adapter_fails_its_entry_only_and_never_lands(
    hub: FakeHub,
    served_adapters: dict[str, ServedFile],
    s3,
    bucket: str,  # noqa: ANN001
) -> None:
    entries = _entries(served_adapters)
    catalog = Catalog(entries)
    code = catalog_main(
        [
            "--catalog",
            _publish(s3, catalog),
            "--fingerprint",
            catalog.fingerprint(),
            "--bucket",
            bucket,
            "--endpoint",
            hub.url,
            "--parallel-models",
            "4",
            "--concurrency",
            "2",
            "--part-size-mib",
            "5",
        ]
    )
    assert code != 0  # two entries failed: the batch counts as failed
    base, tuned, wrong, not_adapter = entries
    keys = _keys(s3, bucket)
    assert gguf_key(base) in keys and gguf_key(tuned) in keys
    assert gguf_key(wrong) not in keys and gguf_key(not_adapter) not in keys
    assert failure_key(base) not in keys and failure_key(tuned) not in keys
    wrong_marker = json.loads(s3.get_object(Bucket=bucket, Key=failure_key(wrong))["Body"].read())
    assert wrong_marker["model"] == "wrong-arch"
    assert "is for architecture 'qwen2' but its base smol" in wrong_marker["reason"]
    assert "'llama'" in wrong_marker["reason"] and "model arch and LoRA arch mismatch" in wrong_marker["reason"]
    marker = json.loads(s3.get_object(Bucket=bucket, Key=failure_key(not_adapter))["Body"].read())
    assert "is not an adapter (general.type 'model'" in marker["reason"]


def test_a_batch_of_adapters_reads_the_landed_base_and_rechecks_held_adapters(
    hub: FakeHub,
    served_adapters: dict[str, ServedFile],
    s3,
    bucket: str,  # noqa: ANN001
) -> None:
    entries = _entries(served_adapters)
    whole = Catalog(entries)
    first = CatalogCopy(whole, bucket=bucket, s3=s3, hubs=Hubs(hub.url, retry=FAST_RETRY), log=lambda _l: None).run()
    assert sorted(f.name for f in first.failures) == ["not-adapter", "wrong-arch"]
    hub.stats.heads = 0
    batch = whole.subset(["tuned", "wrong-arch"])  # the base is in another batch, already landed
    again = CatalogCopy(
        batch, bases=whole, bucket=bucket, s3=s3, hubs=Hubs(hub.url, retry=FAST_RETRY), log=lambda _l: None
    ).run()
    assert [r.name for r in again.receipts] == ["tuned"] and again.receipts[0].copied == ()
    assert [f.name for f in again.failures] == ["wrong-arch"]
    assert hub.stats.heads == 1  # the wrong adapter's own resolution; the base's header came from S3
