"""`cpu-inference farm status`: each catalog model landed / copy_failed / copying, read from moto's real S3 server.

The catalog is the one the synthesized app copies (pinned against ModelFarm's own below); the keys come from
model_download.catalog (gguf_key, mme_key, failure_key) and the marker is written as the copy job writes it
(catalog_copy.CatalogCopy.mark_failed: JSON {"model", "reason", "attempt", "at"})."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import boto3
import pytest

from cpu_inference.app import build_app
from cpu_inference.cli import farm_status
from cpu_inference.cli.main import main
from cpu_inference.config import load
from cpu_inference.patterns.model_farm import ModelFarm
from model_download.catalog import Catalog, failure_key, gguf_key, mme_key, mme_target_model
from tests.support.farm_config import example, thousand_model_farm

ROOT = Path(__file__).resolve().parents[2]
EKS = example("eks")
SAGEMAKER = example("sagemaker")
REASON = "hub: 404 Not Found for acme/missing-GGUF/x.gguf@main"


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto logs every request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def aws(moto_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """Fake credentials and botocore's own endpoint setting for S3, as a user would set them; no profile files."""
    for k in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL", "AWS_REGION"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", moto_url)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return moto_url


@pytest.fixture
def bucket(aws: str) -> str:
    name = f"farm-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=aws).create_bucket(Bucket=name)
    return name


def s3(aws: str):  # noqa: ANN201 - boto3's client
    return boto3.client("s3", endpoint_url=aws)


def catalog_of(config: Path) -> Catalog:
    catalog = farm_status.farm_catalog(load(config))
    assert catalog is not None
    return catalog


def put_landed(aws: str, bucket: str, catalog: Catalog, name: str) -> None:
    for key in catalog.keys(catalog.entry(name)).values():
        s3(aws).put_object(Bucket=bucket, Key=key, Body=b"GGUF")


def put_marker(aws: str, bucket: str, catalog: Catalog, name: str, reason: str = REASON) -> None:
    body = {"model": name, "reason": reason, "attempt": 2, "at": "2025-01-01T00:00:00Z"}
    s3(aws).put_object(Bucket=bucket, Key=failure_key(catalog.entry(name)), Body=json.dumps(body).encode())


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["farm", "status", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def rows(table: str) -> dict[str, list[str]]:
    """model -> [keys landed, state, reason] from the table (columns split on 2+ spaces)."""
    import re

    lines = table.splitlines()
    assert lines[0].split() == ["model", "keys", "landed", "state", "reason"]
    out = {}
    for line in lines[1:]:
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) >= 3 and cells[2] in farm_status.STATES:
            out[cells[0]] = cells[1:]
    return out


def components_config(tmp_path: Path) -> Path:
    """The SageMaker example with its dedicated model as an inference component (read from the catalog's tarball)."""
    import yaml

    data = yaml.safe_load(SAGEMAKER.read_text())
    data["farm"]["dedicated_hosting"] = "inference_components"
    data.setdefault("sagemaker", {})["network_isolation"] = False
    path = tmp_path / "components.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("which", ["eks", "sagemaker", "sagemaker-components"])
def test_the_status_catalog_is_the_one_the_app_deploys(which: str, tmp_path: Path) -> None:
    """The entries, their layouts and engine_args (so every key) are those of the ModelFarm construct the app builds."""
    config = {"eks": EKS, "sagemaker": SAGEMAKER}.get(which) or components_config(tmp_path)
    _, stack = build_app(load(config), app=cdk.App(outdir=str(tmp_path)))
    farm = stack.node.find_child("ModelFarm")
    assert isinstance(farm, ModelFarm) and farm.catalog is not None
    deployed = farm.catalog.catalog
    ours = catalog_of(config)
    assert ours == deployed
    assert [ours.keys(e) for e in ours.entries] == [deployed.keys(e) for e in deployed.entries]
    dedicated = {m.name for m in farm.props.dedicated_in_catalog}
    assert dedicated and {e.name for e in ours.entries[: len(dedicated)]} == dedicated


