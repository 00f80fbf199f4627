"""Custom::DedicatedModelsReady (model_download.catalog_wait) against moto's S3: the farm's one bounded wait for its
dedicated models' catalog keys, its early failure on a copy that keeps failing, its deadline, and the migration check
that refuses other bytes than an earlier ModelArtifact served. Objects carry the metadata the copy engine writes
(`sha256`, `hf-source` as copy.hf_source renders it)."""

from __future__ import annotations

import json
import time

import pytest

from model_download import catalog_wait, custom_resource
from model_download.catalog import Catalog, CatalogEntry, failure_key, gguf_key
from model_download.copy import hf_source

COMMIT_A, COMMIT_B = "a" * 40, "b" * 40
SHA_A, SHA_B = "1" * 64, "2" * 64


def _entries() -> tuple[CatalogEntry, ...]:
    hot = CatalogEntry("hot-a", "acme/hot-a-GGUF", "hot-a.gguf", layouts=("gguf",))
    pinned = CatalogEntry("hot-b", "acme/hot-b-GGUF", "hot-b.gguf", revision=COMMIT_B, layouts=("gguf",))
    pooled = CatalogEntry("pooled", "acme/pooled-GGUF", "pooled.gguf", engine_args={"ctx-size": "512"})
    return hot, pinned, pooled


def _event(s3, bucket: str, request: str = "Create") -> dict:  # noqa: ANN001
    catalog = Catalog(_entries(), ("mme",))
    s3.put_object(Bucket=bucket, Key="assets/catalog.json", Body=catalog.to_json().encode())
    props = {
        "Bucket": bucket,
        "CatalogBucket": bucket,
        "CatalogKey": "assets/catalog.json",
        "Fingerprint": catalog.fingerprint(),
        "Dedicated": "2",
        "FailAfterAttempts": "3",
        "LegacyPrefix": "models/",
    }
    event = {"RequestType": request, "ResourceProperties": props, "ResourceType": catalog_wait.RESOURCE_TYPE}
    answer = catalog_wait.on_event(event, s3=s3)
    return {**event, **answer}


def _land(s3, bucket: str, entry: CatalogEntry, sha: str, commit: str) -> None:  # noqa: ANN001
    s3.put_object(
        Bucket=bucket,
        Key=gguf_key(entry),
        Body=b"GGUF",
        Metadata={"sha256": sha, "hf-source": hf_source(entry.hf_repo, entry.file, commit)},
    )


def _marker(s3, bucket: str, entry: CatalogEntry, attempt: int) -> None:  # noqa: ANN001
    body = {"model": entry.name, "reason": "403 from the Hub", "attempt": attempt, "at": "2030-01-01T00:00:00Z"}
    s3.put_object(Bucket=bucket, Key=failure_key(entry), Body=json.dumps(body).encode())


def test_waits_for_the_dedicated_keys_only_then_completes(s3, bucket: str) -> None:  # noqa: ANN001
    hot, pinned, _pooled = _entries()
    event = _event(s3, bucket)
    assert event["PhysicalResourceId"] == catalog_wait.PHYSICAL_ID
    assert catalog_wait.is_complete(event, s3=s3) == {"IsComplete": False}
    _land(s3, bucket, hot, SHA_A, COMMIT_A)
    assert catalog_wait.is_complete(event, s3=s3) == {"IsComplete": False}
    _land(s3, bucket, pinned, SHA_B, COMMIT_B)
    # The pooled model's key is still missing: the deploy does not wait for it.
    assert catalog_wait.is_complete(event, s3=s3) == {"IsComplete": True, "Data": {"Ready": "2"}}


def test_the_provider_routes_the_wait_by_its_properties(s3, bucket: str) -> None:  # noqa: ANN001
    event = _event(s3, bucket, "Delete")
    assert custom_resource.on_event({**event, "PhysicalResourceId": "x"}) == {"PhysicalResourceId": "x"}
    assert custom_resource.is_complete(event) == {"IsComplete": True}


