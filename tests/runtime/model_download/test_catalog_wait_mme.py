"""Custom::DedicatedModelsReady for dedicated models hosted as SageMaker inference components
(farm.dedicated_hosting: inference_components): their catalog entries carry no own layouts, so the catalog's `mme`
tarball is what the component reads (ArtifactUrl) — and the key the wait must find, not a `gguf` key that is never
written."""

from __future__ import annotations

from model_download import catalog_wait
from model_download.catalog import Catalog, CatalogEntry, mme_key
from model_download.copy import hf_source

SHA = "1" * 64
COMMIT = "c" * 40


def test_an_mme_only_dedicated_entry_is_awaited_at_its_tarball_key(s3, bucket: str) -> None:  # noqa: ANN001
    hot = CatalogEntry("hot-ic", "acme/hot-ic-GGUF", "hot-ic.gguf", revision=COMMIT)
    pooled = CatalogEntry("pooled", "acme/pooled-GGUF", "pooled.gguf", engine_args={"ctx-size": "512"})
    catalog = Catalog((hot, pooled), ("mme",))
    s3.put_object(Bucket=bucket, Key="assets/catalog.json", Body=catalog.to_json().encode())
    props = {
        "Bucket": bucket,
        "CatalogBucket": bucket,
        "CatalogKey": "assets/catalog.json",
        "Fingerprint": catalog.fingerprint(),
        "Dedicated": "1",
        "FailAfterAttempts": "3",
        "LegacyPrefix": "models/",
    }
    event = {"RequestType": "Create", "ResourceProperties": props, "ResourceType": catalog_wait.RESOURCE_TYPE}
    event = {**event, **catalog_wait.on_event(event, s3=s3)}
    assert catalog_wait.is_complete(event, s3=s3) == {"IsComplete": False}
    s3.put_object(
        Bucket=bucket,
        Key=mme_key(hot),
        Body=b"tar.gz",
        Metadata={"sha256": SHA, "hf-source": hf_source(hot.hf_repo, hot.file, COMMIT)},
    )
    assert catalog_wait.is_complete(event, s3=s3)["IsComplete"] is True
