"""The bring-your-own paths: an existing role, key and capture bucket, an S3-URI model in an SSE-KMS bucket, no
autoscaling and no dashboard — still least privilege and cdk-nag clean."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3

from cpu_inference import sizing
from cpu_inference._internal.nag import flatten
from cpu_inference.sagemaker import EngineImage, GravitonEndpoint, GravitonEndpointProps
from tests.support.cdk import apply_nag, cfn_lint_errors, nag_errors, synth, template_json


def test_bring_your_own_resources() -> None:
    app = cdk.App()
    apply_nag(app)
    stack = cdk.Stack(app, "Byo", env=cdk.Environment(account="123456789012", region="eu-west-1"))
    role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"))
    key = kms.Key(stack, "Key", enable_key_rotation=True)
    model_key = kms.Key.from_key_arn(
        stack, "ModelKey", "arn:aws:kms:eu-west-1:123456789012:key/11111111-2222-3333-4444-555555555555"
    )
    capture = s3.Bucket.from_bucket_name(stack, "Capture", "team-captures")
    ep = GravitonEndpoint(
        stack,
        "Classifier",
        props=GravitonEndpointProps(
            name="classifier",
            model="s3://team-models/classifier/v3/",
            model_key=model_key,
            spec=sizing.ModelSpec(
                parameters_billions=1.7, quantization="Q4_K_M", context_window=2048, task="classification"
            ),
            image=EngineImage(
                ecr.Repository.from_repository_name(stack, "Repo", "engines/llama-server"), tag="2026-11"
            ),
            instance_type="ml.c8g.xlarge",
            min_capacity=2,
            max_capacity=2,
            existing_role=role,
            encryption_key=key,
            data_capture_percent=100,
            data_capture_bucket=capture,
            data_capture_prefix="captures/classifier",
            dashboard=False,
            endpoint_name_prefix="classifier",
        ),
    )
    synth(app)
    t = template_json(stack)
    types = [r["Type"] for r in t["Resources"].values()]
    assert "AWS::ApplicationAutoScaling::ScalableTarget" not in types and "AWS::CloudWatch::Dashboard" not in types
    assert (
        types.count("AWS::CloudWatch::Alarm") == 5
        and "AWS::S3::Bucket" not in types
        and types.count("AWS::KMS::Key") == 1
    )
    assert ep.role is role and ep.scalable_target is None and ep.dashboard is None
    assert ep.endpoint_name.startswith("classifier-") and len(ep.endpoint_name) == len("classifier-") + 8

    (model,) = [r for r in t["Resources"].values() if r["Type"] == "AWS::SageMaker::Model"]
    container = model["Properties"]["PrimaryContainer"]
    assert container["ModelDataSource"]["S3DataSource"]["S3Uri"] == "s3://team-models/classifier/v3/"
    assert "MODEL_PATH" not in container["Environment"]  # the entrypoint finds the one .gguf
    assert flatten(container["Image"]).endswith("/engines/llama-server:2026-11")
    (endpoint,) = [r for r in t["Resources"].values() if r["Type"] == "AWS::SageMaker::Endpoint"]
    assert "RetainAllVariantProperties" not in endpoint["Properties"]
    (log_group,) = [r for r in t["Resources"].values() if r["Type"] == "AWS::Logs::LogGroup"]
    assert "KmsKeyId" not in log_group["Properties"]  # a key it did not create may not allow CloudWatch Logs

    statements = [
        st
        for r in t["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy"
        for st in r["Properties"]["PolicyDocument"]["Statement"]
    ]
    by_sid = {st.get("Sid"): st for st in statements}
    assert flatten(by_sid["ReadModelPrefix"]["Resource"]) == "arn:<AWS::Partition>:s3:::team-models/classifier/v3/*"
    assert by_sid["ListModelPrefix"]["Condition"] == {"StringLike": {"s3:prefix": ["classifier/v3/*"]}}
    assert (
        flatten(by_sid["WriteDataCapture"]["Resource"])
        == "arn:<AWS::Partition>:s3:::team-captures/captures/classifier/*"
    )
    decrypt = [st for st in statements if st["Action"] == "kms:Decrypt"]
    assert [st["Resource"] for st in decrypt] == [
        "arn:aws:kms:eu-west-1:123456789012:key/11111111-2222-3333-4444-555555555555"
    ]
    assert nag_errors(stack) == []
    assert cfn_lint_errors(t) == []
