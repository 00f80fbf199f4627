"""The catalog's `lora` bundle (issue 26, INTERFACE-s2 §B): a base served with its LoRA adapters by one SageMaker
single-model endpoint, whose ModelDataSource S3Prefix is catalog.lora_prefix(entry). The worker writes the base GGUF,
each adapter as lora/<name>.gguf (header-checked against the base, as adapter entries are) and lora.json LAST — the
seal the deploy's waiter HEADs. Real servers: the fake Hub over HTTP serving the real SmolLM2 stand-in GGUF and the
real adapter trained on it (tests/support/lora.py), moto's S3 server; the mismatched adapter is the real adapter with
its general.architecture rewritten."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from inference_runtime.lora import read_manifest
from model_download import catalog_wait
from model_download.catalog import (
    LORA_MANIFEST,
    Catalog,
    CatalogAdapter,
    CatalogEntry,
    CatalogError,
    failure_key,
    lora_manifest,
    lora_manifest_key,
    lora_member_keys,
    lora_prefix,
)
from model_download.catalog_copy import CatalogCopy, Hubs
from model_download.catalog_job import main as catalog_main
from model_download.copy import hf_source
from model_download.hub import RetryPolicy
from tests.runtime.model_download.constants import FILE, PUBLIC_REPO
from tests.runtime.model_download.fake_hub import FakeHub, ServedFile
from tests.runtime.model_download.test_catalog import _keys, _publish
from tests.support.lora import lora_adapter_path
from tests.support.lora_bundle import write_lora_bundle

FAST_RETRY = RetryPolicy(attempts=3, backoff_seconds=0.01, max_backoff_seconds=0.02)
PART = 5 * 1024 * 1024
JSON_REPO, TOO_REPO, QWEN_REPO = "acme-lora/json", "acme-lora/json-too", "acme-lora/qwen"


@pytest.fixture(scope="module")
def adapters(fake_hub: FakeHub, tmp_path_factory: pytest.TempPathFactory) -> dict[str, ServedFile]:
    """The real adapter (twice, under two repos) and a copy of it whose header names another architecture."""
    real = lora_adapter_path()
    data = real.read_bytes()
    at = data.index(b"general.architecture")
    arch = data.index(b"llama", at)  # the key's string value (uint32 type, uint64 length, bytes)
    assert arch - at < 40
    qwen = tmp_path_factory.mktemp("qwen") / "qwen-lora.gguf"
    qwen.write_bytes(data[:arch] + b"qwen2" + data[arch + 5 :])  # same length: the header stays well-formed
    return {
        "json": fake_hub.add_file(JSON_REPO, "smollm2-json-lora.gguf", real),
        "too": fake_hub.add_file(TOO_REPO, "json-too-lora.gguf", real),
        "qwen": fake_hub.add_file(QWEN_REPO, "qwen-lora.gguf", qwen),
    }


def _entry(*adapters: CatalogAdapter, name: str = "smol") -> CatalogEntry:
    return CatalogEntry(name=name, hf_repo=PUBLIC_REPO, file=FILE, layouts=("lora",), adapters=adapters)


def _json(scale: float = 1.0) -> CatalogAdapter:
    return CatalogAdapter("support-json", JSON_REPO, "smollm2-json-lora.gguf", scale=scale)


def _too(scale: float = 0.5) -> CatalogAdapter:
    return CatalogAdapter("json-too", TOO_REPO, "json-too-lora.gguf", scale=scale)


class Recording:
    """The real S3 client, recording each object that was written (PutObject, CompleteMultipartUpload), in order."""

    def __init__(self, s3: Any) -> None:
        self._s3 = s3
        self.writes: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._s3, name)

    def put_object(self, **kwargs: Any) -> Any:
        out = self._s3.put_object(**kwargs)
        self.writes.append(kwargs["Key"])
        return out

    def complete_multipart_upload(self, **kwargs: Any) -> Any:
        out = self._s3.complete_multipart_upload(**kwargs)
        self.writes.append(kwargs["Key"])
        return out


def _copy(catalog: Catalog, s3: Any, bucket: str, hub: FakeHub) -> tuple[Any, Recording]:
    recording = Recording(s3)
    run = CatalogCopy(
        catalog,
        bucket=bucket,
        s3=recording,
        hubs=Hubs(hub.url, retry=FAST_RETRY),
        concurrency=2,
        part_size=PART,
        log=lambda _line: None,
    ).run()
    return run, recording


def _sha(s3: Any, bucket: str, key: str) -> str:
    return hashlib.sha256(s3.get_object(Bucket=bucket, Key=key)["Body"].read()).hexdigest()


def _versions(s3: Any, bucket: str, prefix: str) -> dict[str, str]:
    listed = s3.list_object_versions(Bucket=bucket, Prefix=prefix).get("Versions", [])
    return {v["Key"]: v["VersionId"] for v in listed}


# -- the one definition -----------------------------------------------------------------------------------

# A catalog of every entry kind that existed before `adapters` (a pinned gguf-layout entry, a pooled one with a token
# secret, an adapter entry), as the code before this change wrote it (git HEAD's catalog.py, run once).
_BEFORE = Catalog(
    (
        CatalogEntry(
            "hot",
            "acme/hot-GGUF",
            "hot-Q4.gguf",
            revision="c" * 40,
            sha256="ab" * 32,
            layouts=("gguf",),
            engine_args={"ctx-size": "2048"},
        ),
        CatalogEntry(
            "smol", "acme/smol-GGUF", "dir/smol.gguf", token_secret_name="hf-token", engine_args={"threads": "2"}
        ),
        CatalogEntry("tuned", "acme/tuned-lora", "tuned-lora.gguf", base="smol"),
    ),
    ("mme",),
)
_BEFORE_JSON = (
    '{"entries":[{"engine_args":{"ctx-size":"2048"},"file":"hot-Q4.gguf","hf_repo":"acme/hot-GGUF","layouts":["gguf"],'
    '"name":"hot","revision":"cccccccccccccccccccccccccccccccccccccccc","sha256":'
    '"abababababababababababababababababababababababababababababababab","token_secret_name":null},{"engine_args":'
    '{"threads":"2"},"file":"dir/smol.gguf","hf_repo":"acme/smol-GGUF","name":"smol","revision":"main","sha256":null,'
    '"token_secret_name":"hf-token"},{"base":"smol","engine_args":{},"file":"tuned-lora.gguf","hf_repo":'
    '"acme/tuned-lora","name":"tuned","revision":"main","sha256":null,"token_secret_name":null}],"layouts":["mme"],'
    '"version":1}'
)
_BEFORE_FINGERPRINT = "9e3d967c7df29d6d1be2f4b3f600a5eb14c12ce312298eaa696f2e00691afbbc"


def test_a_catalog_without_adapters_keeps_its_json_and_fingerprint() -> None:
    assert _BEFORE.to_json() == _BEFORE_JSON
    assert _BEFORE.fingerprint() == _BEFORE_FINGERPRINT
    assert all("adapters" not in e.to_dict() for e in _BEFORE.entries)


def test_a_bundle_entry_round_trips_and_names_its_keys() -> None:
    entry = _entry(_json(), _too())
    catalog = Catalog((entry,), ("mme",))
    assert Catalog.from_json(catalog.to_json()) == catalog
    prefix = lora_prefix(entry)
    assert prefix.startswith("farm/smol/") and prefix.endswith("/") and "-lora-" in prefix
    # The model's own idhash, then 8 hex of the adapters: farm/<name>/<idhash>-lora-<8 hex>/.
    idhash, adapters_hex = prefix.removeprefix("farm/smol/").removesuffix("/").split("-lora-")
    assert len(idhash) == 16 and len(adapters_hex) == 8 and int(adapters_hex, 16) >= 0
    assert catalog.keys(entry) == {"lora": prefix + LORA_MANIFEST} == {"lora": lora_manifest_key(entry)}
    assert lora_member_keys(entry) == {
        "": prefix + FILE,
        "support-json": prefix + "lora/support-json.gguf",
        "json-too": prefix + "lora/json-too.gguf",
    }
    assert json.loads(lora_manifest(entry)) == {
        "format": 1,
        "model": FILE,
        "adapters": [
            {"name": "support-json", "file": "lora/support-json.gguf", "scale": 1.0},
            {"name": "json-too", "file": "lora/json-too.gguf", "scale": 0.5},
        ],
    }


def test_the_bundle_prefix_is_the_identity_of_its_adapters() -> None:
    prefix = lora_prefix(_entry(_json(), _too()))
    assert lora_prefix(_entry(_json(), _too())) == prefix  # the same list: the same bundle
    assert lora_prefix(_entry(_json(1), _too(0.5))) == prefix  # 1 and 1.0 are one scale
    secret = CatalogAdapter("support-json", JSON_REPO, "smollm2-json-lora.gguf", token_secret_name="hf-token")
    assert lora_prefix(_entry(secret, _too())) == prefix  # a token secret is how, not what
    others = {
        lora_prefix(_entry(_json(2.0), _too())),  # another scale
        lora_prefix(_entry(_too(), _json())),  # another order: other ids
        lora_prefix(_entry(_json())),  # another list
        lora_prefix(_entry(CatalogAdapter("support-json", JSON_REPO, "smollm2-json-lora.gguf", revision="v2"), _too())),
        lora_prefix(_entry(CatalogAdapter("renamed", JSON_REPO, "smollm2-json-lora.gguf"), _too())),
    }
    assert prefix not in others and len(others) == 5
    base = prefix.rsplit("-lora-", 1)[0]
    assert all(p.rsplit("-lora-", 1)[0] == base for p in others)  # the same base: the same idhash


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Catalog((_entry(_json()),), ("lora",)), "catalog layouts must be .*'lora' is the own layout"),
        (
            lambda: Catalog((CatalogEntry("smol", PUBLIC_REPO, FILE, layouts=("lora",)),)),
            "'smol': the 'lora' layout is a bundle of a base and its adapters: give adapters",
        ),
        (
            lambda: Catalog((CatalogEntry("smol", PUBLIC_REPO, FILE, adapters=(_json(),)),)),
            r"'smol': an entry with adapters is copied as one 'lora' bundle: its layouts must be \('lora',\)",
        ),
        (
            lambda: Catalog((CatalogEntry("smol", PUBLIC_REPO, FILE, layouts=("gguf", "lora"), adapters=(_json(),)),)),
            "its layouts must be",
        ),
        (lambda: Catalog((_entry(),)), "'smol': adapters must be a non-empty tuple"),
        (lambda: Catalog((_entry(_json(), _json(0.5)),)), "adapter name 'support-json' appears twice"),
        (
            lambda: Catalog((_entry(CatalogAdapter("smol", JSON_REPO, "a.gguf")),)),
            "adapter name 'smol' appears twice \\(or is the base's name\\)",
        ),
        (lambda: Catalog((_entry(_json(0)),)), "adapter 'support-json': scale must be a positive number, got 0"),
        (lambda: Catalog((_entry(_json(float("nan"))),)), "scale must be a positive number"),
        (
            lambda: Catalog((_entry(CatalogAdapter("x", JSON_REPO, "adapter_model.bin")),)),
            "adapter 'x': an adapter is a .gguf file or a PEFT adapter's adapter_model.safetensors",
        ),
        (lambda: Catalog((_entry(CatalogAdapter("x", "not a repo", "x.gguf")),)), "adapter 'x': hf_repo must be"),
        (lambda: Catalog((_entry(CatalogAdapter("X_", JSON_REPO, "x.gguf")),)), "adapter 'X_': name must be a DNS"),
    ],
)
def test_a_bad_bundle_entry_is_refused_in_one_line(build: Any, message: str) -> None:
    with pytest.raises(CatalogError, match=message) as caught:
        build().validate()
    assert "\n" not in str(caught.value)


def test_an_unknown_adapter_field_in_the_json_is_refused() -> None:
    data = json.loads(Catalog((_entry(_json()),)).to_json())
    data["entries"][0]["adapters"][0]["id"] = 0
    with pytest.raises(CatalogError, match="adapter 'support-json': unknown field\\(s\\) id"):
        Catalog.from_json(json.dumps(data))


# -- the worker --------------------------------------------------------------------------------------------


def test_the_worker_writes_the_bundle_and_seals_it_last(
    hub: FakeHub,
    served: ServedFile,
    adapters: dict[str, ServedFile],
    s3: Any,
    bucket: str,
    tmp_path: Path,
) -> None:
    entry = _entry(_json(), _too())
    run, recording = _copy(Catalog((entry,)), s3, bucket, hub)
    assert run.failures == []
    (receipt,) = run.receipts
    assert receipt.copied == ("lora",) and receipt.keys == {"lora": lora_manifest_key(entry)}
    assert (receipt.sha256, receipt.size) == (served.sha256, served.size)

    prefix, members = lora_prefix(entry), lora_member_keys(entry)
    manifest_key = lora_manifest_key(entry)
    assert _keys(s3, bucket) == sorted([*members.values(), manifest_key])  # nothing else: no marker
    assert recording.writes[-1] == manifest_key  # the seal is written last
    assert sorted(recording.writes[:-1]) == sorted(members.values()) and recording.writes[0] == members[""]
    assert _sha(s3, bucket, members[""]) == served.sha256  # the real base
    assert _sha(s3, bucket, members["support-json"]) == adapters["json"].sha256  # the real adapter
    assert _sha(s3, bucket, members["json-too"]) == adapters["too"].sha256
    head = s3.head_object(Bucket=bucket, Key=manifest_key)
    body = s3.get_object(Bucket=bucket, Key=manifest_key)["Body"].read()
    assert head["ContentType"] == "application/json"
    assert head["Metadata"]["sha256"] == hashlib.sha256(body).hexdigest()
    manifest = json.loads(body)
    assert manifest == {
        "format": 1,
        "model": FILE,
        "adapters": [  # config order = ids, with their scales
            {"name": "support-json", "file": "lora/support-json.gguf", "scale": 1.0},
            {"name": "json-too", "file": "lora/json-too.gguf", "scale": 0.5},
        ],
    }
    # Each member records where its bytes came from (the copy engine's hf-source, pinned to the commit).
    member = s3.head_object(Bucket=bucket, Key=members["support-json"])["Metadata"]
    assert member["sha256"] == adapters["json"].sha256
    assert member["hf-source"] == hf_source(JSON_REPO, "smollm2-json-lora.gguf", hub.commit)

    # tests/support/lora_bundle.py (what the container's tests serve) lays out exactly these files and manifest.
    local = write_lora_bundle(
        tmp_path / "model",
        served.path,
        [("support-json", adapters["json"].path, 1.0), ("json-too", adapters["too"].path, 0.5)],
        name="smol",
    )
    on_disk = sorted(str(p.relative_to(local.parent)) for p in local.parent.rglob("*") if p.is_file())
    assert on_disk == sorted(k.removeprefix(prefix) for k in [*members.values(), manifest_key])
    assert local.read_bytes() == body

    # SageMaker downloads every object under the S3Prefix into /opt/ml/model (keys relative to the prefix); the
    # container's reader (containers/inference_runtime/lora.py) reads the bundle as the worker wrote it.
    model_dir = tmp_path / "opt-ml-model"
    for key in [*members.values(), manifest_key]:
        target = model_dir / key.removeprefix(prefix)
        target.parent.mkdir(parents=True, exist_ok=True)
        s3.download_file(bucket, key, str(target))
    bundle = read_manifest(model_dir / LORA_MANIFEST)
    assert Path(bundle.model) == model_dir / FILE
    assert [(a.name, Path(a.path), a.scale) for a in bundle.adapters] == [
        ("support-json", model_dir / "lora" / "support-json.gguf", 1.0),
        ("json-too", model_dir / "lora" / "json-too.gguf", 0.5),
    ]
    assert bundle.ids() == {"support-json": 0, "json-too": 1}

    # A re-run keeps the sealed bundle: no Hub request, nothing written.
    hub.stats.heads = 0
    again, recording = _copy(Catalog((entry,)), s3, bucket, hub)
    assert again.failures == [] and again.receipts[0].copied == ()
    assert again.receipts[0].sha256 == served.sha256
    assert recording.writes == [] and hub.stats.heads == 0


def test_an_unsealed_bundle_is_completed_then_sealed(
    hub: FakeHub,
    served: ServedFile,
    adapters: dict[str, ServedFile],
    s3: Any,
    bucket: str,
) -> None:
    entry = _entry(_json(), _too())
    first, _ = _copy(Catalog((entry,)), s3, bucket, hub)
    assert first.failures == []
    members, manifest_key = lora_member_keys(entry), lora_manifest_key(entry)
    # An interrupted run: the base and the first adapter landed, the second adapter and the seal did not.
    for key in (manifest_key, members["json-too"]):
        for version in s3.list_object_versions(Bucket=bucket, Prefix=key)["Versions"]:
            s3.delete_object(Bucket=bucket, Key=key, VersionId=version["VersionId"])
    kept = _versions(s3, bucket, lora_prefix(entry))
    assert sorted(kept) == sorted([members[""], members["support-json"]])

    hub.stats.heads = 0
    run, recording = _copy(Catalog((entry,)), s3, bucket, hub)
    assert run.failures == [] and run.receipts[0].copied == ("lora",)
    assert recording.writes == [members["json-too"], manifest_key]  # only what was missing, the seal last
    assert hub.stats.heads == 1  # the missing adapter's resolution; the landed members were read in-region
    assert {k: v for k, v in _versions(s3, bucket, lora_prefix(entry)).items() if k in kept} == kept  # untouched
    assert run.receipts[0].sha256 == served.sha256 and run.receipts[0].commit == hub.commit
    assert json.loads(s3.get_object(Bucket=bucket, Key=manifest_key)["Body"].read())["adapters"][1]["name"] == (
        "json-too"
    )


def test_another_scale_is_another_bundle_and_the_first_is_never_rewritten(
    hub: FakeHub, adapters: dict[str, ServedFile], s3: Any, bucket: str
) -> None:
    one, other = _entry(_json(), _too()), _entry(_json(), _too(0.75))
    first, _ = _copy(Catalog((one,)), s3, bucket, hub)
    assert first.failures == []
    before = _versions(s3, bucket, lora_prefix(one))
    second, recording = _copy(Catalog((other,)), s3, bucket, hub)
    assert second.failures == [] and lora_prefix(other) != lora_prefix(one)
    assert all(key.startswith(lora_prefix(other)) for key in recording.writes)
    assert _versions(s3, bucket, lora_prefix(one)) == before
    scales = [
        a["scale"]
        for a in json.loads(s3.get_object(Bucket=bucket, Key=lora_manifest_key(other))["Body"].read())["adapters"]
    ]
    assert scales == [1.0, 0.75]


def test_a_mismatched_adapter_fails_the_entry_and_nothing_of_the_bundle_lands(
    hub: FakeHub, adapters: dict[str, ServedFile], s3: Any, bucket: str
) -> None:
    wrong = CatalogAdapter("qwen-json", QWEN_REPO, "qwen-lora.gguf")
    entry = _entry(_json(), wrong)
    catalog = Catalog((entry,))
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
            "--concurrency",
            "2",
            "--part-size-mib",
            "5",
        ]
    )
    assert code != 0  # the batch counts as failed
    assert _keys(s3, bucket) == [failure_key(entry)]  # neither the base, nor the good adapter, nor a seal
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    marker = json.loads(s3.get_object(Bucket=bucket, Key=failure_key(entry))["Body"].read())
    assert marker["model"] == "smol" and marker["attempt"] == 1
    reason = marker["reason"]
    assert reason.startswith("adapter qwen-json of the lora bundle: adapter qwen-json (acme-lora/qwen/qwen-lora.gguf)")
    assert "is for architecture 'qwen2' but its base smol" in reason and "'llama'" in reason
    assert "model arch and LoRA arch mismatch" in reason


def test_a_missing_adapter_file_fails_the_entry_naming_the_adapter(
    hub: FakeHub, adapters: dict[str, ServedFile], s3: Any, bucket: str
) -> None:
    entry = _entry(_json(), CatalogAdapter("gone", JSON_REPO, "no-such-lora.gguf"))
    run, recording = _copy(Catalog((entry,)), s3, bucket, hub)
    (failure,) = run.failures
    assert failure.reason.startswith("adapter gone of the lora bundle: ") and "no-such-lora.gguf" in failure.reason
    assert failure.marker == failure_key(entry) and recording.writes == [failure_key(entry)]


def test_a_sealed_bundle_with_another_manifest_is_refused_and_kept(
    hub: FakeHub, adapters: dict[str, ServedFile], s3: Any, bucket: str
) -> None:
    entry = _entry(_json())
    s3.put_object(Bucket=bucket, Key=lora_manifest_key(entry), Body=b'{"format":1,"model":"x","adapters":[]}\n')
    run, recording = _copy(Catalog((entry,)), s3, bucket, hub)
    (failure,) = run.failures
    assert (
        "holds another lora.json than this catalog's" in failure.reason and "nothing was overwritten" in failure.reason
    )
    assert recording.writes == [failure_key(entry)]


# -- the deploy's waiter -----------------------------------------------------------------------------------

SHA_BASE, SHA_OTHER, COMMIT = "1" * 64, "2" * 64, "a" * 40


def _wait_event(s3: Any, bucket: str, catalog: Catalog) -> dict[str, Any]:
    s3.put_object(Bucket=bucket, Key="assets/catalog.json", Body=catalog.to_json().encode())
    props = {
        "Bucket": bucket,
        "CatalogBucket": bucket,
        "CatalogKey": "assets/catalog.json",
        "Fingerprint": catalog.fingerprint(),
        "Dedicated": "1",
        "FailAfterAttempts": "2",
        "LegacyPrefix": "models/",
    }
    event = {"RequestType": "Create", "ResourceProperties": props, "ResourceType": catalog_wait.RESOURCE_TYPE}
    return {**event, **catalog_wait.on_event(event, s3=s3)}


def _put(s3: Any, bucket: str, key: str, sha: str, source: str | None = None) -> None:
    meta = {"sha256": sha, **({"hf-source": source} if source else {})}
    s3.put_object(Bucket=bucket, Key=key, Body=b"GGUF", Metadata=meta)


def test_the_waiter_waits_for_the_seal_not_the_members(s3: Any, bucket: str) -> None:
    entry = _entry(_json(), _too())
    pooled = CatalogEntry("pooled", "acme/pooled-GGUF", "pooled.gguf")
    event = _wait_event(s3, bucket, Catalog((entry, pooled), ("mme",)))
    assert catalog_wait.awaited_key(Catalog((entry,), ("mme",)), entry) == lora_manifest_key(entry)
    assert catalog_wait.is_complete(event, s3=s3) == {"IsComplete": False}
    for key in lora_member_keys(entry).values():  # every member in place, not sealed yet
        _put(s3, bucket, key, SHA_BASE, hf_source(PUBLIC_REPO, FILE, COMMIT))
    assert catalog_wait.is_complete(event, s3=s3) == {"IsComplete": False}
    s3.put_object(Bucket=bucket, Key=lora_manifest_key(entry), Body=lora_manifest(entry), Metadata={"sha256": "3" * 64})
    assert catalog_wait.is_complete(event, s3=s3) == {"IsComplete": True, "Data": {"Ready": "1"}}


def test_the_waiter_fails_on_a_bundle_whose_copy_keeps_failing(s3: Any, bucket: str) -> None:
    entry = _entry(_json())
    event = _wait_event(s3, bucket, Catalog((entry,), ("mme",)))
    body = {"model": "smol", "reason": "adapter support-json of the lora bundle: arch mismatch", "attempt": 2}
    s3.put_object(Bucket=bucket, Key=failure_key(entry), Body=json.dumps(body).encode())
    with pytest.raises(RuntimeError, match="dedicated model smol: .*failed 2 times.*adapter support-json of the lora"):
        catalog_wait.is_complete(event, s3=s3)


@pytest.mark.parametrize(("legacy_sha", "completes"), [(SHA_BASE, True), (SHA_OTHER, False)])
def test_the_waiters_migration_check_compares_the_bundles_base(
    s3: Any, bucket: str, legacy_sha: str, completes: bool
) -> None:
    """An unpinned base that an earlier ModelArtifact served: the bundle's BASE GGUF must be those bytes (the
    manifest's own sha256 is not the model's)."""
    entry = _entry(_json())
    event = _wait_event(s3, bucket, Catalog((entry,), ("mme",)))
    _put(s3, bucket, f"models/smol/{COMMIT}/{FILE}", legacy_sha, hf_source(PUBLIC_REPO, FILE, COMMIT))
    _put(s3, bucket, lora_member_keys(entry)[""], SHA_BASE, hf_source(PUBLIC_REPO, FILE, COMMIT))
    s3.put_object(Bucket=bucket, Key=lora_manifest_key(entry), Body=lora_manifest(entry), Metadata={"sha256": "3" * 64})
    if completes:
        assert catalog_wait.is_complete(event, s3=s3)["IsComplete"] is True
    else:
        with pytest.raises(RuntimeError, match=f"dedicated model smol: .*commit {COMMIT}"):
            catalog_wait.is_complete(event, s3=s3)
