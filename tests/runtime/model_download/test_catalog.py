"""The catalog job (`python -m model_download catalog`) against real servers: the fake Hub over HTTP (real GGUF
bytes, 302 to a CDN origin, 401/404) → moto's S3 server; each failed model leaves its failure marker. The batches
the state machine runs: test_catalog_batches.py."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
import time
import uuid
from pathlib import Path

import boto3
import botocore.session
import pytest

from model_download import catalog_resource
from model_download.buildspec import CATALOG_BUILD_SPEC, catalog_environment
from model_download.catalog import (
    FARM_PREFIX,
    Catalog,
    CatalogEntry,
    CatalogError,
    engine_args_hash,
    failure_key,
    gguf_key,
    identity_hash,
    mme_key,
    mme_target_model,
)
from model_download.catalog_copy import CatalogCopy, Hubs
from model_download.catalog_job import main as catalog_main
from model_download.copy import MIB
from model_download.credentials import read_token
from model_download.custom_resource import is_complete, on_event
from model_download.hub import RetryPolicy
from tests.runtime.engine.serving import ENGINE_DIR
from tests.runtime.model_download.constants import FILE, GATED_REPO, GOOD_TOKEN
from tests.runtime.model_download.fake_hub import FakeHub, ServedFile

FAST_RETRY = RetryPolicy(attempts=3, backoff_seconds=0.01, max_backoff_seconds=0.02)
PART = 5 * MIB  # S3's minimum: a 7 MiB file is two parts
SLICE = 7 * MIB + 12345  # even the header-heavy first slice gzips to more than one 5 MiB part


@pytest.fixture(scope="module")
def farm_files(
    fake_hub: FakeHub, smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, ServedFile]:
    """Four distinct LFS files cut from the real GGUF (the first keeps its real header), one of them served with
    a sha256 the bytes do not have (the Hub's X-Linked-Etag disagrees with the bytes: a corrupt copy)."""
    root = tmp_path_factory.mktemp("farm")
    out: dict[str, ServedFile] = {}
    with open(smollm2_gguf, "rb") as src:
        for i, (repo, name) in enumerate(
            [
                ("acme-farm/alpha", "alpha-Q4.gguf"),
                ("acme-farm/beta", "beta-Q4.gguf"),
                ("acme-farm/gamma", "quant/gamma-Q4.gguf"),
                ("acme-farm/broken", "broken-Q4.gguf"),
            ]
        ):
            path = root / f"{i}.gguf"
            src.seek(i * SLICE)
            path.write_bytes(src.read(SLICE))
            wrong = hashlib.sha256(b"not these bytes").hexdigest() if repo.endswith("broken") else None
            out[repo.split("/")[1]] = fake_hub.add_file(repo, name, path, sha256=wrong)
    return out


def _entry(name: str, served: ServedFile, **kw) -> CatalogEntry:  # noqa: ANN003
    return CatalogEntry(name=name, hf_repo=served.repo, file=served.name, **kw)


def _object_sha256(s3, bucket: str, key: str) -> str:  # noqa: ANN001
    return hashlib.sha256(s3.get_object(Bucket=bucket, Key=key)["Body"].read()).hexdigest()


def _keys(s3, bucket: str) -> list[str]:  # noqa: ANN001
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", []))


def _publish(s3, catalog: Catalog) -> str:  # noqa: ANN001
    """The catalog as the construct ships it: an S3 asset (its own bucket, a content-addressed key)."""
    assets = f"cdk-assets-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=assets)
    body = catalog.to_json().encode()
    key = hashlib.sha256(body).hexdigest() + ".json"
    s3.put_object(Bucket=assets, Key=key, Body=body)
    return f"s3://{assets}/{key}"


def _run_job(
    s3, hub: FakeHub, catalog: Catalog, bucket: str, tmp_path: Path, *extra: str
) -> tuple[int, dict[str, str]]:  # noqa: ANN001
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
            "2",
            "--concurrency",
            "2",
            "--part-size-mib",
            "5",
            *extra,
        ]
    )
    return code, {}


def _nothing_partial(s3, bucket: str, key: str) -> None:  # noqa: ANN001
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    versions = s3.list_object_versions(Bucket=bucket, Prefix=key)
    assert versions.get("Versions", []) == [] and versions.get("DeleteMarkers", []) == []