def test_a_copy_that_keeps_failing_this_deploy_fails_the_wait_with_its_reason(s3, bucket: str) -> None:  # noqa: ANN001
    hot, _pinned, _pooled = _entries()
    _marker(s3, bucket, hot, attempt=5)  # from an earlier deploy: the baseline
    event = _event(s3, bucket)
    _marker(s3, bucket, hot, attempt=7)  # two attempts of this deploy: the Map still retries
    assert catalog_wait.is_complete(event, s3=s3) == {"IsComplete": False}
    _marker(s3, bucket, hot, attempt=8)
    with pytest.raises(RuntimeError, match=r"hot-a: its catalog copy failed 3 times this deploy: 403 from the Hub"):
        catalog_wait.is_complete(event, s3=s3)


def test_the_wait_is_bounded_below_cloudformations_hour(s3, bucket: str) -> None:  # noqa: ANN001
    hot, _pinned, _pooled = _entries()
    event = _event(s3, bucket)
    _land(s3, bucket, hot, SHA_A, COMMIT_A)
    started = int(event["Data"]["Started"])
    assert catalog_wait.WAIT_DEADLINE_SECONDS < 3600  # CloudFormation's limit for a custom resource
    assert catalog_wait.is_complete(event, s3=s3, now=started + catalog_wait.WAIT_DEADLINE_SECONDS - 1) == {
        "IsComplete": False
    }
    with pytest.raises(RuntimeError, match=r"1 of 2 dedicated models not copied within \d+ minutes: hot-b"):
        catalog_wait.is_complete(event, s3=s3, now=started + catalog_wait.WAIT_DEADLINE_SECONDS)
    assert int(time.time()) >= started


def test_migration_refuses_other_bytes_than_the_modelartifact_served(s3, bucket: str) -> None:  # noqa: ANN001
    hot, pinned, _pooled = _entries()
    # What the ModelArtifact copied at its first deploy: models/<name>/<commit>/<file>, main was COMMIT_A then.
    s3.put_object(
        Bucket=bucket,
        Key=f"models/hot-a/{COMMIT_A}/hot-a.gguf",
        Body=b"GGUF",
        Metadata={"sha256": SHA_A, "hf-source": hf_source(hot.hf_repo, hot.file, COMMIT_A)},
    )
    # A pinned entry is never checked: its bytes are the pin's.
    s3.put_object(
        Bucket=bucket,
        Key=f"models/hot-b/{COMMIT_A}/hot-b.gguf",
        Body=b"GGUF",
        Metadata={"sha256": SHA_A, "hf-source": hf_source(pinned.hf_repo, pinned.file, COMMIT_A)},
    )
    _land(s3, bucket, pinned, SHA_B, COMMIT_B)
    event = _event(s3, bucket)
    _land(s3, bucket, hot, SHA_B, COMMIT_B)  # `main` moved: the catalog resolved it to other bytes
    with pytest.raises(RuntimeError, match=rf"hot-a: .* not the bytes its ModelArtifact served \(commit {COMMIT_A}\)"):
        catalog_wait.is_complete(event, s3=s3)


def test_migration_passes_when_the_catalog_copied_the_served_bytes(s3, bucket: str) -> None:  # noqa: ANN001
    hot, pinned, _pooled = _entries()
    s3.put_object(
        Bucket=bucket,
        Key=f"models/hot-a/{COMMIT_A}/hot-a.gguf",
        Body=b"GGUF",
        Metadata={"sha256": SHA_A, "hf-source": hf_source(hot.hf_repo, hot.file, COMMIT_A)},
    )
    event = _event(s3, bucket)
    _land(s3, bucket, hot, SHA_A, COMMIT_A)
    _land(s3, bucket, pinned, SHA_B, COMMIT_B)
    assert catalog_wait.is_complete(event, s3=s3)["IsComplete"] is True
