"""Router configuration: a JSON file (the CDK construct renders it into a ConfigMap) plus env overrides.

Two modes share the file format, the server and the probes: `router` (SLM pre-filter with escalation) and
`gateway` (model farm: one OpenAI-compatible entry point, routed by the body's `model`).
Errors name the key and what is wrong in one line, so a bad ConfigMap shows up in the pod's log as the cause.

These dataclasses are the one definition of the file: the service reads it with `from_dict` / `load`, and
every producer (the CDK library's EKS and SageMaker routers, the farm's gateway, `cpu-inference local`) builds
it with `Config.of(...)` and renders it with `to_dict()` — nothing else writes this JSON. The config table in
containers/router/README.md is checked against these fields (tests/test_router_config_contract.py).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

from inference_runtime.env import EngineConfigError, env_float, env_int
from inference_runtime.lora import DEFAULT_SCALE, name_problem, path_problem, scale_problem
from inference_runtime.pool_status import DEFAULT_STATUS_PORT

DEFAULT_CONFIG_PATH = "/etc/router/config.json"

DEFAULT_INSTRUCTIONS = (
    "You are a request router. Read the user's request and answer with exactly one label: {labels}.\n"
    "simple: greetings, small talk, a short fact, a yes/no question, a one-line rewrite or translation.\n"
    "complex: code, math, proofs, essays, long documents, plans, comparisons, multi-step reasoning, expert analysis."
)

DEFAULT_FEW_SHOT: tuple[tuple[str, str], ...] = (
    ("Hi there!", "simple"),
    (
        "Write a Python function that parses a CSV file and returns the median of every column, with unit tests.",
        "complex",
    ),
    ("What is the capital of France?", "simple"),
    ("Prove that there are infinitely many prime numbers.", "complex"),
    ("Say thank you in Spanish.", "simple"),
    ("Write a 1500-word essay on the economic causes of the French Revolution.", "complex"),
    ("Is water wet?", "simple"),
    ("Design a multi-region database architecture for a bank and explain the trade-offs step by step.", "complex"),
)


class ConfigError(ValueError):
    """One precise line: which key, what is wrong."""


_D = TypeVar("_D", bound="Document")


class Document:
    """A config section as its JSON object. `to_dict()` renders the keys its producer set — given to `of(**keys)`
    or read by `from_dict`, in that order — so a key left out keeps the router's own default (producers render
    only what they decide, and the same object renders the same bytes). Built with the constructor instead:
    the required keys and those that differ from their default, in field order."""

    @classmethod
    def of(cls: type[_D], **keys: Any) -> _D:
        return _with_keys(cast(Any, cls)(**keys), tuple(keys))

    def set_keys(self) -> tuple[str, ...]:
        given = self.__dict__.get("_set_keys")
        if given is not None:
            return cast(tuple[str, ...], given)
        return tuple(f.name for f in fields(cast(Any, self)) if _required(f) or getattr(self, f.name) != _default(f))

    def to_dict(self) -> dict[str, Any]:
        return {key: _json(getattr(self, key)) for key in self.set_keys()}

    def updated(self: _D, **changes: Any) -> _D:
        """A copy with `changes`: keys already set keep their place, new ones come last (as dict.update)."""
        keys = self.set_keys()
        return _with_keys(replace(cast(Any, self), **changes), keys + tuple(k for k in changes if k not in keys))


def _with_keys(doc: _D, keys: tuple[str, ...]) -> _D:
    object.__setattr__(doc, "_set_keys", keys)  # not a field: equality, hash and repr stay the dataclass's
    return doc


def _required(f: Any) -> bool:
    return f.default is MISSING and f.default_factory is MISSING


def _default(f: Any) -> Any:
    return f.default if f.default is not MISSING else f.default_factory()


def _json(value: Any) -> Any:
    """A JSON value: sections rendered, tuples as lists (a JSON-shaped mapping may hold sections too)."""
    if isinstance(value, Document):
        return value.to_dict()
    if isinstance(value, (tuple, list)):
        return [_json(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _json(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class FewShot(Document):
    text: str
    label: str


@dataclass(frozen=True)
class Escalation(Document):
    kind: str = "openai"  # openai | sagemaker | bedrock
    url: str = ""  # openai: base URL including /v1, e.g. https://llm.example/v1
    model_id: str = ""  # openai: sets the body's "model"; bedrock: the modelId (or inference profile ARN)
    endpoint_name: str = ""  # sagemaker
    inference_component: str = ""  # sagemaker, optional
    target_model: str = ""  # sagemaker: the model on a multi-model endpoint (InvokeEndpoint's TargetModel)
    region: str = ""  # sagemaker/bedrock; empty = AWS_REGION / the SDK default chain
    endpoint_url: str = ""  # sagemaker/bedrock: VPC interface endpoint or a test server; empty = public
    api_key_env: str = ""  # openai: name of the env var that holds the API key
    api_key_file: str = ""  # openai: path of a mounted secret file holding the API key (wins over api_key_env)
    api_key_secret_arn: str = (
        ""  # openai: AWS Secrets Manager secret (ARN or name) holding the API key (wins over both)
    )
    api_key_refresh_minutes: float = (
        15.0  # openai + api_key_secret_arn: re-read the secret this often (and after a 401)
    )


@dataclass(frozen=True)
class Timeouts(Document):
    connect_s: float = 2.0
    classify_s: float = 5.0  # per classification attempt, head + body
    first_byte_s: float = 120.0  # generation: until the response head (prompt processing happens before it)
    idle_s: float = 60.0  # generation: longest silence between streamed pieces
    total_s: float = 600.0  # generation: a whole non-streamed answer


@dataclass(frozen=True)
class Retries(Document):
    classify_attempts: int = 3  # classification is idempotent: retried with backoff
    backoff_base_s: float = 0.05
    backoff_max_s: float = 1.0


@dataclass(frozen=True)
class Breaker(Document):
    failure_threshold: int = 3  # consecutive failures that open the circuit
    reset_after_s: float = 15.0  # open this long, then one trial request (half-open)


@dataclass(frozen=True)
class GatewayAdapter(Document):
    """A LoRA adapter of a base model (inference_runtime/lora.py), listed in the base's id order. Clients send its
    `name` as `model`; the gateway sends the base's name with `lora` = [{id, scale}], the id being the position of
    `path` in the backend's own adapter list (never this config's order: backends roll out separately)."""

    name: str  # the `model` clients send: a DNS label, unique across every model and adapter
    path: str  # the adapter GGUF as the base's engine names it (its --lora / preset `lora` item)
    scale: float = DEFAULT_SCALE  # (0, 4]
    base: str = ""  # in a pool: the pool's model it adapts (required there); a dedicated model's: empty or its name


@dataclass(frozen=True)
class GatewayModel(Document):
    name: str  # the `model` clients send
    url: str  # the backend's root, e.g. http://bge-small.models.svc:8080 (a llama-server or any OpenAI-compatible server)
    adapters: tuple[GatewayAdapter, ...] = ()  # its LoRA adapters (a llama-server started with their --lora)


@dataclass(frozen=True)
class GatewayPool(Document):
    """A multi-model pool: llama-servers in router mode that all list `models` (the same preset), each model
    routed to `replication` of them by rendezvous hashing (slm_router/affinity.py)."""

    name: str  # the pool's name (metrics label `pool`; on EKS the StatefulSet is pool-<name>)
    models: tuple[str, ...]  # the `model` names clients send; llama-server's router routes on the same name
    replicas: tuple[str, ...]  # stable replica root URLs, in StatefulSet ordinal order (replicas_max of them)
    replication: int = 2  # replicas a model is kept warm on (its home set); fewer when fewer are live
    hot_in_flight: int = 4  # a model spreads to one more replica per this many requests in progress per replica
    # Each replica's supervisor side port (inference_runtime/pool_status.py; 0 = none): asked what a model the
    # replica's router does not know is (copying, copy failed, landed) to answer the client clearly.
    status_port: int = DEFAULT_STATUS_PORT
    adapters: tuple[GatewayAdapter, ...] = ()  # LoRA adapters of the pool's models (each names its `base`)


@dataclass(frozen=True)
class Gateway(Document):
    models: tuple[GatewayModel, ...] = ()  # dedicated models: one backend URL each
    pools: tuple[GatewayPool, ...] = ()  # pooled models: a model is in `models` or in exactly one pool
    retry_after_s: int = (
        10  # Retry-After of the 503 for a model whose backend is unavailable (scaled to zero, starting)
    )
    cold_load_timeout_s: float = 60.0  # pooled models: until the response head (a model's load on its replica included)
    health_interval_s: float = 5.0  # pooled models: how often each replica's GET /health is probed


MODES = ("router", "gateway")
ESCALATION_KINDS = ("openai", "sagemaker", "bedrock")
SECRET_ID = re.compile(r"arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:[\w/+=.@-]+|[\w/+=.@-]{1,512}")
ENDPOINT_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")  # SageMaker's endpoint name pattern
# InvokeEndpoint's TargetModel (botocore sagemaker-runtime shape: min 1, max 1024, pattern \A\S[\p{Print}]*\z).
TARGET_MODEL = re.compile(r"[\x21-\x7e][\x20-\x7e]{0,1023}")


@dataclass(frozen=True)
class Config(Document):
    mode: str = "router"  # router | gateway
    slm_url: str = "http://127.0.0.1:8080"  # llama-server root (serves /health and /v1/chat/completions)
    slm_model: str = ""  # if set, the body's "model" on requests answered by the SLM
    slm_endpoint_name: str = ""  # the SLM behind a SageMaker endpoint (SageMaker Runtime); slm_url is then ignored
    slm_region: str = ""  # its Region; empty = AWS_REGION / the SDK default chain
    slm_endpoint_url: str = ""  # a SageMaker Runtime VPC interface endpoint URL (or a test server); empty = public
    labels: tuple[str, ...] = ("simple", "complex")
    slm_labels: tuple[str, ...] = ("simple",)
    confidence_threshold: float = 0.9
    instructions: str = DEFAULT_INSTRUCTIONS  # "{labels}" is replaced by the labels, comma separated
    few_shot: tuple[FewShot, ...] = tuple(FewShot(t, lab) for t, lab in DEFAULT_FEW_SHOT)
    top_logprobs: int = 10  # alternatives read at the label's first token
    classify_max_chars: int = 2000  # longer inputs are classified on their head and tail
    cache_prompt: bool = True  # llama.cpp reuses the KV cache of the fixed instructions + few-shot prefix
    escalation: Escalation = field(default_factory=Escalation)
    timeouts: Timeouts = field(default_factory=Timeouts)
    retries: Retries = field(default_factory=Retries)
    breaker: Breaker = field(default_factory=Breaker)
    gateway: Gateway = field(default_factory=Gateway)
    listen_host: str = "0.0.0.0"
    listen_port: int = 8000
    max_body_bytes: int = 1 << 20
    max_in_flight: int = 256  # requests in progress beyond this get 429 + Retry-After (overload protection)
    log_level: str = "INFO"

    def validate(self) -> Config:
        if self.mode not in MODES:
            raise ConfigError(f"mode: must be router or gateway, got {self.mode!r}")
        if not 0 < self.listen_port < 65536:
            raise ConfigError(f"listen_port: must be within 1..65535, got {self.listen_port}")
        if self.max_body_bytes < 1024:
            raise ConfigError(f"max_body_bytes: must be >= 1024, got {self.max_body_bytes}")
        if self.max_in_flight < 1:
            raise ConfigError(f"max_in_flight: must be >= 1, got {self.max_in_flight}")
        if self.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise ConfigError(f"log_level: must be DEBUG, INFO, WARNING, ERROR or CRITICAL, got {self.log_level!r}")
        for f in fields(self.timeouts):
            if getattr(self.timeouts, f.name) <= 0:
                raise ConfigError(f"timeouts.{f.name}: must be > 0, got {getattr(self.timeouts, f.name)}")
        if self.breaker.failure_threshold < 1:
            raise ConfigError(f"breaker.failure_threshold: must be >= 1, got {self.breaker.failure_threshold}")
        if self.breaker.reset_after_s <= 0:
            raise ConfigError(f"breaker.reset_after_s: must be > 0, got {self.breaker.reset_after_s}")
        if self.mode == "gateway":
            _validate_gateway(self.gateway)
            return self
        return self._validate_router()

    def _validate_router(self) -> Config:
        if self.slm_endpoint_name:
            if not ENDPOINT_NAME.fullmatch(self.slm_endpoint_name):
                raise ConfigError(
                    f"slm_endpoint_name: must be a SageMaker endpoint name (letters, digits and '-', not first "
                    f"or last, at most 63), got {self.slm_endpoint_name!r}"
                )
            if self.slm_endpoint_url and not self.slm_endpoint_url.startswith(("http://", "https://")):
                raise ConfigError(f"slm_endpoint_url: must be an http(s) URL, got {self.slm_endpoint_url!r}")
        elif not self.slm_url.startswith(("http://", "https://")):
            raise ConfigError(f"slm_url: must be an http(s) URL, got {self.slm_url!r}")
        elif self.slm_region or self.slm_endpoint_url:
            key = "slm_region" if self.slm_region else "slm_endpoint_url"
            raise ConfigError(
                f"{key}: only used with slm_endpoint_name (the SLM behind a SageMaker endpoint); set slm_endpoint_name or drop {key}"
            )
        if len(self.labels) < 2:
            raise ConfigError(f"labels: need at least 2 labels, got {list(self.labels)}")
        for i, label in enumerate(self.labels):
            if not label or not label.isprintable() or label != label.strip():
                raise ConfigError(
                    f"labels[{i}]: must be non-empty printable text without surrounding spaces, got {label!r}"
                )
        if len(set(self.labels)) != len(self.labels):
            raise ConfigError(f"labels: duplicates in {list(self.labels)}")
        if not self.slm_labels:
            raise ConfigError("slm_labels: at least one label must be answerable by the SLM")
        for i, label in enumerate(self.slm_labels):
            if label not in self.labels:
                raise ConfigError(f"slm_labels[{i}]: {label!r} is not one of labels {list(self.labels)}")
        if set(self.slm_labels) == set(self.labels):
            raise ConfigError("slm_labels: every label is answered by the SLM, so nothing would ever escalate")
        if not 0.0 <= self.confidence_threshold <= 1.0:
            raise ConfigError(f"confidence_threshold: must be within [0, 1], got {self.confidence_threshold}")
        for i, ex in enumerate(self.few_shot):
            if ex.label not in self.labels:
                raise ConfigError(f"few_shot[{i}].label: {ex.label!r} is not one of labels {list(self.labels)}")
            if not ex.text.strip():
                raise ConfigError(f"few_shot[{i}].text: must not be empty")
        if not 1 <= self.top_logprobs <= 20:
            raise ConfigError(f"top_logprobs: must be within [1, 20], got {self.top_logprobs}")
        if self.classify_max_chars < 16:
            raise ConfigError(f"classify_max_chars: must be >= 16, got {self.classify_max_chars}")
        _validate_escalation(self.escalation)
        if self.retries.classify_attempts < 1:
            raise ConfigError(f"retries.classify_attempts: must be >= 1, got {self.retries.classify_attempts}")
        if self.retries.backoff_base_s < 0 or self.retries.backoff_max_s < self.retries.backoff_base_s:
            raise ConfigError("retries: need 0 <= backoff_base_s <= backoff_max_s")
        return self


def _validate_gateway(g: Gateway) -> None:
    if not g.models and not any(p.models for p in g.pools):
        raise ConfigError("gateway.models: mode gateway needs at least one {name, url} (or a pool in gateway.pools)")
    seen: set[str] = set()
    for i, m in enumerate(g.models):
        if not m.name or not m.name.isprintable() or m.name != m.name.strip():
            raise ConfigError(
                f"gateway.models[{i}].name: must be non-empty printable text without surrounding spaces, got {m.name!r}"
            )
        if m.name in seen:
            raise ConfigError(f"gateway.models[{i}].name: {m.name!r} appears twice")
        seen.add(m.name)
        if not m.url.startswith(("http://", "https://")):
            raise ConfigError(f"gateway.models[{i}].url: must be an http(s) URL, got {m.url!r}")
    if g.retry_after_s < 1:
        raise ConfigError(f"gateway.retry_after_s: must be >= 1, got {g.retry_after_s}")
    names = set(seen) | {m for p in g.pools for m in p.models}
    for i, m in enumerate(g.models):
        _validate_adapters(m.adapters, f"gateway.models[{i}]", (m.name,), names, implied=m.name)
    for key in ("cold_load_timeout_s", "health_interval_s"):
        if getattr(g, key) <= 0:
            raise ConfigError(f"gateway.{key}: must be > 0, got {getattr(g, key)}")
    _validate_pools(g.pools, seen)
    for i, p in enumerate(g.pools):
        _validate_adapters(p.adapters, f"gateway.pools[{i}]", p.models, names)


def _validate_pools(pools: tuple[GatewayPool, ...], dedicated: set[str]) -> None:
    pool_of: dict[str, str] = {}
    names: set[str] = set()
    for i, p in enumerate(pools):
        key = f"gateway.pools[{i}]"
        if not p.name or not p.name.isprintable() or p.name != p.name.strip():
            raise ConfigError(
                f"{key}.name: must be non-empty printable text without surrounding spaces, got {p.name!r}"
            )
        if p.name in names:
            raise ConfigError(f"{key}.name: pool {p.name!r} appears twice")
        names.add(p.name)
        if p.replication < 1:
            raise ConfigError(f"{key}.replication: must be >= 1, got {p.replication}")
        if p.hot_in_flight < 1:
            raise ConfigError(f"{key}.hot_in_flight: must be >= 1, got {p.hot_in_flight}")
        if not 0 <= p.status_port < 65536:
            raise ConfigError(f"{key}.status_port: must be within 1..65535 (0: no status port), got {p.status_port}")
        if not p.replicas:
            raise ConfigError(f"{key}.replicas: needs at least one replica root URL (pool-{p.name}-0 first)")
        for j, url in enumerate(p.replicas):
            if not url.startswith(("http://", "https://")):
                raise ConfigError(f"{key}.replicas[{j}]: must be an http(s) URL, got {url!r}")
            if url in p.replicas[:j]:
                raise ConfigError(f"{key}.replicas[{j}]: {url!r} appears twice")
            if p.status_port and _port(url) == p.status_port:
                raise ConfigError(
                    f"{key}.status_port: {p.status_port} is the port of replicas[{j}] {url!r} (its router); the "
                    "supervisor's status side port is another one (LLAMA_POOL_STATUS_PORT)"
                )
        if not p.models:
            raise ConfigError(f"{key}.models: a pool needs at least one model name")
        for j, m in enumerate(p.models):
            if not m or not m.isprintable() or m != m.strip():
                raise ConfigError(
                    f"{key}.models[{j}]: must be non-empty printable text without surrounding spaces, got {m!r}"
                )
            if m in dedicated:
                raise ConfigError(
                    f"{key}.models[{j}]: {m!r} is also in gateway.models; a model is dedicated or pooled, "
                    "not both: drop one"
                )
            if m in pool_of:
                where = "twice in this pool" if pool_of[m] == p.name else f"also in pool {pool_of[m]!r}"
                raise ConfigError(f"{key}.models[{j}]: {m!r} is {where}; a model belongs to exactly one pool")
            pool_of[m] = p.name
        if p.adapters and not p.status_port:
            raise ConfigError(
                f"{key}.adapters: a pool's adapters need its replicas' status_port (their adapter lists are read "
                "there before a request is sent); set status_port"
            )


def _validate_adapters(
    adapters: tuple[GatewayAdapter, ...], key: str, bases: tuple[str, ...], names: set[str], implied: str = ""
) -> None:
    """Adapters of `bases` (a dedicated model's: `implied` is its name); `names`: every name taken so far (updated)."""
    paths: set[tuple[str, str]] = set()
    for j, a in enumerate(adapters):
        at = f"{key}.adapters[{j}]"
        problem = name_problem(a.name)
        if problem:
            raise ConfigError(f"{at}.name: {problem}")
        if a.name in names:
            raise ConfigError(f"{at}.name: {a.name!r} is already a model's or an adapter's name; names are unique")
        names.add(a.name)
        base = a.base or implied
        if implied and a.base not in ("", implied):
            raise ConfigError(f"{at}.base: an adapter of dedicated model {implied!r} has base {implied!r} or none")
        if base not in bases:
            raise ConfigError(f"{at}.base: must be one of the pool's models {list(bases)}, got {a.base!r}")
        problem = scale_problem(a.scale)
        if problem:
            raise ConfigError(f"{at}.scale: {problem}")
        problem = path_problem(a.path)
        if problem:
            raise ConfigError(f"{at}.path: {problem}")
        if (base, a.path) in paths:
            raise ConfigError(f"{at}.path: {a.path!r} is another adapter's of {base!r} too")
        paths.add((base, a.path))


def _port(url: str) -> int | None:
    try:
        u = urlsplit(url)
        return u.port or (443 if u.scheme == "https" else 80)
    except ValueError:  # a port that is not a number: the request fails, as for any unreachable replica
        return None


def _validate_escalation(e: Escalation) -> None:
    if e.kind == "openai":
        if not e.url.startswith(("http://", "https://")):
            raise ConfigError(f"escalation.url: kind openai needs the LLM's http(s) base URL (…/v1), got {e.url!r}")
    elif e.kind == "sagemaker":
        if not e.endpoint_name:
            raise ConfigError("escalation.endpoint_name: kind sagemaker needs the SageMaker endpoint name")
    elif e.kind == "bedrock":
        if not e.model_id:
            raise ConfigError("escalation.model_id: kind bedrock needs the Bedrock model id or inference profile")
    else:
        raise ConfigError(f"escalation.kind: must be openai, sagemaker or bedrock, got {e.kind!r}")
    if e.target_model:
        if e.kind != "sagemaker":
            raise ConfigError(
                f"escalation.target_model: only kind sagemaker addresses a model on a multi-model endpoint (kind is {e.kind!r})"
            )
        if e.inference_component:
            raise ConfigError(
                "escalation.target_model: a multi-model endpoint has no inference components; set target_model "
                "or inference_component, not both"
            )
        if not TARGET_MODEL.fullmatch(e.target_model):
            raise ConfigError(
                f"escalation.target_model: must be 1-1024 printable characters not starting with a space "
                f"(e.g. 'my-model/1a2b3c4d5e6f7a8b-0c1d2e3f.tar.gz'), got {e.target_model!r}"
            )
    if e.api_key_secret_arn and e.kind != "openai":
        raise ConfigError(
            f"escalation.api_key_secret_arn: only kind openai sends an API key (kind is {e.kind!r}: AWS credentials sign the calls)"
        )
    if e.api_key_secret_arn and not SECRET_ID.fullmatch(e.api_key_secret_arn):
        raise ConfigError(
            f"escalation.api_key_secret_arn: must be a Secrets Manager secret ARN or name, got {e.api_key_secret_arn!r}"
        )
    if e.api_key_refresh_minutes <= 0:
        raise ConfigError(f"escalation.api_key_refresh_minutes: must be > 0, got {e.api_key_refresh_minutes}")
    if e.endpoint_url and not e.endpoint_url.startswith(("http://", "https://")):
        raise ConfigError(f"escalation.endpoint_url: must be an http(s) URL, got {e.endpoint_url!r}")


def _section(cls: type, data: Any, key: str) -> Any:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{key}: must be an object, got {type(data).__name__}")
    known = {f.name: f for f in fields(cls)}
    kwargs = {}
    for name, value in data.items():
        if name not in known:
            raise ConfigError(f"{key}.{name}: unknown key (known: {', '.join(sorted(known))})")
        kwargs[name] = _typed(value, known[name].type, f"{key}.{name}")
    missing = [f.name for f in fields(cls) if f.name not in kwargs and _required(f)]
    if missing:
        raise ConfigError(f"{key}.{missing[0]}: required")
    return _with_keys(cls(**kwargs), tuple(kwargs))


def _typed(value: Any, annotation: Any, key: str) -> Any:
    ann = str(annotation)
    if ann == "str":
        if not isinstance(value, str):
            raise ConfigError(f"{key}: must be a string, got {value!r}")
        return value
    if ann == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: must be true or false, got {value!r}")
        return value
    if ann == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: must be an integer, got {value!r}")
        return value
    if ann == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: must be a number, got {value!r}")
        return value  # an integer stays one (arithmetic is the same): to_dict() renders what was read
    if ann == "tuple[str, ...]":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{key}: must be a list of strings, got {value!r}")
        return tuple(value)
    for cls, shape in (
        (FewShot, "{text, label}"),
        (GatewayAdapter, "{name, path, scale, base}"),
        (GatewayModel, "{name, url}"),
        (GatewayPool, "{name, replication, models, replicas}"),
    ):
        if ann == f"tuple[{cls.__name__}, ...]":
            if not isinstance(value, list):
                raise ConfigError(f"{key}: must be a list of {shape} objects")
            return tuple(_section(cls, v, f"{key}[{i}]") for i, v in enumerate(value))
    for section in (Escalation, Timeouts, Retries, Breaker, Gateway):
        if ann == section.__name__:
            return _section(section, value, key)
    raise AssertionError(f"unhandled config type {ann} for {key}")  # pragma: no cover - schema bug


def from_dict(data: Any) -> Config:
    return unvalidated(data).validate()


def unvalidated(data: Any) -> Config:
    """The Config these keys give (the rest: defaults), each key type-checked but the whole not validated: for
    budget.py, which reads a rendered config whose URLs and endpoint names are only known at deploy time."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"config: must be a JSON object, got {type(data).__name__}")
    known = {f.name: f for f in fields(Config)}
    kwargs = {}
    for name, value in data.items():
        if name not in known:
            raise ConfigError(f"{name}: unknown key (known: {', '.join(sorted(known))})")
        kwargs[name] = _typed(value, known[name].type, name)
    return _with_keys(Config(**kwargs), tuple(kwargs))


def config_of(data: Config | Mapping[str, Any]) -> Config:
    """A Config from a typed one, or from a JSON-shaped mapping (whose values may be sections or tuples), every
    key type-checked as `unvalidated` does: how a producer accepts a config its caller wrote as a dict."""
    return data if isinstance(data, Config) else unvalidated(_json(data))


# Scalar env overrides (e.g. a Deployment patch without re-rendering the ConfigMap): env name -> (key path, type).
ENV_OVERRIDES: dict[str, tuple[tuple[str, ...], type]] = {
    "ROUTER_MODE": (("mode",), str),
    "ROUTER_SLM_URL": (("slm_url",), str),
    "ROUTER_SLM_ENDPOINT_NAME": (("slm_endpoint_name",), str),
    "ROUTER_CONFIDENCE_THRESHOLD": (("confidence_threshold",), float),
    "ROUTER_LISTEN_HOST": (("listen_host",), str),
    "ROUTER_PORT": (("listen_port",), int),
    "ROUTER_LOG_LEVEL": (("log_level",), str),
    "ROUTER_MAX_IN_FLIGHT": (("max_in_flight",), int),
    "ROUTER_ESCALATION_KIND": (("escalation", "kind"), str),
    "ROUTER_ESCALATION_URL": (("escalation", "url"), str),
    "ROUTER_ESCALATION_MODEL_ID": (("escalation", "model_id"), str),
    "ROUTER_ESCALATION_ENDPOINT_NAME": (("escalation", "endpoint_name"), str),
    "ROUTER_ESCALATION_REGION": (("escalation", "region"), str),
    "ROUTER_ESCALATION_ENDPOINT_URL": (("escalation", "endpoint_url"), str),
}


def load(env: Mapping[str, str] | None = None) -> Config:
    """Config from ROUTER_CONFIG_JSON (inline) or the file at ROUTER_CONFIG (default /etc/router/config.json,
    optional), then the scalar ROUTER_* overrides."""
    env = os.environ if env is None else env
    data: dict[str, Any] = {}
    if env.get("ROUTER_CONFIG_JSON"):
        data = _parse(env["ROUTER_CONFIG_JSON"], "ROUTER_CONFIG_JSON")
    else:
        path = Path(env.get("ROUTER_CONFIG", DEFAULT_CONFIG_PATH))
        if path.exists():
            data = _parse(path.read_text(encoding="utf-8"), str(path))
        elif "ROUTER_CONFIG" in env:
            raise ConfigError(f"ROUTER_CONFIG: {path} does not exist")
    for name, (keys, typ) in ENV_OVERRIDES.items():
        if name not in env:
            continue
        value: Any = env[name]
        if typ is not str:
            parse = env_int if typ is int else env_float
            try:
                value = parse(env, name, None)
            except EngineConfigError as e:  # "<NAME> must be an integer, got 'x'": the router's config error
                raise ConfigError(str(e)) from None
            if value is None:  # blank: not set, as every image reads its variables (inference_runtime.env)
                continue
        target = data
        for k in keys[:-1]:
            target = target.setdefault(k, {})
            if not isinstance(target, dict):
                raise ConfigError(f"{'.'.join(keys[:-1])}: must be an object")
        target[keys[-1]] = value
    return from_dict(data)


def _parse(text: str, source: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"{source}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: must hold a JSON object")
    return data


def with_overrides(cfg: Config, **changes: Any) -> Config:
    return replace(cfg, **changes).validate()
