"""The OpenAI escalation's API key from AWS Secrets Manager (the EKS setup): moto's server plays Secrets Manager
(reached through botocore's AWS_ENDPOINT_URL_SECRETS_MANAGER, as a VPC endpoint would be), and the LLM is a real
llama-server started with --api-key, which refuses requests without that Bearer key."""

from __future__ import annotations

import json
import logging
import time

import httpx
import pytest

from tests.runtime.router.harness import COMPLEX, SLM_ALIAS, chat, router_config, running_router
from tests.support.engine import llama_server

pytestmark = pytest.mark.engine

KEY = "sk-router-test-7f3c9a1e5b"
STALE = "sk-stale-key-0d2e4b6a"
KEYED_ALIAS = "llm-keyed"
REFRESH_MINUTES = 0.025  # 1.5 s: the periodic re-read is observable within the test


@pytest.fixture(scope="module")
def keyed_llm(llama_server_bin, smollm2_gguf):
    with llama_server(
        llama_server_bin, smollm2_gguf, "-t", "1", "-c", "1024", "-np", "1", "--api-key", KEY, "--alias", KEYED_ALIAS
    ) as url:
        yield url


@pytest.fixture(scope="module")
def moto_url():
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="module")
def secrets(moto_url):
    import boto3

    return boto3.client(
        "secretsmanager",
        region_name="us-east-1",
        endpoint_url=moto_url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


@pytest.fixture(scope="module")
def secret_arn(secrets):
    return secrets.create_secret(Name="router/llm-api-key", SecretString=json.dumps({"api_key": KEY}))["ARN"]


@pytest.fixture(scope="module")
def router(slm, keyed_llm, moto_url, secret_arn, tmp_path_factory):
    esc = {
        "kind": "openai",
        "url": f"{keyed_llm}/v1",
        "api_key_secret_arn": secret_arn,
        "region": "us-east-1",
        "api_key_refresh_minutes": REFRESH_MINUTES,
    }
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_ENDPOINT_URL_SECRETS_MANAGER": moto_url,
    }
    with running_router(
        router_config(slm, "http://unused", escalation=esc), tmp_path_factory.mktemp("secret"), env=env
    ) as r:
        yield r


def test_the_key_from_the_secret_goes_to_the_llm_as_bearer(router, keyed_llm):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    assert (
        httpx.post(f"{keyed_llm}/v1/chat/completions", json=body, timeout=60).status_code == 401
    )  # the engine wants the key
    resp = chat(router.url, COMPLEX[0])
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-router-route"] == "llm" and "x-router-fallback" not in resp.headers
    assert resp.json()["model"] == KEYED_ALIAS
    log = router.log.read_text(errors="replace")
    assert f"API key read from secret {router_secret(router)}" in log
    assert KEY not in log


def test_rotation_is_read_periodically_and_after_a_401(router, secrets, secret_arn):
    # A wrong key in the secret: read at the next refresh; the LLM answers 401, the re-read brings the same
    # key, so the LLM counts as unavailable and the SLM answers.
    secrets.put_secret_value(SecretId=secret_arn, SecretString=STALE)  # a raw string secret
    time.sleep(REFRESH_MINUTES * 60 + 0.3)
    resp = chat(router.url, COMPLEX[1])
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-router-route"] == "slm" and resp.headers["x-router-fallback"] == "llm-unavailable"
    assert resp.json()["model"] == SLM_ALIAS
    # The right key again, as JSON {"token": ...}: the cached stale key gets a 401, the router re-reads the
    # secret at once (no waiting for the refresh period) and the same request goes through.
    secrets.put_secret_value(SecretId=secret_arn, SecretString=json.dumps({"token": KEY}))
    resp = chat(router.url, COMPLEX[2])
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-router-route"] == "llm" and "x-router-fallback" not in resp.headers
    log = router.log.read_text(errors="replace")
    assert KEY not in log and STALE not in log  # never logged


def router_secret(router) -> str:
    return json.loads((router.log.parent / "router.json").read_text())["escalation"]["api_key_secret_arn"]
