"""The catalog copy as the state machine runs it, against real servers (the fake Hub over HTTP, moto's S3).

The batches come from the SYNTHESIZED definition: its ItemBatcher's MaxItemsPerBatch over the work list the
ItemReader reads (catalog.items_json, in order — Step Functions' ItemBatcher groups consecutive items), and each
batch's environment overrides are the CodeBuild task's EnvironmentVariablesOverride evaluated for that batch
(`States.JsonToString($.Items)` is the batch's compact JSON array). moto 5.2.5's ASL interpreter cannot run the
definition itself: its grammar has no ItemBatcher (CreateStateMachine → ASLParserException 'mismatched input
"ItemBatcher"'), and its CodeBuild integration supports no .sync — test_the_interpreter_limit_is_what_we_say pins
that, so the day moto runs it this module can switch to executing it.

Each batch then runs the buildspec's own build command in bash, with the project's environment plus the batch's
overrides: every model lands, a broken entry fails only its batch (non-zero exit: Step Functions retries it) and
leaves its failure marker; a retry re-copies nothing that landed; after the entry is fixed, a re-run copies only it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, cast

import aws_cdk as cdk
import pytest

from cpu_inference.artifacts import ModelBucket, ModelCatalog, ModelCatalogProps
from model_download.buildspec import CATALOG_BUILD_SPEC, CATALOG_NAMES_ENV, catalog_environment
from model_download.catalog import COPY_FAILED_NAME, Catalog, CatalogEntry, failure_key, gguf_key, items_json
from tests.runtime.model_download.fake_hub import FakeHub, ServedFile

ROOT = Path(__file__).resolve().parents[3]
SLICE = 1536 * 1024 + 7
NAMES = [f"m-{i}" for i in range(8)]
BROKEN = "m-5"
BATCH = 3


@pytest.fixture(scope="module")
def files(fake_hub: FakeHub, smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, ServedFile]:
    root = tmp_path_factory.mktemp("batches")
    out: dict[str, ServedFile] = {}
    with open(smollm2_gguf, "rb") as src:
        for i, name in enumerate(NAMES):
            path = root / f"{name}.gguf"
            src.seek(i * SLICE)
            path.write_bytes(src.read(SLICE))
            wrong = hashlib.sha256(b"not these bytes").hexdigest() if name == BROKEN else None
            out[name] = fake_hub.add_file(f"acme-batch/{name}", f"{name}-Q4.gguf", path, sha256=wrong)
    return out


def _catalog(files: dict[str, ServedFile]) -> Catalog:
    return Catalog(tuple(CatalogEntry(name=n, hf_repo=f.repo, file=f.name) for n, f in files.items()))


def _definition(catalog: Catalog) -> tuple[dict[str, Any], ModelCatalog, cdk.Stack]:
    """The synthesized state machine's ASL, references resolved to test values."""
    app = cdk.App()
    stack = cdk.Stack(app, "Batches", env=cdk.Environment(account="123456789012", region="us-east-1"))
    bucket = ModelBucket(stack, "Models")
    farm = ModelCatalog(
        stack, "Farm", props=ModelCatalogProps(model_bucket=bucket, entries=catalog.entries, batch_size=BATCH)
    )
    template = app.synth().get_stack_by_name("Batches").template
    resolved = {
        "AWS::Partition": "aws",
        stack.get_logical_id(cast(cdk.CfnElement, bucket.bucket.node.default_child)): "models",
        stack.get_logical_id(cast(cdk.CfnElement, farm.project.node.default_child)): "catalog-copy",
    }
    parts = template["Resources"][
        stack.get_logical_id(cast(cdk.CfnElement, farm.fanout.state_machine.node.default_child))
    ]["Properties"]["DefinitionString"]["Fn::Join"][1]
    return json.loads("".join(p if isinstance(p, str) else resolved[p["Ref"]] for p in parts)), farm, stack


def _evaluate(value: dict[str, str], batch: list[str]) -> str:
    """One EnvironmentVariablesOverride entry for one batch ({"Items": batch})."""
    if "Value" in value:
        return value["Value"]
    assert value["Value.$"] == "States.JsonToString($.Items)", value
    return json.dumps(batch, separators=(",", ":"))


def batches_of(definition: dict[str, Any], items: list[str]) -> list[dict[str, str]]:
    """Each batch's environment overrides, as the definition makes them."""
    (map_state,) = definition["States"].values()
    size = map_state["ItemBatcher"]["MaxItemsPerBatch"]
    (task,) = map_state["ItemProcessor"]["States"].values()
    overrides = task["Parameters"]["EnvironmentVariablesOverride"]
    groups = [items[i : i + size] for i in range(0, len(items), size)]
    return [{o["Name"]: _evaluate(o, group) for o in overrides} for group in groups]


