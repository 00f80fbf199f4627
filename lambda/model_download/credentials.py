"""The Hugging Face token: read at run time from a Secrets Manager secret (by name), else HF_TOKEN.

The token never leaves this process: not in arguments, not in environment overrides, not in messages."""

from __future__ import annotations

import json
import os

from .errors import TokenError

_JSON_KEYS = ("token", "hf_token", "HF_TOKEN", "huggingface_token")


def token_from_secret_string(secret: str, name: str) -> str:
    """A secret holds the token itself, or a JSON object with one of the keys token / hf_token / HF_TOKEN."""
    text = secret.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            raise TokenError(f"secret '{name}' looks like JSON but does not parse") from None
        for key in _JSON_KEYS:
            if isinstance(data.get(key), str) and data[key].strip():
                return data[key].strip()
        raise TokenError(f"secret '{name}' is a JSON object without a 'token' key")
    if not text:
        raise TokenError(f"secret '{name}' is empty")
    return text


def read_token(secret_name: str | None, *, session=None) -> tuple[str | None, str | None]:  # noqa: ANN001 - boto3 session
    """(token, where it came from) — from the named secret, else HF_TOKEN, else (None, None)."""
    if secret_name:
        import boto3
        from botocore.exceptions import BotoCoreError, ClientError

        client = (session or boto3.session.Session()).client("secretsmanager")
        try:
            value = client.get_secret_value(SecretId=secret_name)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code == "ResourceNotFoundException":
                raise TokenError(f"secret '{secret_name}' (Hugging Face token) not found") from None
            if code in ("AccessDeniedException", "AccessDenied"):
                raise TokenError(f"no permission to read secret '{secret_name}' (Hugging Face token)") from None
            raise TokenError(f"cannot read secret '{secret_name}': {code}") from None
        except BotoCoreError as exc:
            raise TokenError(f"cannot read secret '{secret_name}': {exc}") from None
        if "SecretString" not in value:
            raise TokenError(f"secret '{secret_name}' has no string value (binary secrets are not supported)")
        return token_from_secret_string(value["SecretString"], secret_name), f"secret '{secret_name}'"
    env = os.environ.get("HF_TOKEN", "").strip()
    if env:
        return env, "HF_TOKEN"
    return None, None
