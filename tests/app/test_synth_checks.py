"""Every shipped config synthesizes to a template that is cfn-lint clean, cdk-nag clean, snapshot-stable, and
whose Kubernetes objects validate against real schemas."""

from __future__ import annotations

from syrupy.extensions.json import JSONSnapshotExtension

from tests.support import k8s
from tests.support.cdk import cfn_lint_errors, nag_errors, normalized


def test_cfn_lint_has_no_errors(synthesized, config_id: str) -> None:
    assert cfn_lint_errors(synthesized[config_id].template) == []


def test_cdk_nag_has_no_unsuppressed_errors(synthesized, config_id: str) -> None:
    assert nag_errors(synthesized[config_id].stack) == []


def test_snapshot(synthesized, config_id: str, snapshot) -> None:
    # One JSON file per config (a diff per stack in review; each stays well under the 2 MB repo-file bound).
    assert normalized(synthesized[config_id].template) == snapshot.use_extension(JSONSnapshotExtension)


def test_kubernetes_objects_validate(synthesized, config_id: str) -> None:
    s = synthesized[config_id]
    minor = s.config.eks.kubernetes_version
    problems: list[str] = []
    custom = [o for o in k8s.objects(s.template) if k8s.is_custom(o)]
    for obj in k8s.objects(s.template):
        if not k8s.is_custom(obj):
            problems += k8s.validate_core(obj, minor)
    for obj in custom:
        problems += k8s.validate_custom(obj)
    assert problems == []


def test_manifests_stay_under_the_lambda_payload_bound(synthesized, config_id: str) -> None:
    sizes = {lid: size for lid, _, size in k8s.manifests(synthesized[config_id].template)}
    assert all(size <= 200_000 for size in sizes.values()), sizes


# CloudFormation's quotas: a template body from S3 of at most 1 MB and at most 500 resources per stack — the
# figures aws-cdk-lib itself checks (core/lib/stack.js: TEMPLATE_BODY_MAXIMUM_SIZE=1e6, MAX_RESOURCES=500).
# Measured on the file the CDK CLI uploads, as written into the cloud assembly.
TEMPLATE_BODY_MAX_BYTES = 1_000_000
STACK_MAX_RESOURCES = 500


def test_template_file_fits_cloudformation(synthesized, config_id: str) -> None:
    s = synthesized[config_id]
    artifact = s.stack.node.root.synth().get_stack_by_name(s.stack.stack_name)
    with open(artifact.template_full_path, "rb") as f:
        size = len(f.read())
    assert size <= TEMPLATE_BODY_MAX_BYTES, f"{config_id}: template is {size} bytes"
    assert len(s.template["Resources"]) <= STACK_MAX_RESOURCES
    warnings = [m for m in artifact.messages if "templateSize" in str(m.entry.data)]
    assert not warnings, [str(m.entry.data) for m in warnings]
