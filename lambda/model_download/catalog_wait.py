"""Custom::DedicatedModelsReady — the ONE bounded wait of a farm's deploy: until every dedicated model's key of the
catalog is in place (awaited_key: catalog.gguf_key, or a `lora` bundle's manifest — written last, the seal of a base
and its adapters), so no SageMaker endpoint is created and no dedicated Deployment rolls before its model exists.
The pooled models are not waited for (they become servable as their keys land).

The catalog copy is started by its own state machine, not awaited (catalog_fanout); the dedicated models head the
catalog's entries, so its Distributed Map copies them first. This resource reads the catalog (the construct's S3
asset, checked against the fingerprint) and HEADs the keys of its first `Dedicated` entries every poll of the
stack's ModelCopyProvider (isComplete, build_job.QUERY_INTERVAL_SECONDS):

- every key in place → complete (after the migration check below);
- a model whose copy keeps failing (its failure marker, catalog.failure_key, written after this wait began and
  `FailAfterAttempts` attempts past the one it found at the start — the Map's own retries are spent) → fail, with
  the marker's reason;
- past WAIT_DEADLINE_SECONDS (build_job.BUILD_DEADLINE_SECONDS: two polls before the provider's waiter gives up,
  itself inside CloudFormation's one hour for a custom resource, build_job.SERVICE_TIMEOUT_SECONDS) → fail, naming
  the models still missing. The copy itself goes on; a redeploy finds them in place.

Migration (a farm whose dedicated models were ModelArtifacts, `models/<name>/<commit>/<file>`): a branch revision
is resolved again by the catalog's copy, so the bytes could differ from the deployed ones. Before completing, for
each entry that pins neither sha256 nor a commit, an earlier ModelArtifact object of the same repo and file
(metadata `hf-source` `<repo>/<file>@<commit>`, copy.hf_source) must hold the catalog object's sha256; else the
deploy fails naming the model and the commit it served, and the fix (pin `revision: <that commit>`). A failed update
rolls back before any consumer moved (they depend on this resource) and before CloudFormation's cleanup deletes the
ModelArtifacts, so the farm keeps serving the old bytes.

Delete: nothing (the objects stay). An Update back to older properties (a rollback) waits for that catalog's keys,
which are in place: identity keys are never deleted.

Properties: Bucket, CatalogBucket, CatalogKey, Fingerprint, Dedicated (how many entries, from the first, are
dedicated), FailAfterAttempts, LegacyPrefix (`models/`)."""

from __future__ import annotations

import json
import re
import time
from typing import Any

from .build_job import BUILD_DEADLINE_SECONDS, client
from .catalog import Catalog, CatalogEntry, failure_key, lora_member_keys
from .catalog_copy import load_catalog

RESOURCE_TYPE = "Custom::DedicatedModelsReady"
PHYSICAL_ID = "dedicated-models-ready"
WAIT_DEADLINE_SECONDS = BUILD_DEADLINE_SECONDS
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_NAMES_IN_ERROR = 10


def is_wait(event: dict[str, Any]) -> bool:
    return "Dedicated" in (event.get("ResourceProperties") or {})


def _head(s3, bucket: str, key: str) -> dict[str, Any] | None:  # noqa: ANN001
    from botocore.exceptions import ClientError

    try:
        return s3.head_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return None
        raise


def _marker(s3, bucket: str, entry: CatalogEntry) -> dict[str, Any] | None:  # noqa: ANN001
    from botocore.exceptions import ClientError

    try:
        return json.loads(s3.get_object(Bucket=bucket, Key=failure_key(entry))["Body"].read())
    except ClientError:
        return None
    except ValueError:
        return None


def dedicated(props: dict[str, Any], s3) -> tuple[Catalog, tuple[CatalogEntry, ...]]:  # noqa: ANN001
    catalog = load_catalog(s3, f"s3://{props['CatalogBucket']}/{props['CatalogKey']}", props.get("Fingerprint"))
    return catalog, catalog.entries[: int(props["Dedicated"])]


def on_event(event: dict[str, Any], _context: Any = None, *, s3=None) -> dict[str, Any]:  # noqa: ANN001
    if event["RequestType"] == "Delete":
        return {"PhysicalResourceId": event.get("PhysicalResourceId") or PHYSICAL_ID}
    s3 = s3 or client("s3")
    props = event["ResourceProperties"]
    _, entries = dedicated(props, s3)
    # The attempts each marker already counts: only attempts of this deploy's copy fail it early.
    baseline = {e.name: int((_marker(s3, props["Bucket"], e) or {}).get("attempt", 0)) for e in entries}
    return {
        "PhysicalResourceId": PHYSICAL_ID,
        "Data": {"Started": str(int(time.time())), "Baseline": json.dumps(baseline, separators=(",", ":"))},
    }


