"""A loopback stand-in for the SageMaker Runtime front end, in front of a real SageMaker container.

What is emulated is only AWS's managed front end: the REST paths botocore calls
(/endpoints/{name}/invocations and /invocations-response-stream), SigV4 authentication — the signature is
recomputed here from the request as received and the known test secret (an independent implementation of
the SigV4 algorithm, not botocore's), so a request signed with the wrong key, region, service, body or path
is rejected the way AWS rejects it — and the response framing: the container's bytes go back as AWS
event-stream `PayloadPart` messages, re-split at awkward sizes as SageMaker may split them. A container answer
other than 200 becomes what SageMaker returns for it: HTTP 424 `ModelError` whose body holds exactly the members of
botocore's sagemaker-runtime ModelError shape (Message, OriginalStatusCode, OriginalMessage, LogStreamArn); the
container's own headers (its Retry-After) do not reach the caller.

A multi-model endpoint (`models=MultiModelStore(...)`): InvokeEndpoint's TargetModel arrives as the
X-Amzn-SageMaker-Target-Model header; on a model's first invoke SageMaker downloads `<ModelDataUrl><TargetModel>`,
extracts the tarball under /opt/ml/models/<model_name>/model and calls the container's `POST /models`
{model_name, url}, then `POST /models/<model_name>/invoke` (docs.aws.amazon.com/sagemaker/latest/dg/
mms-container-apis.html); the store plays S3 and that directory.

Behind it runs the container's own code (containers/inference_runtime/sagemaker_adapter.py, the `/invocations`
the image serves) in front of the real llama-server, so every token comes from the engine."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import hmac
import http.client
import json
import posixpath
import re
import struct
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

ENGINE_DIR = Path(__file__).resolve().parents[2] / "containers" / "llama-server"

AUTH = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/(?P<service>[^/]+)/aws4_request, SignedHeaders=(?P<signed>[^,]+), Signature=(?P<sig>[0-9a-f]{64})$"
)
MAX_SKEW = dt.timedelta(minutes=5)  # AWS rejects requests whose X-Amz-Date is further off than this


def event_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One AWS event-stream message: prelude (lengths + CRC), string headers, payload, message CRC."""
    hbytes = b"".join(
        len(k).to_bytes(1, "big") + k.encode() + b"\x07" + len(v.encode()).to_bytes(2, "big") + v.encode()
        for k, v in headers.items()
    )
    prelude = struct.pack(">II", 16 + len(hbytes) + len(payload), len(hbytes))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + hbytes + payload
    return message + struct.pack(">I", zlib.crc32(message))


def payload_part(data: bytes) -> bytes:
    return event_message(
        {":event-type": "PayloadPart", ":content-type": "application/octet-stream", ":message-type": "event"}, data
    )


def awkward_pieces(data: bytes, sizes: tuple[int, ...] = (7, 1, 33, 2, 120)) -> Iterator[bytes]:
    i = k = 0
    while i < len(data):
        n = sizes[k % len(sizes)]
        yield data[i : i + n]
        i, k = i + n, k + 1


def model_error_body(
    status: int, message: str, *, endpoint_name: str, region: str, account: str = "000000000000"
) -> bytes:
    """SageMaker Runtime's answer to a container's non-2xx: the ModelError members botocore's model declares."""
    kind = "client" if status < 500 else "server"
    log_group = f"/aws/sagemaker/Endpoints/{endpoint_name}"
    return json.dumps(
        {
            "Message": f'Received {kind} error ({status}) from primary with message "{message}". See the {log_group} log group in account {account} for more information.',
            "OriginalStatusCode": status,
            "OriginalMessage": message,
            "LogStreamArn": f"arn:aws:logs:{region}:{account}:log-group:{log_group}",
        }
    ).encode()