# -- the one definition ---------------------------------------------------------------------------------


def test_keys_are_named_by_identity_and_known_without_the_hub() -> None:
    entry = CatalogEntry(
        name="m-0001", hf_repo="acme/m", file="sub/dir/m-Q4_K_M.gguf", engine_args={"ctx-size": "2048"}
    )
    idhash = identity_hash(entry)
    assert len(idhash) == 16 and int(idhash, 16) >= 0
    assert gguf_key(entry) == f"farm/m-0001/{idhash}/m-Q4_K_M.gguf"  # basename: the pool's preset path is flat
    assert mme_key(entry) == f"farm/m-0001/{idhash}-{engine_args_hash(entry)}.tar.gz"
    assert mme_target_model(entry) == mme_key(entry).removeprefix(FARM_PREFIX)
    # A new revision or sha256 is a new identity (a new key, never a rewrite); new engine flags a new tarball only.
    moved = CatalogEntry(name="m-0001", hf_repo="acme/m", file="sub/dir/m-Q4_K_M.gguf", revision="v2")
    assert identity_hash(moved) != idhash
    flags = CatalogEntry(
        name="m-0001", hf_repo="acme/m", file="sub/dir/m-Q4_K_M.gguf", engine_args={"ctx-size": "4096"}
    )
    assert gguf_key(flags) == gguf_key(entry) and mme_key(flags) != mme_key(entry)
    # TargetModel limits (botocore sagemaker-runtime InvokeEndpoint.TargetModel): 1..1024 characters.
    target = (
        botocore.session.get_session()
        .get_service_model("sagemaker-runtime")
        .operation_model("InvokeEndpoint")
        .input_shape.members["TargetModel"]
    )
    assert target.metadata["min"] <= len(mme_target_model(entry)) <= target.metadata["max"]


def test_the_catalog_round_trips_and_its_fingerprint_follows_the_content() -> None:
    a = CatalogEntry(
        name="a", hf_repo="acme/a", file="a.gguf", token_secret_name="hf/token", engine_args={"threads": "2"}
    )
    b = CatalogEntry(name="b", hf_repo="acme/b", file="b.gguf", sha256="ab" * 32)
    catalog = Catalog((a, b), ("gguf", "mme"))
    assert Catalog.from_json(catalog.to_json()) == catalog
    assert catalog.fingerprint() == Catalog.from_json(catalog.to_json()).fingerprint()
    assert Catalog((a, b), ("gguf",)).fingerprint() != catalog.fingerprint()
    assert catalog.keys(a) == {"gguf": gguf_key(a), "mme": mme_key(a)}


@pytest.mark.parametrize(
    ("catalog", "message"),
    [
        (Catalog(()), "no entries"),
        (Catalog((CatalogEntry("a", "acme/a", "a.gguf"),), ("tar",)), "layouts must be"),
        (Catalog((CatalogEntry("a", "acme/a", "a.gguf"), CatalogEntry("a", "acme/b", "b.gguf"))), "'a' appears twice"),
        (Catalog((CatalogEntry("A_1", "acme/a", "a.gguf"),)), "'A_1': name must be a DNS label"),
        (Catalog((CatalogEntry("a", "acme/a", "../a.gguf"),)), "'a': file must be a path inside the repo"),
        (Catalog((CatalogEntry("a", "acme/a", "a.gguf", engine_args={"--ctx-size": "1"}),)), "without '--'"),
        (
            Catalog((CatalogEntry("a", "acme/a", "a.gguf", engine_args={"ctx-size": 2048}),)),
            r"must be a string, got int \(write '2048'\)",
        ),  # type: ignore[dict-item]
    ],
)
def test_a_bad_catalog_is_refused_in_one_line_naming_the_model(catalog: Catalog, message: str) -> None:
    with pytest.raises(CatalogError, match=message):
        catalog.validate()


def test_a_catalog_file_with_an_unknown_field_is_refused_naming_it() -> None:
    with pytest.raises(CatalogError, match="catalog entry 'a': unknown field\\(s\\) threds"):
        Catalog.from_json(
            json.dumps(
                {
                    "version": 1,
                    "layouts": ["gguf"],
                    "entries": [{"name": "a", "hf_repo": "acme/a", "file": "a.gguf", "threds": "2"}],
                }
            )
        )


# -- the job ----------------------------------------------------------------------------------------------


