"""ModelCatalog templates: one app with a 10-model and a 1,000-model farm stack (each also holding one ModelArtifact,
whose copy provider the catalog does not use), cdk-nag applied; the template must not grow with the number of models.
The fan-out itself (state machine, start resource, IAM): test_catalog_fanout.py."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam

from cpu_inference.artifacts import ModelArtifact, ModelArtifactProps, ModelBucket, ModelCatalog, ModelCatalogProps
from model_download.buildspec import CATALOG_NAMES_ENV
from model_download.catalog import Catalog, CatalogAdapter, CatalogEntry, gguf_key, mme_target_model
from tests.support.cdk import apply_nag, cfn_lint_errors, nag_errors, synth, template_json

pytestmark = pytest.mark.synth

ENV = cdk.Environment(account="123456789012", region="us-east-1")
SECRETS = ("hf/acme-token", "hf/meta-token")


def entries(count: int) -> tuple[CatalogEntry, ...]:
    """A farm as the shipped example grows it: many small models, some gated behind the same two token secrets
    (a secret costs one policy statement: the template grows with the number of distinct secrets, not of models)."""
    return tuple(
        CatalogEntry(
            name=f"m-{i:04d}",
            hf_repo=f"acme-models/classifier-{i:04d}-GGUF",
            file=f"classifier-{i:04d}-Q4_K_M.gguf",
            token_secret_name=SECRETS[(i // 5) % 2] if i % 5 == 0 else None,
            engine_args={"ctx-size": "2048", "parallel": "1", "threads": "2"},
        )
        for i in range(count)
    )


@dataclass
class Farm:
    stack: cdk.Stack
    bucket: ModelBucket
    catalog: ModelCatalog
    reader: iam.Role
    template: dict[str, Any]
    template_bytes: int

    def resources(self, type_: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.template["Resources"].items() if v["Type"] == type_}

    def logical_id(self, construct: Any) -> str:
        return self.stack.get_logical_id(construct.node.default_child)

    def statements(self, role: iam.IRole) -> list[dict[str, Any]]:
        rid = self.stack.get_logical_id(role.node.default_child)
        return [
            st
            for p in self.resources("AWS::IAM::Policy").values()
            if {"Ref": rid} in p["Properties"]["Roles"]
            for st in p["Properties"]["PolicyDocument"]["Statement"]
        ]


def _flat(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        return value["Fn::Join"][0].join(_flat(p) for p in value["Fn::Join"][1])
    if isinstance(value, dict) and "Ref" in value:
        return f"<{value['Ref']}>"
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        return f"<{'.'.join(value['Fn::GetAtt'])}>"
    if isinstance(value, dict) and "Fn::Sub" in value:
        return value["Fn::Sub"]
    return json.dumps(value)


def _as_list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else [v]


@pytest.fixture(scope="module")
def farms() -> dict[int, Farm]:
    app = cdk.App()
    apply_nag(app)
    built: dict[int, tuple[cdk.Stack, ModelBucket, ModelCatalog, iam.Role]] = {}
    for count in (10, 1000):
        stack = cdk.Stack(app, f"Farm{count}", env=ENV)
        bucket = ModelBucket(stack, "ModelBucket")
        ModelArtifact(
            stack,
            "Router",
            props=ModelArtifactProps(
                model_bucket=bucket,
                name="router-slm",
                hf_repo="bartowski/SmolLM2-1.7B-Instruct-GGUF",
                file="SmolLM2-1.7B-Instruct-Q4_K_M.gguf",
            ),
        )
        catalog = ModelCatalog(
            stack, "Farm", props=ModelCatalogProps(model_bucket=bucket, entries=entries(count), layouts=("gguf", "mme"))
        )
        reader = iam.Role(stack, "PoolRole", assumed_by=iam.ServicePrincipal("pods.eks.amazonaws.com"))
        catalog.grant_read(reader)
        built[count] = (stack, bucket, catalog, reader)
    assembly = synth(app)
    return {
        count: Farm(
            stack,
            bucket,
            catalog,
            reader,
            template_json(stack),
            os.path.getsize(assembly.get_stack_by_name(stack.stack_name).template_full_path),
        )
        for count, (stack, bucket, catalog, reader) in built.items()
    }


def test_the_template_does_not_grow_with_the_number_of_models(farms: dict[int, Farm]) -> None:
    small, large = farms[10], farms[1000]
    by_type = lambda f: sorted(r["Type"] for r in f.template["Resources"].values())  # noqa: E731
    assert by_type(small) == by_type(large)
    assert abs(large.template_bytes - small.template_bytes) <= 300
    # The catalog is not in the template (its JSON is ~100x the template's growth budget) but in the asset.
    text = json.dumps(large.template)
    assert "m-0999" not in text and "classifier-0999" not in text
    assert len(large.catalog.catalog.to_json()) > 200_000
    print(
        f"\ntemplate bytes: 10 models {small.template_bytes}, 1,000 models {large.template_bytes}; "
        f"resources {len(small.template['Resources'])} / {len(large.template['Resources'])}"
    )


def test_the_definition_carries_only_where_the_catalog_is_and_its_fingerprint(farms: dict[int, Farm]) -> None:
    farm = farms[1000]
    sm = farm.template["Resources"][farm.logical_id(farm.catalog.fanout.state_machine)]
    text = "".join(p if isinstance(p, str) else "" for p in sm["Properties"]["DefinitionString"]["Fn::Join"][1])
    assert farm.catalog.fingerprint == Catalog(entries(1000), ("gguf", "mme")).fingerprint()
    assert farm.catalog.fingerprint in text and farm.catalog.catalog_asset.s3_object_key in text
    assert farm.catalog.items_asset.s3_object_key in text
    # The assets the builds and the map read are exactly the catalog and its names, byte for byte.
    outdir = Path(farm.stack.node.root.outdir)
    for asset, name in ((farm.catalog.catalog_asset, "catalog.json"), (farm.catalog.items_asset, "items.json")):
        staged = outdir / f"asset.{asset.asset_hash}" / name
        staged = staged if staged.exists() else outdir / f"asset.{asset.asset_hash}.json"
        if name == "catalog.json":
            assert Catalog.from_json(staged.read_text()).fingerprint() == farm.catalog.fingerprint
        else:
            assert json.loads(staged.read_text()) == [e.name for e in entries(1000)]
        assert asset.s3_object_key.endswith(".json")
    # A different catalog is a different fingerprint: the start resource is updated, a new execution starts.
    assert farms[10].catalog.fingerprint != farm.catalog.fingerprint


def test_the_job_role_writes_only_farm_and_reads_only_the_catalog_and_the_named_secrets(farms: dict[int, Farm]) -> None:
    farm = farms[1000]
    bucket_arn = f"<{farm.logical_id(farm.bucket.bucket)}.Arn>"
    statements = farm.statements(farm.catalog.role)
    on_bucket = [st for st in statements if any(_flat(r).startswith(bucket_arn) for r in _as_list(st["Resource"]))]
    writes = [st for st in on_bucket if "s3:PutObject" in _as_list(st["Action"])]
    assert [[_flat(r) for r in _as_list(st["Resource"])] for st in writes] == [[f"{bucket_arn}/farm/*"]]
    assert [st["Condition"] for st in on_bucket if st["Action"] == "s3:ListBucket"] == [
        {"StringLike": {"s3:prefix": ["farm/*"]}}
    ]
    assert len(on_bucket) == 2
    catalog_reads = [st for st in statements if st["Action"] == "s3:GetObject" and st not in on_bucket]
    assert [_flat(st["Resource"]).rsplit("/", 1)[1] for st in catalog_reads] == [
        farm.catalog.catalog_asset.s3_object_key
    ]
    secrets = sorted(
        _flat(st["Resource"])
        for st in statements
        if any(str(a).startswith("secretsmanager:") for a in _as_list(st["Action"]))
    )
    assert secrets == [f"arn:<AWS::Partition>:secretsmanager:us-east-1:123456789012:secret:{s}-??????" for s in SECRETS]


def test_serving_reads_farm_only_and_keys_are_literals(farms: dict[int, Farm]) -> None:
    farm = farms[1000]
    statements = farm.statements(farm.reader)
    bucket_arn = f"<{farm.logical_id(farm.bucket.bucket)}.Arn>"
    assert [_flat(st["Resource"]) for st in statements if st["Action"] == "s3:GetObject"] == [f"{bucket_arn}/farm/*"]
    assert not any("s3:PutObject" in _as_list(st["Action"]) for st in statements)
    entry = entries(1000)[999]
    assert farm.catalog.gguf_key("m-0999") == gguf_key(entry) and not cdk.Token.is_unresolved(
        farm.catalog.gguf_key("m-0999")
    )
    assert farm.catalog.mme_target_model("m-0999") == mme_target_model(entry)
    assert farm.catalog.prefix == "farm/" and not hasattr(farm.catalog, "receipt_key")  # no receipt any more
    with pytest.raises(KeyError, match="no model 'm-5000' in the catalog"):
        farm.catalog.gguf_key("m-5000")


def test_one_project_runs_the_catalog_buildspec_on_the_stacks_runner(farms: dict[int, Farm]) -> None:
    farm = farms[1000]
    (project,) = [
        r["Properties"]
        for k, r in farm.resources("AWS::CodeBuild::Project").items()
        if k == farm.logical_id(farm.catalog.project)
    ]
    spec = json.loads(project["Source"]["BuildSpec"])
    (command,) = spec["phases"]["build"]["commands"]
    assert command.startswith("python3 -m model_download catalog ") and "exported-variables" not in spec["env"]
    assert f"${{{CATALOG_NAMES_ENV}:+" in command
    env = {e["Name"]: e["Value"] for e in project["Environment"]["EnvironmentVariables"]}
    assert env["CATALOG_FINGERPRINT"] == farm.catalog.fingerprint and env["CATALOG_PARALLEL_MODELS"] == "4"
    assert project["TimeoutInMinutes"] == 240 and project["Environment"]["PrivilegedMode"] is False
    # The artifact's provider waiter and the catalog's copy; the catalog uses no provider; one runner asset.
    assert len(farm.resources("AWS::StepFunctions::StateMachine")) == 2
    assert farm.resources("Custom::ModelCatalog") == {}
    sources = {
        json.dumps(r["Properties"]["Source"]["Location"]) for r in farm.resources("AWS::CodeBuild::Project").values()
    }
    assert len(sources) == 1


@pytest.mark.parametrize("count", [10, 1000])
def test_cdk_nag_and_cfn_lint_are_clean(farms: dict[int, Farm], count: int) -> None:
    assert nag_errors(farms[count].stack) == []
    assert cfn_lint_errors(farms[count].template) == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"entries": ()}, "the catalog has no entries"),
        ({"layouts": ("gguf", "zip")}, "layouts must be"),
        ({"entries": (CatalogEntry("Bad_Name", "acme/a", "a.gguf"),)}, "'Bad_Name': name must be a DNS label"),
        ({"parallel_models": 0}, "parallel_models must be 1..64"),
        ({"copy_timeout_minutes": 3000}, r"copy_timeout_minutes must be 5\.\.2160"),
        ({"batch_size": 51}, r"batch_size must be 1\.\.50"),
        ({"max_concurrency": 0}, r"max_concurrency must be 1\.\.10000 \(keep it within the account's CodeBuild"),
    ],
)
def test_catalog_props_are_validated(change: dict[str, Any], message: str) -> None:
    base: dict[str, Any] = {"model_bucket": None, "entries": entries(2)}
    with pytest.raises(ValueError, match=message):
        ModelCatalogProps(**{**base, **change}).validate()


def test_a_key_of_a_layout_that_is_not_copied_is_refused() -> None:
    app = cdk.App()
    stack = cdk.Stack(app, "GgufOnly", env=ENV)
    catalog = ModelCatalog(
        stack, "Farm", props=ModelCatalogProps(model_bucket=ModelBucket(stack, "Models"), entries=entries(2))
    )
    assert catalog.gguf_key("m-0001").startswith("farm/m-0001/")
    with pytest.raises(ValueError, match="no 'mme' layout is copied; add 'mme' to ModelCatalogProps.layouts"):
        catalog.mme_target_model("m-0001")


def test_a_bundled_adapters_token_secret_is_granted_to_the_copy_job() -> None:
    """The copy opens each bundled adapter's Hub with the adapter's own secret (catalog_copy: hubs.for_secret(
    adapter.token_secret_name)), so the job's role must read it — a gated adapter repo over a public base."""
    app = cdk.App()
    stack = cdk.Stack(app, "Bundle", env=ENV)
    base = CatalogEntry(
        name="base",
        hf_repo="acme/base-GGUF",
        file="base.gguf",
        layouts=("lora",),
        adapters=(
            CatalogAdapter(name="tuned", hf_repo="acme/tuned-lora", file="tuned.gguf", token_secret_name="hf/gated"),
        ),
    )
    catalog = ModelCatalog(
        stack,
        "Farm",
        props=ModelCatalogProps(model_bucket=ModelBucket(stack, "ModelBucket"), entries=(base,), layouts=("gguf",)),
    )
    assert catalog.catalog.token_secrets() == {"hf/gated": "base.adapters[tuned]"}
    template = template_json(stack)
    granted = [
        _flat(st["Resource"])
        for res in template["Resources"].values()
        if res["Type"] == "AWS::IAM::Policy"
        for st in res["Properties"]["PolicyDocument"]["Statement"]
        if any(str(a).startswith("secretsmanager:") for a in _as_list(st["Action"]))
    ]
    assert granted == ["arn:<AWS::Partition>:secretsmanager:us-east-1:123456789012:secret:hf/gated-??????"]
