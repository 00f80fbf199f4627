"""The escalation's API key from AWS Secrets Manager (EKS: the pod's role reads one secret; nothing in the pod spec).

GetSecretValue through botocore's default credential chain (Pod Identity / IRSA). The value is cached, re-read
every `api_key_refresh_minutes` and after the LLM answered 401 (the key was rotated), and never logged: log
lines name the secret and the AWS error code only. A failed refresh keeps the last key; with no key at all the
LLM counts as unavailable (the SLM answers instead).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

from botocore.exceptions import BotoCoreError, ClientError

from .client import UpstreamError
from .config import Escalation, Timeouts

log = logging.getLogger("router.secret")

KEY_FIELDS = ("api_key", "token", "key")  # a JSON secret's field holding the key, first found wins


def parse_secret(value: str) -> str:
    """The key from a SecretString: a JSON object's api_key / token / key field, else the whole string (stripped)."""
    text = value.strip()
    if text.startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
        if isinstance(doc, dict):
            for name in KEY_FIELDS:
                if isinstance(doc.get(name), str) and doc[name].strip():
                    return doc[name].strip()
            raise ValueError(f"the secret is a JSON object without a non-empty string field {' / '.join(KEY_FIELDS)}")
    if not text:
        raise ValueError("the secret is empty")
    return text


class SecretApiKey:
    """Awaitable key provider for OpenAIBackend(auth=...): `await key()` → the key; `await key.refresh()` after a
    401."""

    def __init__(self, e: Escalation, timeouts: Timeouts):
        from . import aws  # botocore only when a secret is configured

        # botocore's DEBUG log prints whole response bodies, the secret's value included: never below INFO.
        boto_log = logging.getLogger("botocore")
        if boto_log.getEffectiveLevel() < logging.INFO:
            boto_log.setLevel(logging.INFO)
        self.secret_id = e.api_key_secret_arn
        self.refresh_s = e.api_key_refresh_minutes * 60.0
        self.timeout_s = max(timeouts.connect_s * 2, 10.0)
        # Secrets Manager's endpoint: the SDK chain (AWS_ENDPOINT_URL_SECRETS_MANAGER, VPC endpoint private DNS).
        self.client = aws.make_client("secretsmanager", e.region, "", timeouts)
        self._call = aws._call
        self._value: str | None = None
        self._fetched_at = -float("inf")
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:  # never the value
        return f"SecretApiKey({self.secret_id!r}, cached={self._value is not None})"

    async def __call__(self) -> str:
        if (
            time.monotonic() - self._fetched_at >= self.refresh_s
        ):  # also the first call (-inf) and ≤ 30 s after a failure
            await self._fetch(self._fetched_at)
        if self._value is None:
            raise UpstreamError("connect", f"the API key secret {self.secret_id} could not be read")
        return self._value

    async def refresh(self) -> str | None:
        """After a 401: read the secret again (once for all requests that saw the old key). The new key, or None
        when it did not change."""
        old, seen = self._value, self._fetched_at
        await self._fetch(seen)
        return self._value if self._value != old else None

    async def _fetch(self, seen: float) -> None:
        async with self._lock:
            if self._fetched_at != seen:
                return  # another request fetched it meanwhile
            try:
                resp = await self._call(self.client.get_secret_value, self.timeout_s, SecretId=self.secret_id)
                if not isinstance(resp, dict):  # a 4xx Answer: not found, access denied, KMS
                    raise ValueError(
                        f"GetSecretValue answered {resp.status}: {resp.body[:200].decode(errors='replace')}"
                    )
                raw = resp.get("SecretString")
                if raw is None and resp.get("SecretBinary") is not None:
                    raw = bytes(resp["SecretBinary"]).decode("utf-8")
                value = parse_secret(raw or "")
            except (UpstreamError, ValueError, UnicodeDecodeError, BotoCoreError, ClientError) as err:
                # The message carries AWS's error or our own text, never the secret's value.
                self._fetched_at = time.monotonic() - self.refresh_s + min(30.0, self.refresh_s)  # retry in ≤ 30 s
                log.warning(
                    "API key secret %s not read (%s)%s",
                    self.secret_id,
                    err,
                    "; keeping the previous key" if self._value else "; the LLM is unavailable until it is",
                )
                return
            changed = value != self._value
            self._value, self._fetched_at = value, time.monotonic()
            if changed:
                log.info("API key read from secret %s (version %s)", self.secret_id, resp.get("VersionId", "?"))

    async def aclose(self) -> None:
        self.client.close()