def run_build(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The buildspec's build command in bash, as CodeBuild runs it (python3 = this interpreter)."""
    (command,) = cast(Any, CATALOG_BUILD_SPEC)["phases"]["build"]["commands"]
    full = {**os.environ, **env, "PYTHONPATH": str(ROOT / "lambda")}
    if CATALOG_NAMES_ENV not in env:
        full.pop(CATALOG_NAMES_ENV, None)
    return subprocess.run(
        ["bash", "-c", command.replace("python3 ", f"{sys.executable} ", 1)],
        env=full,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def deployed(hub: FakeHub, files: dict[str, ServedFile], s3, bucket: str) -> dict[str, Any]:  # noqa: ANN001
    """The catalog and its work list in moto S3 where the definition says they are; the project's environment."""
    catalog = _catalog(files)
    definition, farm, _stack = _definition(catalog)
    assets = "cdk-hnb659fds-assets-123456789012-us-east-1"
    if assets not in {b["Name"] for b in s3.list_buckets()["Buckets"]}:
        s3.create_bucket(Bucket=assets)
    s3.put_object(Bucket=assets, Key=farm.catalog_asset.s3_object_key, Body=catalog.to_json().encode())
    s3.put_object(Bucket=assets, Key=farm.items_asset.s3_object_key, Body=items_json(catalog).encode())
    (map_state,) = definition["States"].values()
    reader = map_state["ItemReader"]["Parameters"]
    items = json.loads(s3.get_object(Bucket=reader["Bucket"], Key=reader["Key"])["Body"].read())
    project_env = {
        e["name"]: e["value"]
        for e in catalog_environment(
            bucket=bucket,
            catalog_bucket=assets,
            catalog_key=farm.catalog_asset.s3_object_key,
            fingerprint=catalog.fingerprint(),
            hf_endpoint=hub.url,
            parallel_models=2,
            concurrency=2,
        )
    }
    return {"catalog": catalog, "definition": definition, "items": items, "project_env": project_env}


def _keys(s3, bucket: str) -> set[str]:  # noqa: ANN001
    return {o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])}


def test_the_interpreter_limit_is_what_we_say(files) -> None:  # noqa: ANN001
    """moto's ASL parser refuses the synthesized definition at ItemBatcher (what stops an end-to-end execution)."""
    import boto3
    from botocore.exceptions import ClientError
    from moto import mock_aws

    definition, _farm, _stack = _definition(_catalog(files))
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        sfn = boto3.client(
            "stepfunctions", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
        )
        with pytest.raises(ClientError, match=r"ASLParserException.*ItemBatcher"):
            sfn.create_state_machine(
                name=f"copy-{uuid.uuid4().hex[:6]}",
                definition=json.dumps(definition),
                roleArn="arn:aws:iam::123456789012:role/sfn",
            )


def test_every_model_lands_and_a_broken_entry_fails_only_its_batch(deployed, s3, bucket, hub) -> None:  # noqa: ANN001
    catalog: Catalog = deployed["catalog"]
    batches = batches_of(deployed["definition"], deployed["items"])
    assert [json.loads(b[CATALOG_NAMES_ENV]) for b in batches] == [NAMES[0:3], NAMES[3:6], NAMES[6:8]]
    assert {b["CATALOG_FINGERPRINT"] for b in batches} == {catalog.fingerprint()}
    outcomes = [run_build({**deployed["project_env"], **b}) for b in batches]
    assert [o.returncode for o in outcomes] == [0, 2, 0], [o.stderr[-500:] for o in outcomes]
    assert f"1 of 3 models failed: {BROKEN}" in outcomes[1].stderr
    keys = _keys(s3, bucket)
    for entry in catalog.entries:
        assert (gguf_key(entry) in keys) == (entry.name != BROKEN), entry.name
    broken = catalog.entry(BROKEN)
    assert {k for k in keys if k.endswith(COPY_FAILED_NAME)} == {failure_key(broken)}
    marker = json.loads(s3.get_object(Bucket=bucket, Key=failure_key(broken))["Body"].read())
    assert set(marker) == {"model", "reason", "attempt", "at"}
    assert marker["model"] == BROKEN and marker["attempt"] == 1 and marker["at"].endswith("Z")
    assert "sha256" in marker["reason"] and "\n" not in marker["reason"]

    # Step Functions retries the failed batch: what landed is only HEADed; the broken entry fails again.
    hub.reset()
    retry = run_build({**deployed["project_env"], **batches[1]})
    assert retry.returncode == 2 and hub.stats.gets == 1  # the broken file's one GET; m-3, m-4: no Hub request
    again = json.loads(s3.get_object(Bucket=bucket, Key=failure_key(broken))["Body"].read())
    assert again["attempt"] == 2


def test_after_a_fix_a_rerun_copies_only_what_is_missing(deployed, s3, bucket, hub, files) -> None:  # noqa: ANN001
    catalog: Catalog = deployed["catalog"]
    batches = batches_of(deployed["definition"], deployed["items"])
    for b in batches:
        run_build({**deployed["project_env"], **b})
    served = files[BROKEN]
    hub.add_file(served.repo, served.name, served.path)  # the Hub now reports the bytes' own sha256
    try:
        hub.reset()
        before = {k: s3.head_object(Bucket=bucket, Key=k)["ETag"] for k in _keys(s3, bucket)}
        # The whole catalog (no CATALOG_NAMES: `aws codebuild start-build` by hand) — only the fixed model moves.
        whole = run_build(deployed["project_env"])
        assert whole.returncode == 0, whole.stderr[-500:]
        assert "1 of 8 models copied" in whole.stdout and hub.stats.gets == 1
        after = {k: s3.head_object(Bucket=bucket, Key=k)["ETag"] for k in _keys(s3, bucket)}
        assert {k: v for k, v in after.items() if k in before} == before  # nothing rewritten
        assert set(after) - set(before) == {gguf_key(catalog.entry(BROKEN))}
        # The stale marker stays; the model's key wins over it (docs/INTERFACE §1).
        assert failure_key(catalog.entry(BROKEN)) in after
    finally:
        hub.add_file(served.repo, served.name, served.path, sha256=hashlib.sha256(b"not these bytes").hexdigest())
