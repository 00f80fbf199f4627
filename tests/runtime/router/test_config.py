"""The router's config contract: JSON file / inline JSON + ROUTER_* overrides, one precise line per error."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from slm_router import config as rc
from tests.runtime.router.harness import ROUTER_DIR

LLM = {"escalation": {"kind": "openai", "url": "http://llm:8080/v1"}}


def test_defaults_with_a_file_and_env_overrides(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({**LLM, "confidence_threshold": 0.8, "few_shot": [{"text": "hi", "label": "simple"}]}))
    cfg = rc.load(
        {
            "ROUTER_CONFIG": str(path),
            "ROUTER_SLM_URL": "http://slm:8080",
            "ROUTER_CONFIDENCE_THRESHOLD": "0.75",
            "ROUTER_ESCALATION_MODEL_ID": "big",
        }
    )
    assert cfg.slm_url == "http://slm:8080"
    assert cfg.confidence_threshold == 0.75  # env wins over the file
    assert cfg.escalation.model_id == "big" and cfg.escalation.url == "http://llm:8080/v1"
    assert cfg.few_shot == (rc.FewShot("hi", "simple"),)
    assert cfg.labels == ("simple", "complex") and cfg.slm_labels == ("simple",)


def test_inline_json_and_aws_kinds():
    cfg = rc.load(
        {
            "ROUTER_CONFIG_JSON": json.dumps(
                {"escalation": {"kind": "bedrock", "model_id": "amazon.nova-pro-v1:0", "region": "us-east-1"}}
            )
        }
    )
    assert cfg.escalation.kind == "bedrock"
    cfg = rc.load({"ROUTER_CONFIG_JSON": json.dumps({"escalation": {"kind": "sagemaker", "endpoint_name": "llm"}})})
    assert cfg.escalation.endpoint_name == "llm"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({**LLM, "labels": ["simple"]}, "labels: need at least 2 labels"),
        ({**LLM, "labels": ["a", "a"]}, "labels: duplicates"),
        ({**LLM, "slm_labels": ["easy"]}, "slm_labels[0]: 'easy' is not one of labels"),
        ({**LLM, "slm_labels": ["simple", "complex"]}, "nothing would ever escalate"),
        ({**LLM, "confidence_threshold": 1.5}, "confidence_threshold: must be within [0, 1]"),
        ({**LLM, "confidence_threshold": "high"}, "confidence_threshold: must be a number"),
        (
            {**LLM, "few_shot": [{"text": "hi", "label": "trivial"}]},
            "few_shot[0].label: 'trivial' is not one of labels",
        ),
        ({**LLM, "few_shot": [{"text": "hi"}]}, "few_shot[0].label: required"),
        ({**LLM, "few_shot": [{"text": "hi", "label": "simple", "why": 1}]}, "few_shot[0].why: unknown key"),
        ({**LLM, "timeouts": {"classify_s": 0}}, "timeouts.classify_s: must be > 0"),
        ({**LLM, "timeouts": {"classify": 1}}, "timeouts.classify: unknown key"),
        ({"escalation": {"kind": "openai"}}, "escalation.url: kind openai needs"),
        ({"escalation": {"kind": "sagemaker"}}, "escalation.endpoint_name: kind sagemaker needs"),
        ({"escalation": {"kind": "bedrock"}}, "escalation.model_id: kind bedrock needs"),
        (
            {"escalation": {"kind": "vertex", "url": "http://x"}},
            "escalation.kind: must be openai, sagemaker or bedrock",
        ),
        ({**LLM, "slm_url": "slm:8080"}, "slm_url: must be an http(s) URL"),
        ({**LLM, "slm_endpoint_name": "-slm"}, "slm_endpoint_name: must be a SageMaker endpoint name"),
        ({**LLM, "slm_endpoint_name": "slm_1"}, "slm_endpoint_name: must be a SageMaker endpoint name"),
        ({**LLM, "slm_endpoint_name": "a" * 64}, "slm_endpoint_name: must be a SageMaker endpoint name"),
        (
            {**LLM, "slm_endpoint_name": "slm", "slm_endpoint_url": "vpce.local"},
            "slm_endpoint_url: must be an http(s) URL",
        ),
        ({**LLM, "slm_region": "us-east-1"}, "slm_region: only used with slm_endpoint_name"),
        (
            {"escalation": {"kind": "bedrock", "model_id": "m", "api_key_secret_arn": "k"}},
            "escalation.api_key_secret_arn: only kind openai",
        ),
        (
            {"escalation": {**LLM["escalation"], "api_key_secret_arn": "my key"}},
            "escalation.api_key_secret_arn: must be a Secrets Manager secret ARN or name",
        ),
        (
            {"escalation": {**LLM["escalation"], "api_key_secret_arn": "k", "api_key_refresh_minutes": 0}},
            "escalation.api_key_refresh_minutes: must be > 0",
        ),
        ({**LLM, "top_logprobs": 50}, "top_logprobs: must be within [1, 20]"),
        ({**LLM, "threshold": 0.5}, "threshold: unknown key"),
        ({**LLM, "breaker": {"failure_threshold": 0}}, "breaker.failure_threshold: must be >= 1"),
        ({**LLM, "max_in_flight": 0}, "max_in_flight: must be >= 1"),
        ({**LLM, "mode": "proxy"}, "mode: must be router or gateway, got 'proxy'"),
        ({"mode": "gateway"}, "gateway.models: mode gateway needs at least one {name, url}"),
        (
            {
                "mode": "gateway",
                "gateway": {"models": [{"name": "a", "url": "http://a"}, {"name": "a", "url": "http://b"}]},
            },
            "gateway.models[1].name: 'a' appears twice",
        ),
        (
            {"mode": "gateway", "gateway": {"models": [{"name": "a", "url": "a:8080"}]}},
            "gateway.models[0].url: must be an http(s) URL",
        ),
        ({"mode": "gateway", "gateway": {"models": [{"name": "a"}]}}, "gateway.models[0].url: required"),
        (
            {"mode": "gateway", "gateway": {"models": {"a": "http://a"}}},
            "gateway.models: must be a list of {name, url} objects",
        ),
        (
            {"mode": "gateway", "gateway": {"models": [{"name": "a", "url": "http://a"}], "retry_after_s": 0}},
            "gateway.retry_after_s: must be >= 1",
        ),
    ],
)
def test_errors_name_the_key(data, message):
    with pytest.raises(rc.ConfigError) as e:
        rc.from_dict(data)
    assert message in str(e.value)


def test_slm_endpoint_keys_replace_slm_url():
    cfg = rc.load(
        {
            "ROUTER_CONFIG_JSON": json.dumps(
                {
                    **LLM,
                    "slm_url": "not a url",
                    "slm_region": "eu-west-1",
                    "slm_endpoint_url": "https://runtime.sagemaker.eu-west-1.amazonaws.com",
                }
            ),
            "ROUTER_SLM_ENDPOINT_NAME": "Smollm2-2-1a2b3c4d",
        }
    )
    assert (cfg.slm_endpoint_name, cfg.slm_region) == ("Smollm2-2-1a2b3c4d", "eu-west-1")  # slm_url is then ignored
    assert rc.from_dict({**LLM, "slm_endpoint_name": "a" * 63, "slm_endpoint_url": ""}).slm_endpoint_name == "a" * 63
    arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:router/llm-key-AbCdEf"
    for secret in (arn, "router/llm-key"):
        e = rc.from_dict({"escalation": {**LLM["escalation"], "api_key_secret_arn": secret}}).escalation
        assert (e.api_key_secret_arn, e.api_key_refresh_minutes) == (secret, 15.0)


def test_secret_values_the_key_is_read_from():
    from slm_router.secret_key import parse_secret

    assert parse_secret("  sk-raw\n") == "sk-raw"
    assert [parse_secret(json.dumps({k: "sk-1", "other": "x"})) for k in ("api_key", "token", "key")] == ["sk-1"] * 3
    assert parse_secret(json.dumps({"key": "k", "api_key": "a"})) == "a"  # api_key first
    assert parse_secret("{not json") == "{not json"  # a raw key that merely starts with a brace
    with pytest.raises(ValueError, match="the secret is empty"):
        parse_secret("  ")
    for bad in ({"password": "hunter2"}, {"api_key": ""}):
        with pytest.raises(ValueError, match="without a non-empty string field api_key / token / key") as e:
            parse_secret(json.dumps(bad))
        assert "hunter2" not in str(e.value)  # the message never carries the secret's content


def test_gateway_mode_needs_no_router_keys():
    cfg = rc.load(
        {
            "ROUTER_CONFIG_JSON": json.dumps(
                {"gateway": {"models": [{"name": "bge-small", "url": "http://bge-small:8080"}]}}
            ),
            "ROUTER_MODE": "gateway",
            "ROUTER_MAX_IN_FLIGHT": "64",
        }
    )
    assert cfg.mode == "gateway" and cfg.max_in_flight == 64
    assert (
        cfg.gateway.models == (rc.GatewayModel("bge-small", "http://bge-small:8080"),)
        and cfg.gateway.retry_after_s == 10
    )


def test_bad_env_and_missing_file(tmp_path):
    with pytest.raises(rc.ConfigError, match="ROUTER_PORT must be an integer, got 'http'"):
        rc.load({"ROUTER_CONFIG_JSON": json.dumps(LLM), "ROUTER_PORT": "http"})
    with pytest.raises(rc.ConfigError, match="does not exist"):
        rc.load({"ROUTER_CONFIG": str(tmp_path / "absent.json")})
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(rc.ConfigError, match="not valid JSON"):
        rc.load({"ROUTER_CONFIG": str(tmp_path / "bad.json")})


def test_entrypoint_reports_a_bad_config_in_one_line_and_exit_2():
    env = {"ROUTER_CONFIG_JSON": json.dumps({**LLM, "slm_labels": ["easy"]}), "PYTHONPATH": str(ROUTER_DIR)}
    out = subprocess.run([sys.executable, "-m", "slm_router"], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "router: config error: slm_labels[0]: 'easy' is not one of labels ['simple', 'complex']"
    ]
    ok = subprocess.run(
        [sys.executable, "-m", "slm_router", "--print-config"],
        env={**env, "ROUTER_CONFIG_JSON": json.dumps(LLM)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert ok.returncode == 0 and json.loads(ok.stdout)["escalation"]["url"] == "http://llm:8080/v1"
    # SageMaker starts the container with `serve`: port 8080 unless ROUTER_PORT says otherwise.
    sm = subprocess.run(
        [sys.executable, "-m", "slm_router", "serve", "--print-config"],
        env={**env, "ROUTER_CONFIG_JSON": json.dumps(LLM)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert sm.returncode == 0 and json.loads(sm.stdout)["listen_port"] == 8080
    bad = subprocess.run(
        [sys.executable, "-m", "slm_router", "serve", "--workers"],
        env={**env, "ROUTER_CONFIG_JSON": json.dumps(LLM)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert bad.returncode == 2 and "unknown arguments ['--workers']" in bad.stderr


def test_aws_region_env_is_honoured_when_the_config_names_none(monkeypatch) -> None:
    """botocore alone reads AWS_DEFAULT_REGION only; the router also takes AWS_REGION (what EKS and most SDKs set)."""
    from slm_router.aws import make_client
    from slm_router.config import Timeouts

    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.setenv("AWS_REGION", "eu-central-1")
    assert make_client("sagemaker-runtime", "", "", Timeouts()).meta.region_name == "eu-central-1"
    assert make_client("sagemaker-runtime", "us-west-2", "", Timeouts()).meta.region_name == "us-west-2"
