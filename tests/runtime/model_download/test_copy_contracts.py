"""Contracts of the copy job with its two services, against real servers (the fake Hub over HTTP → moto's S3):

- the Hub's rate limits (429 with `RateLimit` / `Retry-After`, 5-minute windows) are waited out, not given up on
  after a minute; a catalog entry is resolved with ONE HEAD;
- a catalog with both layouts reads the Hub once (the MME tarball is built from the GGUF object just written to
  S3) and uploads the tarball's parts from a small bounded pool;
- a vLLM snapshot copies every file transformers/vLLM load (processor, slow-tokenizer, Mistral files) and refuses
  a repo that needs its own Python code (`auto_map`) unless that is opted in;
- S3's conditional writes: 409 ConditionalRequestConflict (retry a PutObject once; after CompleteMultipartUpload
  accept the key only if it holds the expected sha256), 412 requires the key to hold these bytes, 403 on HEAD is
  "access denied" unless a listing shows the key is absent;
- Hub mirrors: no X-Repo-Commit with a full-commit revision, Content-Length of a redirect is not the file's size.

S3 answers moto never gives (409, a 403 HEAD) come from `ScriptedS3`: the real moto client, with one scripted
answer in the shape botocore raises for it."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from model_download import CopyRequest, DownloadError, Hub, HubError, RetryPolicy, copy_model
from model_download.catalog import Catalog, CatalogEntry, gguf_key, mme_key
from model_download.catalog_copy import CatalogCopy, Hubs
from model_download.copy import MIB
from model_download.hub import RATE_LIMIT_WINDOW_SECONDS, FileRef
from model_download.repo_info import RepoFile, list_repo
from model_download.snapshot import SnapshotRequest, copy_snapshot
from model_download.snapshot_files import copy_file
from model_download.snapshot_select import SnapshotError, select
from model_download.tarball import UPLOAD_WORKERS
from tests.runtime.model_download.constants import FILE, PUBLIC_REPO
from tests.runtime.model_download.fake_hub import FakeHub, ServedFile
from tests.runtime.model_download.snapshot_repo import SELECTED, SKIPPED, SnapshotRepo

FAST_RETRY = RetryPolicy(attempts=3, backoff_seconds=0.01, max_backoff_seconds=0.02)
PART = 5 * MIB


class Waits(list):
    """The injected wait: records each delay instead of sleeping (a rate-limit window is minutes long)."""

    def __call__(self, seconds: float, stop: threading.Event | None) -> bool:
        self.append(seconds)
        return False


def _hub(fake: FakeHub, waits: Waits | None = None) -> Hub:
    if waits is None:
        return Hub(fake.url, retry=FAST_RETRY)
    return Hub(fake.url, retry=FAST_RETRY, wait=waits)


def _request(bucket: str, **kw: Any) -> CopyRequest:
    return CopyRequest(
        repo=PUBLIC_REPO, file=FILE, bucket=bucket, key_prefix="models/smollm2", concurrency=4, part_size=8 * MIB, **kw
    )


def _sha256_of_object(s3, bucket: str, key: str) -> str:  # noqa: ANN001
    return hashlib.sha256(s3.get_object(Bucket=bucket, Key=key)["Body"].read()).hexdigest()


def _client_error(operation: str, status: int, code: str, message: str = "") -> ClientError:
    """What botocore raises for an S3 error status (HEAD has no body: its code is the status, e.g. "403")."""
    return ClientError(
        {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}, operation
    )


class ScriptedS3:
    """The moto client, except for the operations given a script: each call pops the next scripted action (a
    callable run before the call, which may raise), then the real call runs."""

    def __init__(self, s3, **scripts: list) -> None:  # noqa: ANN001
        self._s3 = s3
        self._scripts = {op: list(actions) for op, actions in scripts.items()}
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._s3, name)
        if name not in self._scripts:
            return real

        def call(**kwargs: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            if self._scripts[name]:
                self._scripts[name].pop(0)(kwargs)
            return real(**kwargs)

        return call


# -- 6: Hub rate limits ----------------------------------------------------------------------------------

RESOLVERS_POLICY = '"fixed window";"resolvers";q=3000;w=300'  # huggingface_hub utils/_http.py parse_ratelimit_headers


def test_a_429_with_ratelimit_waits_until_the_window_resets(hub, served, s3, bucket) -> None:  # noqa: ANN001
    # A 429 early in a 5-minute window (HF docs hub/rate-limits) says so: `t` = seconds until it resets.
    hub.throttle(
        "resolve",
        {"RateLimit": '"resolvers";r=0;t=240', "RateLimit-Policy": RESOLVERS_POLICY},
        {"RateLimit": '"resolvers";r=0;t=50', "RateLimit-Policy": RESOLVERS_POLICY},
    )
    waits = Waits()

    result = copy_model(_request(bucket), hub=_hub(hub, waits), s3=s3)

    assert waits == [241, 51]  # the server's seconds + 1, as huggingface_hub waits (no guessing, no giving up)
    assert result.copied and _sha256_of_object(s3, bucket, result.key) == served.sha256


def test_retry_after_is_honoured_and_429s_do_not_use_up_the_attempts(hub, s3, bucket) -> None:  # noqa: ANN001
    hub.throttle("resolve", {"Retry-After": "120"}, *({} for _ in range(6)))  # then 6 bare 429s: > attempts (3)
    waits = Waits()

    result = copy_model(_request(bucket), hub=_hub(hub, waits), s3=s3)

    assert result.copied and waits[0] == 121 and len(waits) == 7
    assert sum(waits) <= RetryPolicy().rate_limit_seconds


def test_a_rate_limit_longer_than_the_budget_fails_in_one_line_naming_the_token(hub, s3, bucket) -> None:  # noqa: ANN001
    limited = {"RateLimit": '"resolvers";r=0;t=290', "RateLimit-Policy": RESOLVERS_POLICY}
    hub.throttle("resolve", limited, limited)
    waits = Waits()

    with pytest.raises(HubError) as err:
        copy_model(_request(bucket), hub=_hub(hub, waits), s3=s3)

    message = str(err.value)
    assert waits == [291]  # the second wait would pass the budget: fail now instead of sleeping past it
    assert "HTTP 429" in message and "'resolvers' rate limit" in message and "token_secret_name" in message
    assert "\n" not in message and hub.stats.gets == 0
    assert RetryPolicy().rate_limit_seconds >= RATE_LIMIT_WINDOW_SECONDS  # a whole window fits the budget


def test_the_model_info_api_and_the_cdn_honour_rate_limits_too(hub, snap_hub, served, s3, bucket) -> None:  # noqa: ANN001
    from tests.runtime.model_download.snapshot_repo import REPO

    snap_hub.reset()
    snap_hub.throttle("api", {"RateLimit": '"api";r=0;t=100', "RateLimit-Policy": '"fixed window";"api";q=500;w=300'})
    waits = Waits()
    listing = list_repo(_hub(snap_hub, waits), REPO, "main")
    assert waits == [101] and listing.commit == snap_hub.commit_of(REPO)

    hub.fail(0, 429, times=1, headers={"Retry-After": "30"})  # the CDN's ranged GET of the first part
    waits = Waits()
    info = _hub(hub).info(FileRef(PUBLIC_REPO, FILE))
    data = _hub(hub, waits).open(info).read_range(0, MIB - 1)
    assert waits == [31] and bytes(data) == served.path.read_bytes()[:MIB]


# -- 6 + 7: a catalog entry is resolved once and read from the Hub once ---------------------------------------


@pytest.fixture(scope="module")
def farm_file(fake_hub: FakeHub, smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> ServedFile:
    """31 MiB of the real GGUF (its real header): a tarball of 7 parts of 5 MiB."""
    path = tmp_path_factory.mktemp("farm-contracts") / "delta-Q4.gguf"
    with open(smollm2_gguf, "rb") as src:
        path.write_bytes(src.read(31 * MIB))
    return fake_hub.add_file("acme-farm/delta", "delta-Q4.gguf", path)


def test_both_layouts_ask_the_hub_once_and_read_its_bytes_once(hub, farm_file, s3, bucket) -> None:  # noqa: ANN001
    entry = CatalogEntry(name="delta", hf_repo=farm_file.repo, file=farm_file.name, engine_args={"ctx-size": "2048"})
    catalog = Catalog((entry,), ("mme", "gguf"))  # the tarball is listed first: the GGUF is still written first

    run = CatalogCopy(
        catalog,
        bucket=bucket,
        s3=s3,
        hubs=Hubs(hub.url, retry=FAST_RETRY),
        concurrency=2,
        part_size=PART,
        log=lambda _l: None,
    ).run()

    assert run.failures == [] and run.receipts[0].copied == ("gguf", "mme")
    assert hub.stats.heads == 1  # one resolve per model: copy_model reuses the catalog's FileInfo
    assert hub.stats.bytes_served == farm_file.size  # once: the tarball was read back from S3, not the Hub
    assert _sha256_of_object(s3, bucket, gguf_key(entry)) == farm_file.sha256
    with tarfile.open(
        fileobj=io.BytesIO(s3.get_object(Bucket=bucket, Key=mme_key(entry))["Body"].read()), mode="r:gz"
    ) as tar:
        member = tar.extractfile(farm_file.name).read()  # type: ignore[union-attr]
    assert hashlib.sha256(member).hexdigest() == farm_file.sha256


def test_tarball_parts_upload_in_parallel_from_a_bounded_pool(hub, farm_file, s3, bucket) -> None:  # noqa: ANN001
    in_flight, peak, lock = [0], [0], threading.Lock()

    def slow_upload(_kwargs: dict) -> None:
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        time.sleep(0.3)
        with lock:
            in_flight[0] -= 1

    scripted = ScriptedS3(s3, upload_part=[slow_upload] * 100)
    entry = CatalogEntry(name="delta", hf_repo=farm_file.repo, file=farm_file.name)
    run = CatalogCopy(
        Catalog((entry,), ("mme",)),
        bucket=bucket,
        s3=scripted,
        hubs=Hubs(hub.url, retry=FAST_RETRY),
        concurrency=2,
        part_size=PART,
        log=lambda _l: None,
    ).run()

    assert run.failures == [] and scripted.calls["upload_part"] == 7
    assert 2 <= peak[0] <= UPLOAD_WORKERS  # parallel, and never more than the pool (memory: parts in flight)
    with tarfile.open(
        fileobj=io.BytesIO(s3.get_object(Bucket=bucket, Key=mme_key(entry))["Body"].read()), mode="r:gz"
    ) as tar:
        assert hashlib.sha256(tar.extractfile(farm_file.name).read()).hexdigest() == farm_file.sha256  # type: ignore[union-attr]


# -- 9: what a vLLM snapshot copies ----------------------------------------------------------------------------

REMOTE = "acme-corp/tiny-remote-code"
EXTRA = {  # transformers / vLLM load these when present (sources in snapshot_select)
    "preprocessor_config.json": False,
    "processor_config.json": False,
    "video_preprocessor_config.json": False,
    "vocab.txt": False,
    "spiece.model": True,
    "sentencepiece.bpe.model": True,
    "tekken.json": True,
    "params.json": False,
}
CODE = {"configuration_tiny.py": False, "modeling_tiny.py": False, "tokenization_tiny.py": False}


@pytest.fixture(scope="module")
def remote_code_repo(snap_hub: FakeHub, checkpoint: SnapshotRepo, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny checkpoint with its own model code (`auto_map` in config.json), processor and tokenizer files."""
    root = tmp_path_factory.mktemp("remote-code")
    for name in {**SELECTED, **SKIPPED}:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(checkpoint.path(name), root / name)
    config = json.loads((root / "config.json").read_text())
    config["auto_map"] = {
        "AutoConfig": "configuration_tiny.TinyConfig",
        "AutoModelForCausalLM": "modeling_tiny.TinyForCausalLM",
    }
    (root / "config.json").write_text(json.dumps(config))
    for name in [*EXTRA, *CODE, "sub/helper.py"]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"# {name}\n")
    for name, lfs in {**SELECTED, **SKIPPED, **EXTRA, **CODE, "sub/helper.py": False}.items():
        snap_hub.add_file(REMOTE, name, root / name, lfs=lfs)
    return root