@contextlib.contextmanager
def sagemaker_container(engine_url: str, *, max_in_flight: int, busy: bool = False) -> Iterator[str]:
    """The image's SageMaker front (containers/inference_runtime/sagemaker_adapter.py: /ping, /invocations) in front of
    a real engine, on its own event loop. busy=True: every admission slot is taken, as when `max_in_flight`
    requests are running, so the adapter's own admission check answers 429 + Retry-After."""
    import sys

    if str(ENGINE_DIR) not in sys.path:
        sys.path.insert(0, str(ENGINE_DIR))
    from inference_runtime.sagemaker_adapter import SageMakerAdapter

    engine = urlsplit(engine_url)
    adapter = SageMakerAdapter(engine.hostname, engine.port, max_in_flight=max_in_flight)
    if busy:
        adapter.in_flight = max_in_flight
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    port = asyncio.run_coroutine_threadsafe(adapter.start("127.0.0.1", 0), loop).result(10)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        adapter.in_flight = 0
        asyncio.run_coroutine_threadsafe(adapter.close(grace=0), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def sigv4_signature(
    secret: str,
    *,
    method: str,
    raw_path: str,
    query: str,
    headers: dict[str, str],
    signed: list[str],
    body: bytes,
    amz_date: str,
    region: str,
    service: str,
) -> str:
    """The SigV4 signature (AWS General Reference, "Create a signed AWS API request") of a request as
    received. Non-S3 services sign the URI-encoded, normalized path."""
    path = posixpath.normpath(raw_path) if raw_path not in ("", "/") else "/"
    canonical_uri = quote(path, safe="/~")
    canonical_query = "&".join(sorted(q for q in query.split("&") if q))
    canonical_headers = "".join(f"{name}:{' '.join(headers.get(name, '').split())}\n" for name in signed)
    payload_hash = headers.get("x-amz-content-sha256") or hashlib.sha256(body).hexdigest()
    canonical_request = "\n".join(
        [method, canonical_uri, canonical_query, canonical_headers, ";".join(signed), payload_hash]
    )
    scope = f"{amz_date[:8]}/{region}/{service}/aws4_request"
    string_to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical_request.encode()).hexdigest()]
    )
    key = _hmac(_hmac(_hmac(_hmac(("AWS4" + secret).encode(), amz_date[:8]), region), service), "aws4_request")
    return hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()


@dataclass
class MultiModelStore:
    """A multi-model endpoint's artifacts: `artifacts` maps TargetModel -> the local .tar.gz (what S3 holds under
    the ModelDataUrl prefix); `root` plays /opt/ml/models. Models load once, on their first invoke."""

    artifacts: dict[str, Path]
    root: Path
    loaded: dict[str, str] = field(default_factory=dict)  # TargetModel -> model_name
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ensure_loaded(self, container: tuple[str, int], target: str) -> tuple[str, int, bytes]:
        """(model_name, status, body): 200 once loaded; SageMaker's LOAD status otherwise (404 unknown target)."""
        import tarfile

        with self.lock:
            if target in self.loaded:
                return self.loaded[target], 200, b""
            if target not in self.artifacts:
                return "", 404, f"TargetModel {target} not found under the ModelDataUrl".encode()
            name = hashlib.sha256(target.encode()).hexdigest()[:32]  # opaque to the container (Triton: model_name_hash)
            model_dir = self.root / name / "model"
            model_dir.mkdir(parents=True, exist_ok=True)
            with tarfile.open(self.artifacts[target]) as tar:
                tar.extractall(model_dir, filter="data")
            conn = http.client.HTTPConnection(*container, timeout=300)
            try:
                conn.request(
                    "POST",
                    "/models",
                    body=json.dumps({"model_name": name, "url": str(model_dir)}),
                    headers={"Content-Type": "application/json"},
                )
                resp = conn.getresponse()
                body = resp.read()
            finally:
                conn.close()
            if resp.status == 200:
                self.loaded[target] = name
            return name, resp.status, body


