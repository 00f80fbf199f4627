"""The SageMaker Runtime emulator's SigV4 check is a real check: requests signed by botocore verify, and
any change to what was signed (body, path, secret, region, time) is rejected. Without this, the SageMaker
path tests could pass against an emulator that accepts anything."""

from __future__ import annotations

import contextlib
import datetime as dt
from unittest import mock

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.evaluation.sagemaker_emulator import SageMakerRuntimeEmulator

BODY = b'{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}'
PATH = "/endpoints/slm-endpoint/invocations"


def signed(
    secret: str = "testing",
    *,
    region: str = "eu-west-1",
    path: str = PATH,
    body: bytes = BODY,
    when: dt.datetime | None = None,
) -> tuple[str, dict[str, str], bytes]:
    request = AWSRequest(
        method="POST",
        url=f"http://127.0.0.1:9{path}",
        data=body,
        headers={"Content-Type": "application/json", "Accept": "application/json"},
    )
    auth = SigV4Auth(Credentials("testing", secret), "sagemaker", region)
    # botocore reads the signing time from its clock; pin it for the stale-request case.
    with mock.patch("botocore.auth.get_current_datetime", return_value=when) if when else contextlib.nullcontext():
        auth.add_auth(request)
    headers = {k.lower(): v for k, v in request.headers.items()}
    headers["host"] = "127.0.0.1:9"
    return path, headers, body


@pytest.fixture
def emu() -> SageMakerRuntimeEmulator:
    e = SageMakerRuntimeEmulator("http://127.0.0.1:1", "slm-endpoint", region="eu-west-1")
    yield e
    e.server.server_close()


def test_botocore_signature_verifies(emu: SageMakerRuntimeEmulator) -> None:
    path, headers, body = signed()
    assert emu.authenticate("POST", path, headers, body) is None


@pytest.mark.parametrize(
    ("tamper", "error"),
    [
        ("body", "InvalidSignatureException"),
        ("path", "InvalidSignatureException"),
        ("secret", "InvalidSignatureException"),
        ("region", "InvalidSignatureException"),
        ("stale", "InvalidSignatureException"),
        ("unknown-key", "UnrecognizedClientException"),
        ("unsigned", "MissingAuthenticationTokenException"),
    ],
)
def test_tampered_requests_are_rejected(emu: SageMakerRuntimeEmulator, tamper: str, error: str) -> None:
    if tamper == "secret":
        path, headers, body = signed("wrong")
    elif tamper == "region":
        path, headers, body = signed(region="us-east-1")
    elif tamper == "stale":
        path, headers, body = signed(when=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=20))
    else:
        path, headers, body = signed()
    if tamper == "body":
        body = body.replace(b'"max_tokens": 4', b'"max_tokens": 400')
    elif tamper == "path":
        path = "/endpoints/other-endpoint/invocations"
    elif tamper == "unknown-key":
        headers["authorization"] = headers["authorization"].replace("Credential=testing/", "Credential=AKIDEXAMPLE/")
    elif tamper == "unsigned":
        del headers["authorization"]
    rejected = emu.authenticate("POST", path, headers, body)
    assert rejected is not None and rejected[0] == error, rejected