def _files(*names: str) -> tuple[RepoFile, ...]:
    return tuple(RepoFile(n, 10, None, "0" * 40) for n in names)


def test_processor_slow_tokenizer_and_mistral_files_are_selected() -> None:
    files = _files(
        "model.safetensors", "config.json", *EXTRA, "tokenizer.model.v3", "README.md", "sub/vocab.txt", "convert.py"
    )
    chosen = {f.path for f in select(files, "acme/x")}
    assert chosen == {"model.safetensors", "config.json", *EXTRA, "tokenizer.model.v3"}
    # A repo's *.py only with code=True (a trusted repo whose config has auto_map), and only at its root.
    assert {f.path for f in select(files, "acme/x", code=True)} == chosen | {"convert.py"}


def test_a_repo_with_its_own_code_is_refused_in_one_line_unless_opted_in(
    snap_hub, remote_code_repo, s3, bucket
) -> None:  # noqa: ANN001
    snap_hub.reset()
    req = SnapshotRequest(repo=REMOTE, bucket=bucket, key_prefix="models/remote", concurrency=2, part_size=PART)

    with pytest.raises(SnapshotError) as err:
        copy_snapshot(req, hub=_hub(snap_hub), s3=s3)
    message = str(err.value)
    assert message.startswith(f"{REMOTE}@main ({snap_hub.commit_of(REMOTE)}): config.json has auto_map")
    assert "trust_remote_code" in message and "\n" not in message
    assert s3.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0  # refused before a single object was written

    trusted = SnapshotRequest(
        repo=REMOTE, bucket=bucket, key_prefix="models/remote", concurrency=2, part_size=PART, trust_remote_code=True
    )
    result = copy_snapshot(trusted, hub=_hub(snap_hub), s3=s3)
    landed = {f.path for f in result.files}
    assert landed == {*SELECTED, *EXTRA, *CODE}  # the root *.py too; never sub/helper.py
    for name in [*EXTRA, *CODE, "config.json"]:
        digest = hashlib.sha256((remote_code_repo / name).read_bytes()).hexdigest()
        assert _sha256_of_object(s3, bucket, result.prefix + name) == digest