def test_three_models_land_at_their_keys_then_a_rerun_asks_the_hub_nothing(
    hub, farm_files, s3, bucket, tmp_path
) -> None:  # noqa: ANN001
    entries = (
        _entry("alpha", farm_files["alpha"]),
        _entry("beta", farm_files["beta"]),
        _entry("gamma", farm_files["gamma"]),
    )
    catalog = Catalog(entries, ("gguf",))

    code, exported = _run_job(s3, hub, catalog, bucket, tmp_path)

    assert code == 0 and exported == {}
    # The models' keys and nothing else (no receipt: nothing waits for one; no failure marker).
    assert _keys(s3, bucket) == sorted(gguf_key(e) for e in entries)
    for entry, served in zip(entries, (farm_files["alpha"], farm_files["beta"], farm_files["gamma"]), strict=True):
        assert _object_sha256(s3, bucket, gguf_key(entry)) == served.sha256
        head = s3.head_object(Bucket=bucket, Key=gguf_key(entry))
        assert head["Metadata"]["sha256"] == served.sha256 and head["ContentLength"] == served.size
        assert head["Metadata"]["hf-source"].endswith(f"@{hub.commit}")
    assert gguf_key(entries[2]).endswith("/gamma-Q4.gguf")  # quant/gamma-Q4.gguf lands under its basename
    assert hub.stats.heads >= 3 and hub.stats.bytes_served == sum(
        f.size for f in (farm_files["alpha"], farm_files["beta"], farm_files["gamma"])
    )

    hub.reset()
    code, again = _run_job(s3, hub, catalog, bucket, tmp_path)

    assert code == 0 and again == {}
    assert (hub.stats.heads, hub.stats.gets, hub.stats.bytes_served) == (0, 0, 0)  # S3 HEADs only: the Hub is not asked
    assert len(s3.list_object_versions(Bucket=bucket, Prefix=FARM_PREFIX)["Versions"]) == 3  # nothing rewritten


def test_one_failing_model_fails_the_job_naming_it_and_leaves_its_marker_and_no_partial_object(
    hub,
    farm_files,
    s3,
    bucket,
    tmp_path,
    capsys,  # noqa: ANN001
) -> None:
    alpha, broken, gamma = (
        _entry("alpha", farm_files["alpha"]),
        _entry("broken", farm_files["broken"]),
        _entry("gamma", farm_files["gamma"]),
    )
    missing = CatalogEntry(name="missing", hf_repo="acme-farm/alpha", file="no-such-file.gguf")
    catalog = Catalog((alpha, broken, missing, gamma), ("gguf", "mme"))

    code, exported = _run_job(s3, hub, catalog, bucket, tmp_path)

    assert code == 2 and exported == {}
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(
        "model_download: error: 2 of 4 models failed: broken, missing — broken: sha256 mismatch for acme-farm/broken/broken-Q4.gguf@"
    )
    assert "missing: acme-farm/alpha/no-such-file.gguf@main not found" in err[-1]
    # The broken file was downloaded in full and uploaded in parts, then refused: no object, no upload left over.
    assert hub.stats.bytes_served >= farm_files["broken"].size
    for key in catalog.keys(broken).values():
        _nothing_partial(s3, bucket, key)
    # The others completed, both layouts; each failed model has its marker, and only those.
    markers = {failure_key(broken), failure_key(missing)}
    assert _keys(s3, bucket) == sorted([*(k for e in (alpha, gamma) for k in catalog.keys(e).values()), *markers])
    marker = json.loads(s3.get_object(Bucket=bucket, Key=failure_key(missing))["Body"].read())
    assert marker["model"] == "missing" and marker["attempt"] == 1
    assert marker["reason"] == "acme-farm/alpha/no-such-file.gguf@main not found" or "not found" in marker["reason"]
    # For the mme layout the marker sits beside the tarball, under the same identity hash.
    assert catalog.keys(broken)["mme"].startswith(failure_key(broken).removesuffix("/copy-failed.json") + "-")

    # Fixed upstream (the entry now names the file that exists): the re-run copies only what was missing.
    hub.reset()
    fixed = Catalog((alpha, gamma), ("gguf", "mme"))
    code, exported = _run_job(s3, hub, fixed, bucket, tmp_path)
    assert code == 0 and hub.stats.heads == 0
    assert "0 of 2 models copied" in capsys.readouterr().out