def test_landed_failed_and_copying_models_in_the_table(
    aws: str, bucket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    catalog = catalog_of(EKS)
    names = [e.name for e in catalog.entries]
    landed, failed = names[:5], names[5]
    for name in landed:
        put_landed(aws, bucket, catalog, name)
    put_marker(aws, bucket, catalog, failed)
    put_landed(aws, bucket, catalog, names[6])  # a landed model whose old marker stays: the GGUF wins
    put_marker(aws, bucket, catalog, names[6], "an earlier attempt")

    code, out, _ = cli(capsys, str(EKS), "--bucket", bucket)

    assert code == farm_status.EXIT_FAILED == 4
    table = rows(out)
    assert set(table) == set(names)
    assert table[failed] == ["gguf:no", "copy_failed", REASON]
    for name in [*landed, names[6]]:
        assert table[name] == ["gguf:yes", "landed"]
    for name in names[7:]:
        assert table[name] == ["gguf:no", "copying"]
    assert out.splitlines()[1].split()[0] == failed  # what needs attention first
    n = len(names)
    assert out.splitlines()[-1] == f"6 of {n} landed, 1 failed, {n - 7} copying"


def test_json_on_sagemaker_names_the_tarballs_and_their_target_models(
    aws: str, bucket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """SageMaker: pooled models are `mme` tarballs (TargetModel = key without farm/), dedicated ones a GGUF."""
    catalog = catalog_of(SAGEMAKER)
    dedicated = [e for e in catalog.entries if e.layouts == ("gguf",)]
    pooled = [e for e in catalog.entries if e.layouts is None]
    assert dedicated and len(pooled) >= 3
    put_landed(aws, bucket, catalog, dedicated[0].name)
    put_landed(aws, bucket, catalog, pooled[0].name)
    put_marker(aws, bucket, catalog, pooled[1].name)

    code, out, _ = cli(capsys, str(SAGEMAKER), "--bucket", bucket, "--json")

    data = json.loads(out)
    assert code == data["exit_code"] == 4
    by = {m["model"]: m for m in data["models"]}
    assert [m["model"] for m in data["models"]] == [e.name for e in catalog.entries]
    assert by[dedicated[0].name]["state"] == "landed"
    assert by[dedicated[0].name]["keys"] == {"gguf": {"key": gguf_key(dedicated[0]), "landed": True}}
    assert by[pooled[0].name]["keys"] == {"mme": {"key": mme_key(pooled[0]), "landed": True}}
    assert by[pooled[0].name]["target_model"] == mme_target_model(pooled[0])
    assert by[pooled[1].name] | {"keys": None} == {
        "model": pooled[1].name,
        "state": "copy_failed",
        "keys": None,
        "marker": failure_key(pooled[1]),
        "target_model": mme_target_model(pooled[1]),
        "reason": REASON,
        "attempt": 2,
        "at": "2025-01-01T00:00:00Z",
    }
    assert by[pooled[2].name]["state"] == "copying"
    n = len(catalog.entries)
    assert data["summary"] == {"total": n, "landed": 2, "failed": 1, "copying": n - 3}


def test_exit_codes_all_landed_and_still_copying(aws: str, bucket: str, capsys: pytest.CaptureFixture[str]) -> None:
    catalog = catalog_of(EKS)
    a, b = catalog.entries[0].name, catalog.entries[-1].name
    put_landed(aws, bucket, catalog, a)

    code, out, _ = cli(capsys, str(EKS), "--bucket", bucket, "--model", a)
    assert code == farm_status.EXIT_LANDED == 0
    assert out.splitlines()[-1] == "1 of 1 landed, 0 failed, 0 copying"

    code, out, _ = cli(capsys, str(EKS), "--bucket", bucket, "--model", a, "--model", b)
    assert code == farm_status.EXIT_COPYING == 3
    assert rows(out)[b] == ["gguf:no", "copying"]
    assert out.splitlines()[-1] == "1 of 2 landed, 0 failed, 1 copying"


def test_wait_returns_once_the_last_copy_lands(
    aws: str, bucket: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog = catalog_of(EKS)
    a, b = catalog.entries[-2].name, catalog.entries[-1].name
    put_landed(aws, bucket, catalog, a)
    # b lands 1 s after the first check has seen it copying (not 1 s after the command starts: on a loaded machine
    # the CLI's own start-up can take longer than that, and the first check would already see it landed).
    checks: list[float] = []
    lands = threading.Timer(1.0, put_landed, (aws, bucket, catalog, b))
    real_check = farm_status.check

    def check(*args: Any, **kwargs: Any) -> Any:
        result = real_check(*args, **kwargs)
        if not checks:
            lands.start()
        checks.append(time.monotonic())
        return result

    monkeypatch.setattr(farm_status, "check", check)
    try:
        code, out, err = cli(
            capsys, str(EKS), "--bucket", bucket, "--model", a, "--model", b, "--wait", "--interval", "0.2"
        )
    finally:
        lands.cancel()
    assert code == 0
    assert 1.0 <= checks[-1] - checks[0] < 30
    progress = err.splitlines()
    assert progress[0].startswith("farm status: 1 of 2 landed, 0 failed, 1 copying (after ")
    assert progress[-1].startswith("farm status: 2 of 2 landed, 0 failed, 0 copying (after ")
    assert out.splitlines()[-1] == "2 of 2 landed, 0 failed, 0 copying"


def test_wait_times_out_with_a_model_still_copying(aws: str, bucket: str, capsys: pytest.CaptureFixture[str]) -> None:
    name = catalog_of(EKS).entries[0].name
    began = time.monotonic()
    code, out, err = cli(
        capsys, str(EKS), "--bucket", bucket, "--model", name, "--wait", "--timeout", "1", "--interval", "0.3", "--json"
    )
    assert code == 3
    assert 1.0 <= time.monotonic() - began < 30
    data = json.loads(out)
    assert data["timed_out"] is True and data["summary"]["copying"] == 1
    assert "--timeout 1 s passed with models still copying" in err


def test_wait_stops_at_a_failure_without_waiting_for_the_timeout(
    aws: str, bucket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    catalog = catalog_of(EKS)
    name = catalog.entries[0].name
    put_marker(aws, bucket, catalog, name)
    began = time.monotonic()
    code, _, _ = cli(capsys, str(EKS), "--bucket", bucket, "--model", name, "--wait", "--timeout", "60")
    assert code == 4
    assert time.monotonic() - began < 30


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--model", "bge-smal-en"],
            "--model bge-smal-en: no such model in {config} (20 in its catalog) — did you mean bge-small-en?",
        ),
        (["--timeout", "5"], "--timeout and --interval go with --wait"),
        (["--wait", "--interval", "0"], "--timeout must be ≥ 0 and --interval > 0 seconds"),
    ],
)
def test_user_errors_are_one_line(
    aws: str, bucket: str, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = cli(capsys, str(EKS), "--bucket", bucket, *argv)
    assert code == 2 and out == ""
    assert err == f"cpu-inference farm: {message.format(config=EKS)}\n"


def test_a_config_that_is_not_a_model_farm_is_refused(aws: str, capsys: pytest.CaptureFixture[str]) -> None:
    config = example("eks").with_name("slm-prefilter-eks.yaml")
    code, _, err = cli(capsys, str(config), "--bucket", "any-bucket")
    assert code == 2
    assert err == (
        f"cpu-inference farm: {config}: pattern is slm-prefilter; farm status reads a model-farm config "
        "(its catalog of pooled and dedicated models)\n"
    )


def test_a_missing_bucket_and_missing_credentials_name_the_fix(
    aws: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, err = cli(capsys, str(EKS), "--bucket", "no-such-farm-bucket")
    assert code == 2
    assert err.startswith(
        "cpu-inference farm: --bucket no-such-farm-bucket: no such bucket — give the farm's model bucket"
    )
    assert len(err.splitlines()) == 1

    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(k)
    code, _, err = cli(capsys, str(EKS), "--bucket", "no-such-farm-bucket")
    assert code == 2
    assert err.startswith("cpu-inference farm: no AWS credentials found (botocore's default chain): set AWS_PROFILE")
    assert len(err.splitlines()) == 1


def test_access_denied_names_the_permissions(
    aws: str, bucket: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """moto enforces IAM once its auth is on (moto-api/reset-auth): a user without a policy is denied the listing."""
    import urllib.request

    iam = boto3.client("iam", endpoint_url=aws, region_name="us-east-1")
    iam.create_user(UserName="no-policy")
    key = iam.create_access_key(UserName="no-policy")["AccessKey"]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])
    monkeypatch.delenv("AWS_SESSION_TOKEN")

    def auth_after(count: str) -> None:
        # text/plain: werkzeug keeps a form-encoded body out of request.data, which moto reads the count from
        request = urllib.request.Request(
            f"{aws}/moto-api/reset-auth", data=count.encode(), method="POST", headers={"Content-Type": "text/plain"}
        )
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - moto's loopback server
            assert json.loads(answer.read())["status"] == "ok"

    auth_after("0")
    try:
        code, _, err = cli(capsys, str(EKS), "--bucket", bucket)
    finally:
        auth_after("inf")  # moto's default: no auth
    assert code == 2
    assert err.startswith(f"cpu-inference farm: --bucket {bucket}: access denied to list s3://{bucket}/farm/ (")
    assert err.rstrip().endswith(
        "the credentials need s3:ListBucket on the bucket, and s3:GetObject and kms:Decrypt on farm/* for failure reasons"
    )
    assert len(err.splitlines()) == 1


def test_a_thousand_model_farm(aws: str, bucket: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """1,000 models (4 dedicated + 996 pooled), 900 landed, 10 failed, 90 copying: one status in bounded time (printed,
    not asserted: the machine is shared)."""
    from concurrent.futures import ThreadPoolExecutor

    config = thousand_model_farm(tmp_path / "farm.yaml", "eks")
    catalog = catalog_of(config)
    entries = catalog.entries
    assert len(entries) == 1000
    client = s3(aws)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda e: client.put_object(Bucket=bucket, Key=gguf_key(e), Body=b"G"), entries[:900]))
        list(
            pool.map(
                lambda e: client.put_object(
                    Bucket=bucket, Key=failure_key(e), Body=json.dumps({"reason": f"{e.name} failed"}).encode()
                ),
                entries[900:910],
            )
        )
    began = time.monotonic()
    code, out, _ = cli(capsys, str(config), "--bucket", bucket, "--json")
    seconds = time.monotonic() - began
    data = json.loads(out)
    assert code == 4
    assert data["summary"] == {"total": 1000, "landed": 900, "failed": 10, "copying": 90}
    assert {m["reason"] for m in data["models"] if m["state"] == "copy_failed"} == {
        f"{e.name} failed" for e in entries[900:910]
    }
    with capsys.disabled():
        print(
            f"\nfarm status, 1,000 models against moto's server: {seconds:.2f} s (load + catalog + list + 10 markers)"
        )