# -- 10 / 11: S3 conditional writes ------------------------------------------------------------------------------


def test_a_putobject_409_is_retried_once(snap_hub, checkpoint, s3, bucket) -> None:  # noqa: ANN001
    from tests.runtime.model_download.snapshot_repo import REPO

    def conflict(_kwargs: dict) -> None:
        raise _client_error("PutObject", 409, "ConditionalRequestConflict", "A conflicting operation is in progress")

    scripted = ScriptedS3(s3, put_object=[conflict])
    served = snap_hub.files[(REPO, "config.json")]
    f = RepoFile("config.json", served.size, None, served.git_sha1)
    landed = copy_file(
        f,
        hub=_hub(snap_hub),
        s3=scripted,
        repo=REPO,
        commit=snap_hub.commit_of(REPO),
        bucket=bucket,
        prefix="models/tiny/",
        concurrency=1,
        part_size=None,
    )

    assert landed.copied and scripted.calls["put_object"] == 2
    assert (
        s3.get_object(Bucket=bucket, Key="models/tiny/config.json")["Body"].read()
        == checkpoint.path("config.json").read_bytes()
    )


def test_a_complete_409_accepts_the_key_when_the_other_run_wrote_these_bytes(hub, served, s3, bucket) -> None:  # noqa: ANN001
    key = f"models/smollm2/{FILE}"

    def the_other_run_completes_first(_kwargs: dict) -> None:
        s3.put_object(Bucket=bucket, Key=key, Body=served.path.read_bytes(), Metadata={"sha256": served.sha256})
        raise _client_error("CompleteMultipartUpload", 409, "ConditionalRequestConflict")

    scripted = ScriptedS3(s3, complete_multipart_upload=[the_other_run_completes_first])
    result = copy_model(_request(bucket), hub=_hub(hub), s3=scripted)

    assert not result.copied and result.key == key and result.sha256 == served.sha256
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_a_complete_409_with_nothing_at_the_key_fails_and_leaves_nothing(hub, s3, bucket) -> None:  # noqa: ANN001
    def conflict(_kwargs: dict) -> None:
        raise _client_error("CompleteMultipartUpload", 409, "ConditionalRequestConflict")

    with pytest.raises(DownloadError, match="run again"):
        copy_model(_request(bucket), hub=_hub(hub), s3=ScriptedS3(s3, complete_multipart_upload=[conflict]))
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert s3.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0