def awaited_key(catalog: Catalog, entry: CatalogEntry) -> str:
    """The key the consumer reads: a `lora` bundle's manifest (written last: its seal), else `gguf` (an endpoint or
    Deployment), else the entry's `mme` tarball (an inference component's ArtifactUrl)."""
    keys = catalog.keys(entry)
    return keys.get("lora") or keys.get("gguf") or keys["mme"]


def _pinned(entry: CatalogEntry) -> bool:
    return entry.sha256 is not None or bool(_COMMIT.match(entry.revision))


def legacy_mismatch(s3, props: dict[str, Any], entry: CatalogEntry, sha256: str) -> str | None:  # noqa: ANN001
    """The commit an earlier ModelArtifact copy of this repo/file served, when none of them holds `sha256`."""
    bucket, prefix = props["Bucket"], f"{props.get('LegacyPrefix') or 'models/'}{entry.name}/"
    served: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents") or []:
            if not obj["Key"].endswith("/" + entry.file):
                continue
            meta = (_head(s3, bucket, obj["Key"]) or {}).get("Metadata") or {}
            source = meta.get("hf-source", "")
            if source.rsplit("@", 1)[0] != f"{entry.hf_repo}/{entry.file}":
                continue
            if meta.get("sha256") == sha256:
                return None
            served.append(source.rsplit("@", 1)[-1])
    return served[-1] if served else None


def is_complete(event: dict[str, Any], _context: Any = None, *, s3=None, now=None) -> dict[str, Any]:  # noqa: ANN001
    if event["RequestType"] == "Delete":
        return {"IsComplete": True}
    s3 = s3 or client("s3")
    props = event["ResourceProperties"]
    bucket = props["Bucket"]
    data = event.get("Data") or {}
    started = int(data.get("Started") or time.time())
    baseline = json.loads(data.get("Baseline") or "{}")
    fail_after = int(props.get("FailAfterAttempts") or 1)
    catalog, entries = dedicated(props, s3)
    missing: list[CatalogEntry] = []
    landed: dict[str, str] = {}
    for entry in entries:
        head = _head(s3, bucket, awaited_key(catalog, entry))
        if head is None:
            missing.append(entry)
        else:
            landed[entry.name] = (head.get("Metadata") or {}).get("sha256", "")
    for entry in missing:
        marker = _marker(s3, bucket, entry)
        if marker is None:
            continue
        attempts = int(marker.get("attempt", 0)) - int(baseline.get(entry.name, 0))
        if attempts >= fail_after:
            raise RuntimeError(
                f"dedicated model {entry.name}: its catalog copy failed {attempts} times this deploy: "
                f"{marker.get('reason', '?')} (s3://{bucket}/{failure_key(entry)}) — fix the source and deploy again"
            )
    if missing:
        elapsed = int(now if now is not None else time.time()) - started
        if elapsed >= WAIT_DEADLINE_SECONDS:
            names = ", ".join(e.name for e in missing[:_NAMES_IN_ERROR])
            more = f" and {len(missing) - _NAMES_IN_ERROR} more" if len(missing) > _NAMES_IN_ERROR else ""
            raise RuntimeError(
                f"{len(missing)} of {len(entries)} dedicated models not copied within {WAIT_DEADLINE_SECONDS // 60} "
                f"minutes: {names}{more} — the catalog copy goes on (its state machine's execution); deploy again "
                "once their keys are in place, or pre-seed large ones (artifacts/README.md)"
            )
        print(
            f"waiting for {len(missing)} of {len(entries)} dedicated models: {', '.join(e.name for e in missing[:5])}"
        )
        return {"IsComplete": False}
    for entry in entries:
        if _pinned(entry):
            continue
        sha256 = landed[entry.name]
        if entry.adapters is not None:  # the manifest's sha256 is its own: the model's is its bundle's base GGUF's
            sha256 = ((_head(s3, bucket, lora_member_keys(entry)[""]) or {}).get("Metadata") or {}).get("sha256", "")
        commit = legacy_mismatch(s3, props, entry, sha256)
        if commit is not None:
            raise RuntimeError(
                f"dedicated model {entry.name}: the catalog's copy of {entry.hf_repo}/{entry.file}@{entry.revision} "
                f"is not the bytes its ModelArtifact served (commit {commit}); pin them — set its revision to {commit} "
                "— or keep farm.dedicated_copy: artifact"
            )
    return {"IsComplete": True, "Data": {"Ready": str(len(entries))}}