def test_the_job_copies_only_the_catalog_cloudformation_deployed(hub, farm_files, s3, bucket, capsys) -> None:  # noqa: ANN001
    catalog = Catalog((_entry("alpha", farm_files["alpha"]),))
    uri = _publish(s3, catalog)
    code = catalog_main(["--catalog", uri, "--fingerprint", "0" * 64, "--bucket", bucket, "--endpoint", hub.url])
    assert code == 2 and _keys(s3, bucket) == [] and hub.stats.heads == 0
    assert capsys.readouterr().err.strip() == (
        f"model_download: error: the catalog {uri} has fingerprint {catalog.fingerprint()}, not {'0' * 64}: redeploy the stack"
    )


def test_the_mme_layout_is_a_gzip_tarball_of_the_gguf_and_engine_json(hub, farm_files, s3, bucket, tmp_path) -> None:  # noqa: ANN001
    served = farm_files["alpha"]
    entry = _entry("alpha", served, engine_args={"ctx-size": "2048", "parallel": "1", "threads": "2"})
    catalog = Catalog((entry,), ("gguf", "mme"))

    code, _ = _run_job(s3, hub, catalog, bucket, tmp_path)

    assert code == 0
    data = s3.get_object(Bucket=bucket, Key=mme_key(entry))["Body"].read()
    assert data[:2] == b"\x1f\x8b" and gzip.decompress(data)  # a gzip stream, as SageMaker's ModelDataUrl requires
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        names = tar.getnames()
        gguf = tar.extractfile(served.name).read()  # type: ignore[union-attr]
        engine = json.loads(tar.extractfile("engine.json").read())  # type: ignore[union-attr]
    assert names == ["engine.json", "alpha-Q4.gguf"]
    assert hashlib.sha256(gguf).hexdigest() == served.sha256 and gguf[:4] == b"GGUF"
    assert engine == {"ctx-size": "2048", "parallel": "1", "threads": "2"}
    # As SageMaker does before POST /models: extract it into the model's directory; the container's own MME
    # adapter then builds the model's llama-server from exactly these files.
    model_dir = tmp_path / "opt-ml-models" / "alpha" / "model"
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(model_dir, filter="data")
    if str(ENGINE_DIR) not in sys.path:
        sys.path.insert(0, str(ENGINE_DIR))
    from mme_adapter import ChildDefaults, child_config

    child = child_config("alpha", model_dir, ChildDefaults(binary="-", threads=1))
    assert Path(child.model) == model_dir / "alpha-Q4.gguf"
    assert (child.ctx_size, child.parallel, child.threads) == (2048, 1, 2)
    parts = s3.head_object(Bucket=bucket, Key=mme_key(entry), PartNumber=1)["PartsCount"]
    assert parts == -(-len(data) // PART) >= 2  # streamed in 5 MiB parts, not buffered whole
    head = s3.head_object(Bucket=bucket, Key=mme_key(entry))
    assert head["ContentType"] == "application/gzip"
    assert head["Metadata"]["sha256"] == served.sha256 and head["Metadata"]["size"] == str(served.size)
    # Both layouts of one model hold the same bytes from the same commit.
    assert _object_sha256(s3, bucket, gguf_key(entry)) == served.sha256
    assert head["Metadata"]["hf-source"] == s3.head_object(Bucket=bucket, Key=gguf_key(entry))["Metadata"]["hf-source"]


def test_an_mme_copy_that_fails_midway_leaves_nothing(hub, farm_files, s3, bucket) -> None:  # noqa: ANN001
    broken = _entry("broken", farm_files["broken"])
    run = CatalogCopy(
        Catalog((broken,), ("mme",)),
        bucket=bucket,
        s3=s3,
        hubs=Hubs(hub.url, retry=FAST_RETRY),
        concurrency=2,
        part_size=PART,
        log=lambda _l: None,
    ).run()
    assert [f.name for f in run.failures] == ["broken"] and "sha256 mismatch" in run.failures[0].reason
    assert hub.stats.bytes_served >= farm_files["broken"].size  # it got to the end before refusing
    _nothing_partial(s3, bucket, mme_key(broken))
    assert _keys(s3, bucket) == [failure_key(broken)] == [run.failures[0].marker]  # no object; its marker


def test_a_key_holding_other_bytes_is_never_overwritten(hub, farm_files, s3, bucket) -> None:  # noqa: ANN001
    alpha = _entry("alpha", farm_files["alpha"])
    s3.put_object(Bucket=bucket, Key=gguf_key(alpha), Body=b"someone else's file")
    run = CatalogCopy(
        Catalog((alpha,)), bucket=bucket, s3=s3, hubs=Hubs(hub.url, retry=FAST_RETRY), log=lambda _l: None
    ).run()
    assert [f.name for f in run.failures] == ["alpha"] and "not written by the copy job" in run.failures[0].reason
    assert s3.get_object(Bucket=bucket, Key=gguf_key(alpha))["Body"].read() == b"someone else's file"
    assert hub.stats.heads == 0


def test_each_token_secret_is_read_once_and_a_missing_one_fails_only_its_models(hub, fake_hub, s3, bucket) -> None:  # noqa: ANN001
    secrets = boto3.client("secretsmanager")
    name = f"hf/token-{uuid.uuid4().hex[:6]}"
    secrets.create_secret(Name=name, SecretString=json.dumps({"token": GOOD_TOKEN}))
    reads: list[str | None] = []

    def counting(secret: str | None) -> tuple[str | None, str | None]:
        reads.append(secret)
        return read_token(secret)

    gated = [CatalogEntry(name=f"gated-{i}", hf_repo=GATED_REPO, file=FILE, token_secret_name=name) for i in range(3)]
    lost = CatalogEntry(name="lost", hf_repo=GATED_REPO, file=FILE, token_secret_name="hf/no-such-secret")
    run = CatalogCopy(
        Catalog((*gated, lost)),
        bucket=bucket,
        s3=s3,
        hubs=Hubs(hub.url, retry=FAST_RETRY, read_token=counting),
        parallel_models=4,
        concurrency=4,
        log=lambda _l: None,
    ).run()

    assert sorted(reads, key=str) == sorted([name, "hf/no-such-secret"])
    assert [(f.name, f.reason) for f in run.failures] == [
        ("lost", "secret 'hf/no-such-secret' (Hugging Face token) not found")
    ]
    served = fake_hub.files[(GATED_REPO, FILE)]
    assert all(s3.head_object(Bucket=bucket, Key=gguf_key(e))["Metadata"]["sha256"] == served.sha256 for e in gated)
    assert hub.stats.auth_seen_by_cdn == 0  # the token goes to the Hub only


def test_a_stop_aborts_the_copies_in_flight_and_names_what_is_left(hub, farm_files, s3, bucket) -> None:  # noqa: ANN001
    entries = tuple(_entry(n, farm_files[n]) for n in ("alpha", "beta", "gamma"))
    hub.per_connection_rate = 2 * MIB  # seconds per model: time to stop it midway
    stop = threading.Event()
    job = CatalogCopy(
        Catalog(entries, ("gguf", "mme")),
        bucket=bucket,
        s3=s3,
        hubs=Hubs(hub.url, retry=FAST_RETRY),
        parallel_models=1,
        concurrency=2,
        part_size=PART,
        stop=stop,
        log=lambda _l: None,
    )
    outcome: list = []
    worker = threading.Thread(target=lambda: outcome.append(job.run()))
    worker.start()
    while hub.stats.bytes_served < MIB:
        time.sleep(0.05)
    stop.set()  # what SIGTERM does (CodeBuild's timeout, StopBuild)
    worker.join(timeout=60)
    (run,) = outcome
    reasons = {f.name: f.reason for f in run.failures}
    assert sorted(reasons) == ["alpha", "beta", "gamma"] and run.receipts == []
    assert "told to stop" in reasons["alpha"] and not reasons["alpha"].startswith("not started")  # aborted in flight
    assert reasons["beta"].startswith("not started") and reasons["gamma"].startswith("not started")
    assert _keys(s3, bucket) == []  # no object, and no failure marker: a stop is not a failed copy
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


# -- the custom resource and the buildspec ------------------------------------------------------------------


@pytest.fixture
def project(aws_env) -> str:  # noqa: ANN001
    name = f"model-catalog-{uuid.uuid4().hex[:8]}"
    boto3.client("codebuild").create_project(
        name=name,
        source={"type": "S3", "location": "cdk-assets-bucket/model_download.zip", "buildspec": "version: 0.2"},
        artifacts={"type": "NO_ARTIFACTS"},
        environment={
            "type": "LINUX_CONTAINER",
            "image": "aws/codebuild/amazonlinux-x86_64-standard:5.0",
            "computeType": "BUILD_GENERAL1_LARGE",
        },
        serviceRole="arn:aws:iam::123456789012:role/model-catalog",
    )
    return name


def _run_buildspec(env: dict[str, str], workdir: Path) -> subprocess.CompletedProcess[str]:
    """The catalog buildspec's commands in one bash, as CodeBuild runs them."""
    spec = CATALOG_BUILD_SPEC
    commands = [*spec["phases"]["install"]["commands"], *spec["phases"]["build"]["commands"]]
    bin_dir = str(Path(sys.executable).parent)
    return subprocess.run(
        ["bash", "-c", "set -e\n" + "\n".join(commands)],
        cwd=workdir,
        env={**env, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_build_started_by_hand_copies_the_whole_catalog(hub, farm_files, aws_env, s3, bucket, tmp_path) -> None:  # noqa: ANN001
    """`aws codebuild start-build` without overrides: the project's environment alone copies every entry."""
    catalog = Catalog((_entry("alpha", farm_files["alpha"]), _entry("beta", farm_files["beta"])), ("gguf",))
    asset_bucket, asset_key = _publish(s3, catalog)[5:].split("/", 1)
    project_env = catalog_environment(
        bucket=bucket,
        catalog_bucket=asset_bucket,
        catalog_key=asset_key,
        fingerprint=catalog.fingerprint(),
        hf_endpoint=hub.url,
    )
    env = {**os.environ, **aws_env, **{e["name"]: e["value"] for e in project_env}}
    env.pop("CATALOG_NAMES", None)
    done = _run_buildspec(env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "model_download: catalog done: 2 of 2 models copied" in done.stdout
    assert _keys(s3, bucket) == sorted(gguf_key(e) for e in catalog.entries)


def test_the_retired_catalog_resource_only_answers_its_delete() -> None:
    """A stack deployed before the fan-out still holds a Custom::ModelCatalog; upgrading deletes it through the
    stack's copy provider, which routes it here (CatalogKey in its properties). Delete keeps every object."""
    props = {"ServiceToken": "t", "ProjectName": "p", "Bucket": "b", "CatalogBucket": "c", "CatalogKey": "k"}
    delete = {"RequestType": "Delete", "ResourceProperties": props, "PhysicalResourceId": "s3://b/farm/_receipts/x"}
    assert on_event(delete) == {"PhysicalResourceId": "s3://b/farm/_receipts/x"}
    assert is_complete(delete) == {"IsComplete": True}
    for request in ("Create", "Update"):
        with pytest.raises(RuntimeError, match="Custom::ModelCatalog is retired"):
            on_event({"RequestType": request, "ResourceProperties": props, "PhysicalResourceId": "x"})
    assert catalog_resource.RETIRED.startswith("Custom::ModelCatalog is retired")


def test_sigterm_to_the_job_aborts_its_uploads_and_names_every_model_left(hub, farm_files, aws_env, s3, bucket) -> None:  # noqa: ANN001
    """What CodeBuild does at the job's timeout or on StopBuild: SIGTERM to the real `python -m model_download`."""
    import signal
    import subprocess
    import sys

    catalog = Catalog(tuple(_entry(n, farm_files[n]) for n in ("alpha", "beta", "gamma")), ("gguf", "mme"))
    uri = _publish(s3, catalog)
    hub.per_connection_rate = 2 * MIB
    job = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "model_download",
            "catalog",
            "--catalog",
            uri,
            "--fingerprint",
            catalog.fingerprint(),
            "--bucket",
            bucket,
            "--endpoint",
            hub.url,
            "--parallel-models",
            "2",
            "--concurrency",
            "2",
            "--part-size-mib",
            "5",
        ],
        env={**os.environ, **aws_env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while hub.stats.bytes_served < 2 * MIB and time.monotonic() < deadline:
        time.sleep(0.05)
    job.send_signal(signal.SIGTERM)
    _, err = job.communicate(timeout=60)

    assert job.returncode == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("model_download: error: 3 of 3 models failed: alpha, beta, gamma — "), last
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == [] and _keys(s3, bucket) == []