def test_a_412_with_nothing_at_the_key_is_not_a_success(hub, s3, bucket) -> None:  # noqa: ANN001
    def taken_then_gone(_kwargs: dict) -> None:  # S3 said "exists"; by the HEAD it was deleted
        raise _client_error(
            "CompleteMultipartUpload",
            412,
            "PreconditionFailed",
            "At least one of the pre-conditions you specified did not hold",
        )

    with pytest.raises(DownloadError, match=r"does not hold a complete object"):
        copy_model(_request(bucket), hub=_hub(hub), s3=ScriptedS3(s3, complete_multipart_upload=[taken_then_gone]))
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_a_tarball_refused_by_s3_with_nothing_at_its_key_fails_its_model(hub, farm_file, s3, bucket) -> None:  # noqa: ANN001
    def taken_then_gone(_kwargs: dict) -> None:
        raise _client_error("CompleteMultipartUpload", 412, "PreconditionFailed")

    entry = CatalogEntry(name="delta", hf_repo=farm_file.repo, file=farm_file.name)
    scripted = ScriptedS3(s3, complete_multipart_upload=[taken_then_gone])
    run = CatalogCopy(
        Catalog((entry,), ("mme",)),
        bucket=bucket,
        s3=scripted,
        hubs=Hubs(hub.url, retry=FAST_RETRY),
        concurrency=2,
        part_size=PART,
        log=lambda _l: None,
    ).run()

    assert [f.name for f in run.failures] == ["delta"] and "does not hold a complete object" in run.failures[0].reason
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_a_403_on_head_of_an_existing_key_is_access_denied_not_absent(hub, served, s3, bucket) -> None:  # noqa: ANN001
    first = copy_model(_request(bucket), hub=_hub(hub), s3=s3)
    hub.reset()

    def denied(_kwargs: dict) -> None:
        raise _client_error("HeadObject", 403, "403", "Forbidden")

    with pytest.raises(DownloadError) as err:
        copy_model(_request(bucket), hub=_hub(hub), s3=ScriptedS3(s3, head_object=[denied]))
    assert f"access denied reading s3://{bucket}/{first.key} (HTTP 403 on HeadObject" in str(err.value)
    assert hub.stats.gets == 0


