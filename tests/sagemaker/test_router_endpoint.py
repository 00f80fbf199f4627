"""RouterEndpoint: the SLM pre-filter's router on SageMaker. The config it ships in ROUTER_CONFIG_JSON is checked
by the router's own loader (containers/router/slm_router/config.py); the role may invoke only its SLM and LLM
(endpoints or the one Bedrock model); cdk-nag and cfn-lint run on the synthesized templates (synthesized once)."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk.assertions import Template

from cpu_inference import sizing
from cpu_inference._internal.nag import flatten
from cpu_inference.images import LlamaCppImage
from cpu_inference.patterns.serving_foundation import ROUTER_IMAGE
from cpu_inference.sagemaker import (
    EngineImage,
    GravitonEndpoint,
    GravitonEndpointProps,
    RouterEndpoint,
    RouterEndpointProps,
    RouterEscalation,
)
from tests.sagemaker.readme import examples
from tests.support.cdk import apply_nag, cfn_lint_errors, nag_errors, synth, template_json

ROUTER_DIR = Path(__file__).resolve().parents[2] / "containers" / "router"
sys.path.insert(0, str(ROUTER_DIR))
try:
    from slm_router import config as router_config  # the router's own loader: plain Python, no AWS
finally:
    sys.path.remove(str(ROUTER_DIR))

ENV = cdk.Environment(account="123456789012", region="us-east-1")
DIGEST = "sha256:" + "ef" * 32
HAIKU = "anthropic.claude-3-5-haiku-20241022-v1:0"
SHOTS = ({"text": "Hello!", "label": "simple"}, {"text": "Write a B-tree in Rust with tests.", "label": "complex"})


@dataclass
class Routers:
    app: cdk.App
    stack: cdk.Stack
    agnostic: cdk.Stack
    slm: GravitonEndpoint
    llm: GravitonEndpoint
    router_image: LlamaCppImage
    routers: dict[str, RouterEndpoint]
    template: dict[str, Any]
    agnostic_template: dict[str, Any]

    def resource(self, construct: Any, template: dict[str, Any] | None = None) -> dict[str, Any]:
        element = construct if isinstance(construct, cdk.CfnElement) else construct.node.default_child
        stack = cdk.Stack.of(element)
        return (template or (self.template if stack is self.stack else self.agnostic_template))["Resources"][
            stack.get_logical_id(element)
        ]

    def logical_id(self, construct: Any) -> str:
        element = construct if isinstance(construct, cdk.CfnElement) else construct.node.default_child
        return cdk.Stack.of(element).get_logical_id(element)


def _endpoints(stack: cdk.Stack) -> tuple[GravitonEndpoint, GravitonEndpoint]:
    repo = ecr.Repository.from_repository_name(stack, "EngineRepo", "llama-server")
    image = EngineImage(repo, digest=DIGEST)
    slm = GravitonEndpoint(
        stack,
        "Slm",
        props=GravitonEndpointProps(
            name="smollm2-1-7b",
            model="s3://my-models/models/smollm2/main/",
            model_file="SmolLM2-1.7B-Instruct-Q4_K_M.gguf",
            spec=sizing.ModelSpec(parameters_billions=1.7, quantization="Q4_K_M", context_window=2048, task="chat"),
            image=image,
            instance_type="ml.c7g.2xlarge",
        ),
    )
    llm = GravitonEndpoint(
        stack,
        "Llm",
        props=GravitonEndpointProps(
            name="llama-8b",
            model="s3://my-models/models/llama-8b/main/",
            model_file="Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
            spec=sizing.ModelSpec(parameters_billions=8, quantization="Q4_K_M", context_window=4096, task="chat"),
            image=image,
            instance_type="ml.c7g.8xlarge",
        ),
    )
    return slm, llm


def build() -> Routers:
    app = cdk.App()
    apply_nag(app)
    stack = cdk.Stack(app, "RouterSm", env=ENV)
    slm, llm = _endpoints(stack)
    router_image = LlamaCppImage(stack, "RouterImage", props=ROUTER_IMAGE)
    vpc = ec2.Vpc(
        stack,
        "Vpc",
        max_azs=2,
        nat_gateways=0,
        flow_logs={"all": ec2.FlowLogOptions()},
        subnet_configuration=[ec2.SubnetConfiguration(name="isolated", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)],
    )
    routers = {
        "sagemaker": RouterEndpoint(
            stack,
            "Router",
            props=RouterEndpointProps(
                image=router_image,
                slm=slm,
                escalation=RouterEscalation.sagemaker(llm),
                few_shot=SHOTS,
                confidence_threshold=0.8,
            ),
        ),
        "bedrock": RouterEndpoint(
            stack,
            "BedrockRouter",
            props=RouterEndpointProps(
                name="bedrock-router",
                image=router_image,
                slm="Existing-Slm",
                escalation=RouterEscalation.bedrock(HAIKU),
                vpc=vpc,
                min_capacity=1,
                max_capacity=1,
                config_overrides={"timeouts": {"total_s": 55}, "log_level": "DEBUG"},
            ),
        ),
        "openai": RouterEndpoint(
            stack,
            "OpenAiRouter",
            props=RouterEndpointProps(
                name="openai-router",
                image=router_image,
                slm=slm,
                escalation=RouterEscalation.openai("http://llm.internal:8000/v1", model_id="big"),
                vpc=vpc,
            ),
        ),
    }
    agnostic = cdk.Stack(app, "RouterAgnostic")  # no account/Region: both are deploy-time values
    repo = ecr.Repository.from_repository_name(agnostic, "RouterRepo", "slm-router")
    routers["agnostic"] = RouterEndpoint(
        agnostic,
        "Router",
        props=RouterEndpointProps(
            image=EngineImage(repo, tag="router-1", architectures=("arm64",)),
            slm="smollm2",
            escalation=RouterEscalation.bedrock(HAIKU),
        ),
    )
    synth(app)
    return Routers(app, stack, agnostic, slm, llm, router_image, routers, template_json(stack), template_json(agnostic))


@pytest.fixture(scope="session")
def r() -> Routers:
    return build()


def _env(r: Routers, key: str) -> dict[str, Any]:
    return r.resource(r.routers[key].model)["Properties"]["PrimaryContainer"]["Environment"]


def _resolve(value: Any, pseudo: dict[str, str]) -> str:
    """A CloudFormation string (Fn::Join of literals and pseudo-parameter Refs) as it is at deploy time."""
    if isinstance(value, str):
        return value
    if "Ref" in value:
        return pseudo[value["Ref"]]
    sep, parts = value["Fn::Join"]
    return sep.join(_resolve(p, pseudo) for p in parts)


def _load(config_json: str) -> router_config.Config:
    """The router's own loader, fed the environment SageMaker gives the container."""
    return router_config.load({"ROUTER_CONFIG_JSON": config_json, "ROUTER_PORT": "8080"})