@dataclass
class Seen:
    """What the emulator observed, for assertions."""

    requests: list[dict] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class SageMakerRuntimeEmulator:
    """`container_url` serves the SageMaker container contract (POST /invocations); `credentials` maps
    access key id -> secret key, the identities this emulated account accepts."""

    def __init__(
        self,
        container_url: str,
        endpoint_name: str,
        region: str = "us-east-1",
        credentials: dict[str, str] | None = None,
        models: MultiModelStore | None = None,
    ) -> None:
        parts = urlsplit(container_url)
        self.models = models
        self.container = (parts.hostname, parts.port)
        self.endpoint_name = endpoint_name
        self.region = region
        self.credentials = credentials or {"testing": "testing"}
        self.seen = Seen()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> SageMakerRuntimeEmulator:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def authenticate(self, method: str, raw_path: str, headers: dict[str, str], body: bytes) -> tuple[str, str] | None:
        """None when the request is correctly signed, else (error type, message) as AWS would answer."""
        auth = AUTH.match(headers.get("authorization", ""))
        if auth is None:
            return "MissingAuthenticationTokenException", "Missing Authentication Token"
        secret = self.credentials.get(auth["key"])
        if secret is None:
            return "UnrecognizedClientException", "The security token included in the request is invalid."
        amz_date = headers.get("x-amz-date", "")
        try:
            when = dt.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC)
        except ValueError:
            return "IncompleteSignatureException", "X-Amz-Date missing or malformed"
        if abs(dt.datetime.now(dt.UTC) - when) > MAX_SKEW:
            return "InvalidSignatureException", "Signature expired"
        signed = auth["signed"].split(";")
        if (
            auth["date"] != amz_date[:8]
            or auth["region"] != self.region
            or auth["service"] != "sagemaker"
            or "host" not in signed
        ):
            return (
                "InvalidSignatureException",
                f"Credential should be scoped to a valid region and service: {self.region}/sagemaker",
            )
        path, _, query = raw_path.partition("?")
        expected = sigv4_signature(
            secret,
            method=method,
            raw_path=path,
            query=query,
            headers=headers,
            signed=signed,
            body=body,
            amz_date=amz_date,
            region=auth["region"],
            service=auth["service"],
        )
        if not hmac.compare_digest(expected, auth["sig"]):
            return (
                "InvalidSignatureException",
                "The request signature we calculated does not match the signature you provided.",
            )
        return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        emu = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body are separate writes; avoid delayed-ACK stalls

            def log_message(self, *args: object) -> None:
                pass

            def _error(self, status: int, kind: str, message: str) -> None:
                body = json.dumps({"message": message}).encode()
                self.send_response(status)
                self.send_header("x-amzn-ErrorType", kind)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                headers = {k.lower(): v for k, v in self.headers.items()}
                rejected = emu.authenticate("POST", self.path, headers, body)
                auth = AUTH.match(headers.get("authorization", ""))
                with emu.seen.lock:
                    emu.seen.requests.append(
                        {
                            "path": self.path,
                            "auth": auth.groupdict() if auth else None,
                            "content_type": headers.get("content-type"),
                            "accept": headers.get("accept"),
                            "body": body,
                        }
                    )
                    if rejected:
                        emu.seen.rejected.append(rejected[0])
                if rejected:
                    return self._error(403, *rejected)
                m = re.fullmatch(r"/endpoints/([^/]+)/(invocations|invocations-response-stream)", self.path)
                if m is None:
                    return self._error(404, "UnknownOperationException", "unknown path")
                if unquote(m.group(1)) != emu.endpoint_name:
                    return self._error(
                        400, "ValidationError", f"Endpoint {unquote(m.group(1))} of account 000000000000 not found."
                    )
                target = headers.get("x-amzn-sagemaker-target-model")
                container_path = "/invocations"
                if emu.models is not None:
                    if target is None:
                        return self._error(400, "ValidationError", "TargetModel is required for a multi-model endpoint")
                    if m.group(2) != "invocations":
                        return self._error(
                            400, "ValidationError", "InvokeEndpointWithResponseStream takes no TargetModel"
                        )
                    name, status, detail = emu.models.ensure_loaded(emu.container, unquote(target))
                    if status != 200:
                        return self._error(
                            424 if status >= 500 else 400,
                            "ModelError" if status >= 500 else "ValidationError",
                            detail[:300].decode(errors="replace"),
                        )
                    container_path = f"/models/{quote(name, safe='')}/invoke"
                upstream = http.client.HTTPConnection(*emu.container, timeout=120)
                try:
                    # SageMaker hands the container the body with the caller's ContentType and Accept.
                    fwd = {"Content-Type": headers.get("content-type", "application/octet-stream")}
                    if headers.get("accept"):
                        fwd["Accept"] = headers["accept"]
                    if target is not None:
                        fwd["X-Amzn-SageMaker-Target-Model"] = target
                    upstream.request("POST", container_path, body=body, headers=fwd)
                    resp = upstream.getresponse()
                    if resp.status != 200:
                        detail = resp.read()[:300].decode(errors="replace")
                        body = model_error_body(resp.status, detail, endpoint_name=emu.endpoint_name, region=emu.region)
                        self.send_response(424)
                        self.send_header("x-amzn-ErrorType", "ModelError")
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Content-Length", str(len(body)))
                        self.end_headers()
                        self.wfile.write(body)
                        return
                    if m.group(2) == "invocations":
                        data = resp.read()
                        self.send_response(200)
                        self.send_header("Content-Type", resp.getheader("Content-Type", "application/json"))
                        self.send_header("Content-Length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data)
                        return
                    self.send_response(200)
                    self.send_header("Content-Type", "application/vnd.amazon.eventstream")
                    self.send_header("X-Amzn-SageMaker-Content-Type", resp.getheader("Content-Type", ""))
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    while chunk := resp.read1(4096):
                        for piece in awkward_pieces(chunk):
                            msg = payload_part(piece)
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(msg), msg))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                finally:
                    upstream.close()

        return Handler
