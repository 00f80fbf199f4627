"""LlamaCppImage synthesized once (cdk-nag on): native builds, manifest-list step, ECR settings,
the deploy-time workflow, least-privilege IAM, cdk-nag and cfn-lint clean."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk import aws_iam as iam

from cpu_inference._internal.nag import acknowledge
from cpu_inference.images import LlamaCppImage, LlamaCppImageProps
from tests.support.cdk import apply_nag, cfn_lint_errors, nag_errors, template_json

pytestmark = pytest.mark.synth

PUSH_ACTIONS = {"ecr:PutImage", "ecr:InitiateLayerUpload", "ecr:UploadLayerPart", "ecr:CompleteLayerUpload"}


@pytest.fixture(scope="module")
def synth(make_context) -> SimpleNamespace:
    app = cdk.App()
    stack = cdk.Stack(app, "ImageStack", env=cdk.Environment(account="111111111111", region="eu-west-1"))
    image = LlamaCppImage(stack, "LlamaServer", props=LlamaCppImageProps(context_dir=make_context("llama")))
    puller = iam.Role(stack, "Puller", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"))
    image.grant_pull(puller)
    acknowledge(puller, "AwsSolutions-IAM5[Resource::*]", "ecr:GetAuthorizationToken accepts no resource but '*'.")
    apply_nag(app)
    template = template_json(stack)  # raises if cdk-nag finds an unacknowledged rule
    return SimpleNamespace(stack=stack, image=image, template=template, puller=puller)


def resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def logical_id(stack: cdk.Stack, construct) -> str:
    return stack.get_logical_id(construct.node.default_child)


def arn_of(stack: cdk.Stack, construct) -> dict[str, Any]:
    return {"Fn::GetAtt": [logical_id(stack, construct), "Arn"]}


def env_vars(project: dict[str, Any]) -> dict[str, Any]:
    return {v["Name"]: v["Value"] for v in project["Properties"]["Environment"]["EnvironmentVariables"]}


def buildspec(project: dict[str, Any]) -> dict[str, Any]:
    return yaml.safe_load(project["Properties"]["Source"]["BuildSpec"])


def commands(spec: dict[str, Any]) -> str:
    return "\n".join(c for phase in spec["phases"].values() for c in phase["commands"])


def statements(template: dict[str, Any], policy_id: str) -> list[dict[str, Any]]:
    return template["Resources"][policy_id]["Properties"]["PolicyDocument"]["Statement"]


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def role_policy_id(template: dict[str, Any], role_id: str) -> str:
    (found,) = [
        k for k, v in resources(template, "AWS::IAM::Policy").items() if {"Ref": role_id} in v["Properties"]["Roles"]
    ]
    return found


def test_two_native_privileged_builds(synth) -> None:
    projects = {
        env_vars(p)["ARCH"]: p
        for p in resources(synth.template, "AWS::CodeBuild::Project").values()
        if p["Properties"]["Environment"]["ComputeType"] == "BUILD_GENERAL1_LARGE"
    }
    assert set(projects) == {"arm64", "amd64"}
    arm, amd = projects["arm64"]["Properties"]["Environment"], projects["amd64"]["Properties"]["Environment"]
    assert (arm["Type"], arm["Image"]) == ("ARM_CONTAINER", "aws/codebuild/amazonlinux-aarch64-standard:3.0")
    assert (amd["Type"], amd["Image"]) == ("LINUX_CONTAINER", "aws/codebuild/amazonlinux-x86_64-standard:5.0")
    assert arm["PrivilegedMode"] is True and amd["PrivilegedMode"] is True
    key = arn_of(synth.stack, synth.image.key)
    for project in projects.values():
        props = project["Properties"]
        assert props["EncryptionKey"] == key
        assert props["Source"]["Type"] == "NO_SOURCE"  # the buildspec fetches the one context object
        assert env_vars(project)["CONTEXT_KEY"] == synth.image.context_asset.s3_object_key
        assert props["LogsConfig"]["CloudWatchLogs"]["GroupName"] == {
            "Ref": logical_id(synth.stack, synth.image.build_log_group)
        }
        spec = commands(buildspec(project))
        # No emulation: each architecture builds on its own host type for its own platform.
        assert 'docker buildx build --platform "linux/$ARCH"' in spec
        assert "binfmt" not in spec and "qemu-user" not in spec and "linux/arm64,linux/amd64" not in spec
        assert '"$REPOSITORY_URI:$IMAGE_TAG-$ARCH"' in spec


def test_native_builds_pass_the_pinned_engine_as_build_args(synth, real_pin) -> None:
    for arch in ("arm64", "amd64"):
        project = synth.template["Resources"][logical_id(synth.stack, synth.image.platform_projects[arch])]
        spec = commands(buildspec(project))
        for key, value in real_pin.items():
            assert f"--build-arg {key}={value}" in spec
    assert synth.image.build_args == real_pin


def test_manifest_step_publishes_one_docker_manifest_list(synth) -> None:
    project = synth.template["Resources"][logical_id(synth.stack, synth.image.manifest_project)]
    env = project["Properties"]["Environment"]
    assert (env["Type"], env["ComputeType"], env["PrivilegedMode"]) == ("ARM_CONTAINER", "BUILD_GENERAL1_SMALL", True)
    spec = buildspec(project)
    assert spec["env"]["exported-variables"] == ["IMAGE_DIGEST"]
    text = commands(spec)
    assert (
        'docker buildx imagetools create --tag "$final" "$REPOSITORY_URI:$IMAGE_TAG-arm64" "$REPOSITORY_URI:$IMAGE_TAG-amd64"'
        in text
    )
    assert 'require_media_type "$IMAGE_TAG" application/vnd.docker.distribution.manifest.list.v2+json' in text


def test_no_soci_or_oci_path_in_what_deploys(synth) -> None:
    """SageMaker refuses OCI manifests (aws/amazon-sagemaker-feedback#180) and `soci convert` always
    writes an OCI index; SOCI on EKS is Bottlerocket's parallel-pull-unpack, which needs no index."""
    text = json.dumps(synth.template).lower()
    for banned in ("soci", "ctr ", "containerd", "oci-mediatypes=true", "--annotation", "--attest", "compression=zstd"):
        assert banned not in text, banned
    assert not [f for f in LlamaCppImageProps.__dataclass_fields__ if "soci" in f]


def test_repository_scans_is_immutable_encrypted_and_expires_images(synth) -> None:
    (repo,) = resources(synth.template, "AWS::ECR::Repository").values()
    props = repo["Properties"]
    assert props["ImageScanningConfiguration"] == {"ScanOnPush": True}
    assert props["ImageTagMutability"] == "IMMUTABLE"
    assert props["EncryptionConfiguration"] == {"EncryptionType": "KMS", "KmsKey": arn_of(synth.stack, synth.image.key)}
    rules = {
        r["selection"]["tagStatus"]: r["selection"]
        for r in json.loads(props["LifecyclePolicy"]["LifecyclePolicyText"])["rules"]
    }
    assert rules["untagged"] == {
        "tagStatus": "untagged",
        "countType": "sinceImagePushed",
        "countNumber": 7,
        "countUnit": "days",
    }
    # 10 builds x 3 tags (<tag>, -arm64, -amd64).
    assert rules["tagged"] == {
        "tagStatus": "tagged",
        "tagPrefixList": ["llama-server-"],
        "countType": "imageCountMoreThan",
        "countNumber": 30,
    }
    assert repo["DeletionPolicy"] == "Retain"


def test_key_rotates_and_log_groups_are_encrypted_with_retention(synth) -> None:
    (key,) = resources(synth.template, "AWS::KMS::Key").values()
    assert key["Properties"]["EnableKeyRotation"] is True
    logs_statements = [
        s for s in key["Properties"]["KeyPolicy"]["Statement"] if s.get("Sid") == "CloudWatchLogsOfThisAccount"
    ]
    assert logs_statements and "kms:EncryptionContext:aws:logs:arn" in logs_statements[0]["Condition"]["ArnLike"]
    groups = resources(synth.template, "AWS::Logs::LogGroup")
    assert len(groups) == 3
    for group in groups.values():
        assert group["Properties"]["KmsKeyId"] == arn_of(synth.stack, synth.image.key)
        assert group["Properties"]["RetentionInDays"] == 30


def definition(state_machine: dict[str, Any]) -> dict[str, Any]:
    parts = state_machine["Properties"]["DefinitionString"]["Fn::Join"][1]
    return json.loads("".join(p if isinstance(p, str) else "TOKEN" for p in parts))


def test_workflow_runs_both_builds_in_parallel_then_the_manifest(synth) -> None:
    workflow = synth.template["Resources"][logical_id(synth.stack, synth.image.state_machine)]
    states = definition(workflow)["States"]
    first = states[definition(workflow)["StartAt"]]
    assert first["Type"] == "Parallel" and first["ResultPath"] == "$.platformBuilds"
    branches = [b["States"][b["StartAt"]] for b in first["Branches"]]
    assert len(branches) == 2
    manifest = states[first["Next"]]
    for task in [*branches, manifest]:
        assert task["Resource"].endswith(":states:::codebuild:startBuild.sync")
        assert task["Parameters"]["EnvironmentVariablesOverride"] == [
            {"Name": "IMAGE_TAG", "Type": "PLAINTEXT", "Value.$": "$.tag"}
        ]
    assert manifest["ResultPath"] == "$.manifestBuild" and manifest["End"] is True
    assert workflow["Properties"]["LoggingConfiguration"]["Level"] == "ALL"
    assert workflow["Properties"]["TracingConfiguration"] == {"Enabled": True}


def test_custom_resource_is_keyed_on_context_pin_and_returns_the_digest(synth, real_pin) -> None:
    (build,) = resources(synth.template, "Custom::ContainerImageBuild").values()
    props = build["Properties"]
    image = synth.image
    assert props["Tag"] == image.tag == f"llama-server-{image.content_hash[:16]}"
    assert props["ContextAssetHash"] == image.context_asset.asset_hash
    assert props["EnginePin"] == ";".join(f"{k}={v}" for k, v in real_pin.items())
    assert props["StateMachineArn"] == {"Ref": logical_id(synth.stack, image.state_machine)}
    # The builds wait for the projects (and so their roles' ECR policies).
    assert logical_id(synth.stack, image.platform_projects["arm64"]) in build["DependsOn"]
    uri = synth.stack.resolve(image.image_uri)
    assert "@" in json.dumps(uri)
    assert {"Fn::GetAtt": [logical_id(synth.stack, image.build), "ImageDigest"]} in uri["Fn::Join"][1]


def test_each_architecture_has_its_own_image_by_digest(synth) -> None:
    # SageMaker gets one architecture's image (F2: no source says CreateModel takes a manifest list); EKS the list.
    image = synth.image
    for arch in image.props.platforms:
        uri = synth.stack.resolve(image.image_uri_for(arch))
        assert {"Fn::GetAtt": [logical_id(synth.stack, image.build), f"Digest-{arch}"]} in uri["Fn::Join"][1]
        assert synth.stack.resolve(image.image_digest_for(arch)) == {
            "Fn::GetAtt": [logical_id(synth.stack, image.build), f"Digest-{arch}"]
        }
    with pytest.raises(ValueError, match=r"no riscv64 build \(platforms: arm64, amd64\)"):
        image.image_uri_for("riscv64")


def test_build_roles_push_only_to_this_repository(synth) -> None:
    repo_arn = arn_of(synth.stack, synth.image.repository)
    for project in [*synth.image.platform_projects.values(), synth.image.manifest_project]:
        policy = role_policy_id(synth.template, logical_id(synth.stack, project.role))
        found_push = False
        s3_reads: list[tuple[set[str], str]] = []
        for statement in statements(synth.template, policy):
            actions = set(as_list(statement["Action"]))
            ecr = {a for a in actions if a.startswith("ecr:")}
            if ecr - {"ecr:GetAuthorizationToken"}:
                assert statement["Resource"] == repo_arn, statement
                found_push |= ecr >= PUSH_ACTIONS
            if "ecr:GetAuthorizationToken" in actions:
                assert actions == {"ecr:GetAuthorizationToken"} and statement["Resource"] == "*"
            if any(a.startswith("s3:") for a in actions):
                s3_reads.append((actions, json.dumps(statement["Resource"])))
        assert found_push
        if project is synth.image.manifest_project:
            assert s3_reads == []
        else:
            # Exactly the asset's one object: no bucket listing, no other key.
            ((actions, resource),) = s3_reads
            assert actions == {"s3:GetObject"}
            assert resource.endswith(f'/{synth.image.context_asset.s3_object_key}"]]}}')


def test_no_statement_anywhere_pushes_to_another_resource(synth) -> None:
    repo_arn = arn_of(synth.stack, synth.image.repository)
    for policy_id in resources(synth.template, "AWS::IAM::Policy"):
        for statement in statements(synth.template, policy_id):
            if PUSH_ACTIONS & set(as_list(statement["Action"])):
                assert statement["Resource"] == repo_arn


def test_workflow_starts_only_these_projects_and_handlers_only_this_workflow(synth) -> None:
    image, stack = synth.image, synth.stack
    workflow_policy = role_policy_id(synth.template, logical_id(stack, image.state_machine.role))
    started = [
        s["Resource"]
        for s in statements(synth.template, workflow_policy)
        if "codebuild:StartBuild" in as_list(s["Action"])
    ]
    projects = [image.platform_projects["arm64"], image.platform_projects["amd64"], image.manifest_project]
    assert sorted(map(json.dumps, started)) == sorted(json.dumps(arn_of(stack, p)) for p in projects)
    handler_role = image.on_event_function.role
    handler_policy = role_policy_id(synth.template, logical_id(stack, handler_role))
    by_action = {a: s["Resource"] for s in statements(synth.template, handler_policy) for a in as_list(s["Action"])}
    assert by_action["states:StartExecution"] == {"Ref": logical_id(stack, image.state_machine)}
    assert "execution:" in json.dumps(by_action["states:DescribeExecution"])
    assert not any(a.startswith(("ecr:", "codebuild:", "s3:")) for a in by_action)


def test_grant_pull_gives_read_only_rights_on_the_repository(synth) -> None:
    policy = role_policy_id(synth.template, logical_id(synth.stack, synth.puller))
    actions = {a for s in statements(synth.template, policy) for a in as_list(s["Action"])}
    assert {"ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"} <= actions
    assert not actions & PUSH_ACTIONS


def test_cdk_nag_clean_with_reviewed_acknowledgments(synth) -> None:
    assert nag_errors(synth.stack) == []


def test_cfn_lint_has_no_errors(synth) -> None:
    assert cfn_lint_errors(synth.template) == []