def test_a_403_on_head_of_a_missing_key_is_absent_when_the_listing_says_so(hub, served, s3, bucket) -> None:  # noqa: ANN001
    def denied(_kwargs: dict) -> None:  # a role whose s3:ListBucket S3 did not apply to the HEAD
        raise _client_error("HeadObject", 403, "403", "Forbidden")

    scripted = ScriptedS3(s3, head_object=[denied])
    result = copy_model(_request(bucket), hub=_hub(hub), s3=scripted)
    assert result.copied and _sha256_of_object(s3, bucket, result.key) == served.sha256


# -- 14: Hub mirrors -----------------------------------------------------------------------------------------------


def test_a_mirror_without_x_repo_commit_pins_to_a_revision_that_is_already_a_commit(hub, served, s3, bucket) -> None:  # noqa: ANN001
    hub.omit_headers = {"X-Repo-Commit"}
    commit = hub.commit

    result = copy_model(_request(bucket, revision=commit, pin_commit=True), hub=_hub(hub), s3=s3)
    assert result.commit == commit and result.key == f"models/smollm2/{commit}/{FILE}"

    with pytest.raises(DownloadError, match="reported no commit"):  # a branch still needs the Hub to say which commit
        copy_model(_request(bucket, pin_commit=True), hub=_hub(hub), s3=s3)

    entry = CatalogEntry(name="smol", hf_repo=PUBLIC_REPO, file=FILE, revision=commit)
    run = CatalogCopy(
        Catalog((entry,)), bucket=bucket, s3=s3, hubs=Hubs(hub.url, retry=FAST_RETRY), log=lambda _l: None
    ).run()
    assert run.failures == [] and run.receipts[0].commit == commit


def test_the_content_length_of_a_redirect_is_not_the_files_size(hub, s3, bucket) -> None:  # noqa: ANN001
    hub.omit_headers = {"X-Linked-Size"}  # the 302's Content-Length is its own short body

    with pytest.raises(HubError, match=r"reported no size for the file"):
        copy_model(_request(bucket), hub=_hub(hub), s3=s3)
    assert hub.stats.gets == 0