def _statements(r: Routers, key: str) -> list[dict[str, Any]]:
    router = r.routers[key]
    template = r.template if cdk.Stack.of(router) is r.stack else r.agnostic_template
    role_id = r.logical_id(router.role.node.default_child)
    out = [
        s
        for res in template["Resources"].values()
        if res["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in res["Properties"]["Roles"]
        for s in res["Properties"]["PolicyDocument"]["Statement"]
    ]
    assert out, f"no policy on the {key} router's role"
    return out


def _as_list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else [v]


def _invoke_resources(r: Routers, key: str, prefix: str) -> set[str]:
    return {
        flatten(res)
        for s in _statements(r, key)
        if any(a.startswith(prefix) for a in _as_list(s["Action"]))
        for res in _as_list(s["Resource"])
    }


# -- the router's config ----------------------------------------------------------------------------------


def test_environment_is_the_compact_router_config_and_port(r: Routers) -> None:
    env = _env(r, "sagemaker")
    assert set(env) == {"ROUTER_CONFIG_JSON", "ROUTER_PORT"} and env["ROUTER_PORT"] == "8080"
    raw = env["ROUTER_CONFIG_JSON"]
    assert raw == json.dumps(json.loads(raw), separators=(",", ":")) and len(raw.encode()) <= 1024
    assert json.loads(raw) == {
        "labels": ["simple", "complex"],
        "slm_labels": ["simple"],
        "confidence_threshold": 0.8,
        "max_in_flight": 64,
        "slm_endpoint_name": r.slm.endpoint_name,
        "slm_region": "us-east-1",
        "escalation": {"kind": "sagemaker", "endpoint_name": r.llm.endpoint_name, "region": "us-east-1"},
        "few_shot": list(SHOTS),
    }


@pytest.mark.parametrize("key", ["sagemaker", "bedrock", "openai"])
def test_router_loader_accepts_the_config(r: Routers, key: str) -> None:
    """Everything but the pending SLM-endpoint keys, through the router's own validation."""
    cfg = _load(_env(r, key)["ROUTER_CONFIG_JSON"])
    assert (cfg.mode, cfg.listen_port, cfg.max_in_flight) == ("router", 8080, 64)
    e = cfg.escalation
    if key == "sagemaker":
        assert (e.kind, e.endpoint_name, e.region) == ("sagemaker", r.llm.endpoint_name, "us-east-1")
        assert cfg.few_shot == tuple(router_config.FewShot(**s) for s in SHOTS) and cfg.confidence_threshold == 0.8
    elif key == "bedrock":
        assert (e.kind, e.model_id, e.region) == ("bedrock", HAIKU, "us-east-1")
        assert cfg.timeouts.total_s == 55 and cfg.log_level == "DEBUG"
        assert cfg.few_shot == router_config.Config().few_shot  # the router's built-in examples
    else:
        assert (e.kind, e.url, e.model_id, e.api_key_env, e.api_key_file) == (
            "openai",
            "http://llm.internal:8000/v1",
            "big",
            "",
            "",
        )


def test_router_loader_accepts_the_slm_endpoint_keys(r: Routers) -> None:
    cfg = _load(_env(r, "sagemaker")["ROUTER_CONFIG_JSON"])
    assert (cfg.slm_endpoint_name, cfg.slm_region) == (r.slm.endpoint_name, "us-east-1")  # type: ignore[attr-defined]


def test_env_agnostic_stack_fills_the_region_at_deploy_time(r: Routers) -> None:
    value = _env(r, "agnostic")["ROUTER_CONFIG_JSON"]
    assert "Fn::Join" in value and {"Ref": "AWS::Region"} in value["Fn::Join"][1]
    raw = _resolve(value, {"AWS::Region": "eu-west-1"})
    cfg = _load(raw)
    assert (cfg.escalation.kind, cfg.escalation.region) == ("bedrock", "eu-west-1")
    assert json.loads(raw)["slm_region"] == "eu-west-1" and json.loads(raw)["slm_endpoint_name"] == "smollm2"


# -- model, endpoint config, endpoint ---------------------------------------------------------------------


def test_model_runs_the_router_image_without_model_data_and_not_isolated(r: Routers) -> None:
    model = r.resource(r.routers["sagemaker"].model)["Properties"]
    container = model["PrimaryContainer"]
    # The router instance's own architecture's image, not the manifest list.
    arch = r.routers["sagemaker"].instance.arch
    assert flatten(container["Image"]) == flatten(r.stack.resolve(r.router_image.image_uri_for(arch)))
    assert flatten(container["Image"]).endswith(f".Digest-{arch}>")
    assert "ModelDataSource" not in container and "ModelDataUrl" not in container and container["Mode"] == "SingleModel"
    assert model["EnableNetworkIsolation"] is False  # it calls SageMaker Runtime / Bedrock
    assert "ModelName" not in model and "VpcConfig" not in model
    vpc_model = r.resource(r.routers["bedrock"].model)["Properties"]
    assert len(vpc_model["VpcConfig"]["Subnets"]) == 2 and len(vpc_model["VpcConfig"]["SecurityGroupIds"]) == 1


def test_endpoint_config_is_a_small_graviton_instance_with_kms_volume(r: Routers) -> None:
    router = r.routers["sagemaker"]
    config = r.resource(router.endpoint_config)["Properties"]
    (variant,) = config["ProductionVariants"]
    assert (variant["InstanceType"], variant["InitialInstanceCount"], variant["VariantName"]) == (
        "ml.c7g.large",
        2,
        "AllTraffic",
    )
    assert "ModelDataDownloadTimeoutInSeconds" not in variant and "EndpointConfigName" not in config
    assert config["KmsKeyId"] == {"Fn::GetAtt": [r.logical_id(router.key), "Arn"]}
    key = r.resource(router.key)["Properties"]
    assert key["EnableKeyRotation"] is True
    log_group = r.resource(router.log_group)["Properties"]
    assert log_group["LogGroupName"] == f"/aws/sagemaker/Endpoints/{router.endpoint_name}" and "KmsKeyId" in log_group


def test_endpoint_name_is_generated_per_placement_and_waits_for_its_models(r: Routers) -> None:
    router = r.routers["sagemaker"]
    assert re.fullmatch(r"routersm-router-[0-9a-f]{8}", router.endpoint_name)
    names = {x.endpoint_name for x in r.routers.values()} | {r.slm.endpoint_name, r.llm.endpoint_name}
    assert len(names) == 6
    endpoint = r.resource(router.endpoint)
    assert endpoint["Properties"]["EndpointName"] == router.endpoint_name
    assert {r.logical_id(r.slm.endpoint), r.logical_id(r.llm.endpoint)} <= set(endpoint["DependsOn"])
    # Another instance type: another endpoint name and logical ID (replaced, not updated in place).
    app = cdk.App()
    stack = cdk.Stack(app, "RouterSm", env=ENV)
    repo = ecr.Repository.from_repository_name(stack, "Repo", "slm-router")
    moved = RouterEndpoint(
        stack,
        "Router",
        props=RouterEndpointProps(
            image=EngineImage(repo, digest=DIGEST),
            slm="smollm2",
            escalation=RouterEscalation.bedrock(HAIKU),
            instance_type="ml.c7g.xlarge",
        ),
    )
    assert moved.endpoint_name != router.endpoint_name and moved.endpoint_name.startswith("routersm-router-")
    assert stack.get_logical_id(moved.endpoint).startswith("RouterEndpointMlC7gXlarge")
    assert r.logical_id(router.endpoint).startswith("RouterEndpointMlC7gLarge")


# -- least privilege ---------------------------------------------------------------------------------------


def test_sagemaker_router_invokes_only_the_slm_and_llm_endpoints(r: Routers) -> None:
    statements = _statements(r, "sagemaker")
    invoke = [s for s in statements if any(a.startswith("sagemaker:") for a in _as_list(s["Action"]))]
    assert {a for s in invoke for a in _as_list(s["Action"])} == {
        "sagemaker:InvokeEndpoint",
        "sagemaker:InvokeEndpointWithResponseStream",
    }
    assert _invoke_resources(r, "sagemaker", "sagemaker:") == {
        f"<{r.logical_id(r.slm.endpoint)}>",
        f"<{r.logical_id(r.llm.endpoint)}>",
    }
    assert not [
        s
        for s in statements
        if any(a.startswith(("bedrock:", "secretsmanager:", "s3:")) for a in _as_list(s["Action"]))
    ]


def test_role_pulls_only_the_router_image_and_writes_only_its_logs(r: Routers) -> None:
    router = r.routers["sagemaker"]
    statements = _statements(r, "sagemaker")
    repo = f"<{r.logical_id(r.router_image.repository)}.Arn>"
    for s in statements:
        actions = set(_as_list(s["Action"]))
        resources = {flatten(x) for x in _as_list(s["Resource"])}
        if actions & {"ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"}:
            assert resources == {repo}
        if any(a.startswith("logs:") for a in actions):
            assert resources == {f"<{r.logical_id(router.log_group)}.Arn>"}
        if "*" in resources:
            assert actions in ({"ecr:GetAuthorizationToken"}, {"cloudwatch:PutMetricData"}), s
            if actions == {"cloudwatch:PutMetricData"}:
                assert s["Condition"] == {"StringLike": {"cloudwatch:namespace": "/aws/sagemaker/*"}}


def test_bedrock_router_invokes_only_one_foundation_model_arn(r: Routers) -> None:
    assert _invoke_resources(r, "bedrock", "bedrock:") == {
        f"arn:<AWS::Partition>:bedrock:us-east-1::foundation-model/{HAIKU}"
    }
    assert {a for s in _statements(r, "bedrock") for a in _as_list(s["Action"]) if a.startswith("bedrock:")} == {
        "bedrock:InvokeModel",
        "bedrock:InvokeModelWithResponseStream",
    }
    # The SLM given by name: its ARN, lowercased as SageMaker reports endpoint ARNs.
    assert _invoke_resources(r, "bedrock", "sagemaker:") == {
        "arn:<AWS::Partition>:sagemaker:us-east-1:123456789012:endpoint/existing-slm"
    }
    # Partition and Region follow the deployment in an env-agnostic stack.
    assert _invoke_resources(r, "agnostic", "bedrock:") == {
        f"arn:<AWS::Partition>:bedrock:<AWS::Region>::foundation-model/{HAIKU}"
    }
    assert _invoke_resources(r, "agnostic", "sagemaker:") == {
        "arn:<AWS::Partition>:sagemaker:<AWS::Region>:<AWS::AccountId>:endpoint/smollm2"
    }


def test_openai_router_invokes_only_the_slm_and_reaches_the_url_port(r: Routers) -> None:
    router = r.routers["openai"]
    assert _invoke_resources(r, "openai", "sagemaker:") == {f"<{r.logical_id(r.slm.endpoint)}>"}
    assert not _invoke_resources(r, "openai", "bedrock:")
    (sg,) = router.security_groups
    egress = r.resource(sg)["Properties"]["SecurityGroupEgress"]
    assert sorted((e["FromPort"], e["ToPort"], e["CidrIp"]) for e in egress) == [
        (443, 443, "0.0.0.0/0"),
        (8000, 8000, "0.0.0.0/0"),
    ]
    assert "SecurityGroupIngress" not in r.resource(sg)["Properties"]


def test_vpc_permissions_are_limited_to_the_vpc(r: Routers) -> None:
    eni = [s for s in _statements(r, "bedrock") if "ec2:CreateNetworkInterface" in _as_list(s["Action"])]
    assert len(eni) == 1 and "ec2:Vpc" in eni[0]["Condition"]["ArnEquals"]
    assert not [s for s in _statements(r, "sagemaker") if any(a.startswith("ec2:") for a in _as_list(s["Action"]))]


def test_grant_invoke_lets_a_client_call_the_router_only(r: Routers) -> None:
    from aws_cdk import aws_iam as iam

    stack = cdk.Stack(cdk.App(), "Client", env=ENV)
    repo = ecr.Repository.from_repository_name(stack, "Repo", "slm-router")
    router = RouterEndpoint(
        stack,
        "Router",
        props=RouterEndpointProps(
            image=EngineImage(repo, digest=DIGEST),
            slm="smollm2",
            escalation=RouterEscalation.bedrock(HAIKU),
            dashboard=False,
        ),
    )
    client = iam.Role(stack, "Client", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    router.grant_invoke(client)
    doc = stack.resolve(client.node.find_child("DefaultPolicy").document)
    (statement,) = doc["Statement"]
    assert statement["Resource"] == {"Ref": stack.get_logical_id(router.endpoint)}
    assert statement["Action"] == ["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"]


# -- scaling and alarms -------------------------------------------------------------------------------------


def test_autoscaling_tracks_in_flight_requests(r: Routers) -> None:
    router = r.routers["sagemaker"]
    target = r.resource(router.scalable_target)["Properties"]
    assert (target["MinCapacity"], target["MaxCapacity"]) == (2, 4)
    assert (
        flatten(target["ResourceId"]) == f"endpoint/<{r.logical_id(router.endpoint)}.EndpointName>/variant/AllTraffic"
    )
    tracking = r.resource(router.scaling_policy)["Properties"]["TargetTrackingScalingPolicyConfiguration"]
    assert (
        tracking["PredefinedMetricSpecification"]["PredefinedMetricType"]
        == "SageMakerVariantConcurrentRequestsPerModelHighResolution"
    )
    assert tracking["TargetValue"] == 48 == 0.75 * router.props.max_in_flight
    assert (tracking["ScaleOutCooldown"], tracking["ScaleInCooldown"]) == (60, 300)
    assert r.resource(router.endpoint)["Properties"]["RetainAllVariantProperties"] is True
    fixed = r.routers["bedrock"]
    assert (
        fixed.scalable_target is None and "RetainAllVariantProperties" not in r.resource(fixed.endpoint)["Properties"]
    )


def test_alarms_watch_the_router_endpoint(r: Routers) -> None:
    router = r.routers["sagemaker"]
    assert set(router.alarms) == {"latency_p95", "errors_4xx", "errors_5xx", "cpu", "memory"}
    latency = r.resource(router.alarms["latency_p95"])["Properties"]
    assert latency["Threshold"] == 10_000_000  # 10 s SLO in microseconds (end to end, generation included)
    assert {"Name": "EndpointName", "Value": router.endpoint_name} in latency["Dimensions"]
    cpu = r.resource(router.alarms["cpu"])["Properties"]
    assert "cpu / 2" in json.dumps(cpu["Metrics"])  # ml.c7g.large: 2 vCPUs
    assert "429" in r.resource(router.alarms["errors_4xx"])["Properties"]["AlarmDescription"]
    assert router.dashboard is not None


# -- checkers ----------------------------------------------------------------------------------------------


def test_cdk_nag_clean(r: Routers) -> None:
    assert nag_errors(r.stack) == []
    assert nag_errors(r.agnostic) == []


def test_cfn_lint_clean(r: Routers) -> None:
    assert cfn_lint_errors(r.template) == []
    assert cfn_lint_errors(r.agnostic_template) == []


# -- props errors --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def repo() -> ecr.IRepository:
    return ecr.Repository.from_repository_name(cdk.Stack(cdk.App(), "Props"), "Repo", "slm-router")


@pytest.fixture
def props(repo: ecr.IRepository) -> RouterEndpointProps:
    return RouterEndpointProps(
        image=EngineImage(repo, digest=DIGEST), slm="smollm2", escalation=RouterEscalation.bedrock(HAIKU)
    )


def test_valid_props_pass(props: RouterEndpointProps) -> None:
    props.validate()
    assert props.scales and props.initial_count == 2 and props.target_in_flight() == 48


LONG_SHOTS = tuple(
    {"text": f"Example request number {i} that is rather long for a router prompt", "label": "simple"}
    for i in range(16)
)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name": "Router_1"}, r"RouterEndpointProps\.name must be a DNS label"),
        ({"slm": "bad name!"}, r"RouterEndpointProps\.slm 'bad name!' is not a SageMaker endpoint name"),
        (
            {"slm": 42},
            r"RouterEndpointProps\.slm must be a GravitonEndpoint or the name of an existing SageMaker endpoint",
        ),
        (
            {"escalation": RouterEscalation.sagemaker("smollm2")},
            r"the SLM's own endpoint cannot be the escalation target",
        ),
        (
            {"escalation": RouterEscalation(kind="sagemaker")},
            r"kind sagemaker needs endpoint .*RouterEscalation\.sagemaker\(llm\)",
        ),
        (
            {"escalation": RouterEscalation(kind="azure")},
            r"RouterEscalation\.kind must be sagemaker, bedrock or openai, got 'azure'",
        ),
        ({"escalation": RouterEscalation.bedrock("")}, r"kind bedrock needs model_id"),
        (
            {"escalation": RouterEscalation.bedrock("us.anthropic.claude-3-5-haiku-20241022-v1:0")},
            r"cross-Region inference profile.*give the foundation-model id 'anthropic\.claude-3-5-haiku-20241022-v1:0'",
        ),
        ({"escalation": RouterEscalation.bedrock("arn:aws:bedrock:us-east-1::foundation-model/x.y")}, r"not an ARN"),
        ({"escalation": RouterEscalation.bedrock("claude")}, r"'claude' is not a Bedrock foundation-model id"),
        (
            {"escalation": RouterEscalation.openai("llm.internal/v1")},
            r"RouterEscalation\.url: kind openai needs the LLM's http\(s\) base URL",
        ),
        (
            {"escalation": RouterEscalation.openai("https://api.example.com/v1", api_key_secret="llm-key")},
            r"api_key_secret: a router on SageMaker cannot receive an API key .*RouterEscalation\.bedrock.*run the router on EKS",
        ),
        ({"labels": ("simple",)}, r"labels needs at least two distinct labels"),
        (
            {"labels": ("easy", "hard"), "slm_labels": ("easy",)},
            r"few_shot: labels \['easy', 'hard'\] need their own examples",
        ),
        ({"slm_labels": ("simple", "complex")}, r"slm_labels must be a non-empty strict subset of labels"),
        ({"slm_labels": ("easy",)}, r"slm_labels must be a non-empty strict subset"),
        ({"confidence_threshold": 1.5}, r"confidence_threshold must be within 0\.\.1"),
        (
            {"few_shot": ({"text": "hi", "label": "medium"},)},
            r"few_shot\[0\] needs exactly the keys text \(non-empty\) and label \(one of",
        ),
        (
            {"few_shot": LONG_SHOTS},
            r"the router config is \d+ bytes as JSON but SageMaker allows 1024 bytes per environment value .*shorten few_shot \(16 examples\)",
        ),
        (
            {"config_overrides": {"slm_url": "http://x"}},
            r"config_overrides may not set slm_url: the construct sets them",
        ),
        ({"max_in_flight": 0}, r"max_in_flight must be >= 1"),
        ({"instance_type": "c7g.large"}, r"instance_type must be a SageMaker instance type such as ml\.c7g\.large"),
        ({"instance_type": "ml.g5.xlarge"}, r"'ml\.g5\.xlarge' is not a SageMaker CPU instance in the catalog"),
        (
            {"instance_type": "ml.c7i.large", "image": "x"},
            r"image must be a LlamaCppImage .* or an EngineImage, got str",
        ),
        ({"min_capacity": 0}, r"min_capacity must be >= 1 \(SageMaker real-time endpoints cannot scale to zero\)"),
        ({"min_capacity": 5}, r"max_capacity \(4\) must be >= min_capacity \(5\)"),
        (
            {"initial_instance_count": 9},
            r"initial_instance_count \(9\) must be within min_capacity\.\.max_capacity \(2\.\.4\)",
        ),
        ({"target_concurrency": 100}, r"target_concurrency must be > 0 and <= max_in_flight \(64"),
        (
            {"startup_health_check_timeout": cdk.Duration.seconds(10)},
            r"startup_health_check_timeout must be 60\.\.3600 seconds",
        ),
        ({"vpc_subnets": ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)}, r"vpc_subnets need a vpc"),
        ({"error_rate_5xx_percent": 0}, r"error_rate_5xx_percent must be in \(0, 100\]"),
        ({"endpoint_name_prefix": "-x"}, r"endpoint_name_prefix must be letters, digits and '-'"),
    ],
)
def test_bad_props_name_the_key_and_the_fix(props: RouterEndpointProps, change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(props, **change).validate()


def test_image_architecture_must_match_the_instance(props: RouterEndpointProps, repo: ecr.IRepository) -> None:
    x86_only = dataclasses.replace(props, image=EngineImage(repo, digest=DIGEST, architectures=("amd64",)))
    with pytest.raises(
        ValueError,
        match=r"image has no arm64 build \(amd64\) but ml\.c7g\.large is arm64 — build the router image for arm64",
    ):
        x86_only.validate()
    dataclasses.replace(x86_only, instance_type="ml.c7i.large").validate()


def test_graviton_endpoint_as_slm_and_escalation_must_differ() -> None:
    stack = cdk.Stack(cdk.App(), "Same", env=ENV)
    slm, _ = _endpoints(stack)
    repo = ecr.Repository.from_repository_name(stack, "Repo", "slm-router")
    with pytest.raises(ValueError, match=r"the SLM's own endpoint cannot be the escalation target"):
        RouterEndpoint(
            stack,
            "Router",
            props=RouterEndpointProps(
                image=EngineImage(repo, digest=DIGEST), slm=slm, escalation=RouterEscalation.sagemaker(slm)
            ),
        )


# -- the README ----------------------------------------------------------------------------------------------------


def test_readme_router_example_synthesizes() -> None:
    ns: dict = {}
    exec(compile(examples()["router"], "README.md#router", "exec"), ns)
    router, stack = ns["router"], ns["stack"]
    resources = Template.from_stack(stack).to_json()["Resources"]
    env = resources[stack.get_logical_id(router.model)]["Properties"]["PrimaryContainer"]["Environment"]
    raw = _resolve(env["ROUTER_CONFIG_JSON"], {"AWS::Region": "eu-central-1"})  # an env-agnostic stack
    cfg = _load(raw)
    assert (cfg.escalation.kind, cfg.escalation.endpoint_name, cfg.escalation.region) == (
        "sagemaker",
        ns["llm"].endpoint_name,
        "eu-central-1",
    )
    assert cfg.confidence_threshold == 0.8 and json.loads(raw)["slm_endpoint_name"] == ns["slm"].endpoint_name
    (variant,) = resources[stack.get_logical_id(router.endpoint_config)]["Properties"]["ProductionVariants"]
    assert variant["InstanceType"] == "ml.c7g.large"
