"""RouterEndpointProps and RouterEscalation: the SLM pre-filter's router (containers/router) on a SageMaker
endpoint, talking to its SLM and LLM through SageMaker Runtime (or Bedrock / an OpenAI-compatible URL)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import aws_cdk as cdk
from aws_cdk import aws_secretsmanager as secretsmanager

from cpu_inference.monitoring.latency import ROUTED_REQUEST_SLO_MS
from cpu_inference.sagemaker.endpoint_props import EndpointPropsBase
from cpu_inference.sagemaker.graviton_endpoint import GravitonEndpoint
from cpu_inference.sizing.slm_context import decision
from slm_router.config import ConfigError, Escalation, config_of

ROUTER_PORT = 8080  # SageMaker's container contract: /ping and /invocations on 8080
# SageMaker's ContainerDefinition.Environment: at most 1024 bytes per value (32 KB in all).
ENV_VALUE_MAX_BYTES = 1024
# The router's AWS calls (SageMaker Runtime, Bedrock) run on a 64-thread pool with 64 pooled connections
# (containers/router/slm_router/aws.py): beyond that, requests would wait inside the process, so 429 at the door.
DEFAULT_MAX_IN_FLIGHT = 64
TARGET_IN_FLIGHT_SHARE = 0.75
# Router keys the caller may still set through config_overrides (the rest are props or fixed by SageMaker).
OVERRIDABLE_KEYS = frozenset(
    {
        "slm_model",
        "top_logprobs",
        "classify_max_chars",
        "cache_prompt",
        "timeouts",
        "retries",
        "breaker",
        "max_body_bytes",
        "log_level",
    }
)
# The labels of the router's built-in few-shot examples (used when few_shot is empty).
BUILTIN_FEW_SHOT_LABELS = frozenset({"simple", "complex"})
# Placeholders for the size estimate of values only known at deploy time.
_LONGEST_REGION = "ap-southeast-4"
_TOKEN_BYTES = 63  # a SageMaker endpoint name is at most 63 characters
_TOKEN = re.compile(r"\$\{Token\[[^\]]+\]\}")
_BEDROCK_MODEL = re.compile(r"^[a-z0-9-]+\.[A-Za-z0-9][A-Za-z0-9.:_-]*$")
# Cross-Region inference profile ids start with a geography: us., eu., apac., global., ...
_PROFILE_GEOS = ("us", "us-gov", "eu", "apac", "jp", "au", "ca", "global")
_ENDPOINT_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")

EscalationKind = Literal["sagemaker", "bedrock", "openai"]


def _endpoint_name(target: GravitonEndpoint | str) -> str:
    return target.endpoint_name if isinstance(target, GravitonEndpoint) else target


def _check_endpoint(target: Any, where: str) -> None:
    if isinstance(target, GravitonEndpoint):
        return
    if not isinstance(target, str):
        raise ValueError(
            f"{where} must be a GravitonEndpoint or the name of an existing SageMaker endpoint, got {type(target).__name__}"
        )
    if not cdk.Token.is_unresolved(target) and not _ENDPOINT_NAME.match(target):
        raise ValueError(f"{where} {target!r} is not a SageMaker endpoint name (letters, digits and '-', at most 63)")


@dataclass(frozen=True)
class RouterEscalation:
    """Where the router sends what the SLM should not answer. Build it with one of the class methods:

    - `RouterEscalation.sagemaker(llm)`: a GravitonEndpoint (or an existing endpoint's name); the role gets
      InvokeEndpoint + InvokeEndpointWithResponseStream on that endpoint only.
    - `RouterEscalation.bedrock("anthropic.claude-3-5-haiku-20241022-v1:0")`: a foundation model in the
      stack's Region; the role gets bedrock:InvokeModel + InvokeModelWithResponseStream on that model's ARN only.
    - `RouterEscalation.openai("https://llm.internal/v1", model_id=...)`: an OpenAI-compatible URL the router
      reaches over the network. Without an API key only: SageMaker cannot hand the container a secret
      (`api_key_secret` is refused with the alternatives).
    """

    kind: EscalationKind
    endpoint: GravitonEndpoint | str | None = None
    model_id: str | None = None
    url: str | None = None
    api_key_secret: secretsmanager.ISecret | str | None = None

    @classmethod
    def sagemaker(cls, endpoint: GravitonEndpoint | str, *, model_id: str | None = None) -> RouterEscalation:
        return cls(kind="sagemaker", endpoint=endpoint, model_id=model_id)

    @classmethod
    def bedrock(cls, model_id: str) -> RouterEscalation:
        return cls(kind="bedrock", model_id=model_id)

    @classmethod
    def openai(
        cls, url: str, *, model_id: str | None = None, api_key_secret: secretsmanager.ISecret | str | None = None
    ) -> RouterEscalation:
        return cls(kind="openai", url=url, model_id=model_id, api_key_secret=api_key_secret)

    @property
    def endpoint_name(self) -> str:
        assert self.endpoint is not None
        return _endpoint_name(self.endpoint)

    def validate(self) -> None:
        p = "RouterEscalation"
        if self.kind == "sagemaker":
            if self.endpoint is None:
                raise ValueError(
                    f"{p}: kind sagemaker needs endpoint (a GravitonEndpoint or an endpoint name): RouterEscalation.sagemaker(llm)"
                )
            _check_endpoint(self.endpoint, f"{p}.endpoint")
        elif self.kind == "bedrock":
            self._validate_bedrock(p)
        elif self.kind == "openai":
            if not self.url or not str(self.url).startswith(("https://", "http://")):
                raise ValueError(
                    f"{p}.url: kind openai needs the LLM's http(s) base URL including /v1, got {self.url!r}"
                )
            if self.api_key_secret is not None:
                raise ValueError(
                    f"{p}.api_key_secret: a router on SageMaker cannot receive an API key — SageMaker has no secret "
                    "injection and the Model's environment is stored in plain text (DescribeModel shows it). Escalate to "
                    "Bedrock (RouterEscalation.bedrock) or a SageMaker endpoint (RouterEscalation.sagemaker), use an "
                    "OpenAI-compatible URL that needs no key (e.g. inside your VPC), or run the router on EKS (target: eks), "
                    "where the key is a mounted Secret"
                )
        else:
            raise ValueError(f"{p}.kind must be sagemaker, bedrock or openai, got {self.kind!r}")
        if self.kind != "sagemaker" and self.endpoint is not None:
            raise ValueError(f"{p}.endpoint applies to kind sagemaker only")

    def _validate_bedrock(self, p: str) -> None:
        model_id = self.model_id
        if not model_id:
            raise ValueError(
                f"{p}: kind bedrock needs model_id, e.g. RouterEscalation.bedrock('anthropic.claude-3-5-haiku-20241022-v1:0')"
            )
        if cdk.Token.is_unresolved(model_id):
            return
        if model_id.startswith("arn:"):
            raise ValueError(
                f"{p}.model_id must be a foundation-model id such as 'anthropic.claude-3-5-haiku-20241022-v1:0', not an ARN: got {model_id!r}"
            )
        geo = model_id.split(".", 1)[0]
        if geo in _PROFILE_GEOS and model_id.count(".") >= 2:
            raise ValueError(
                f"{p}.model_id {model_id!r} is a cross-Region inference profile: invoking it needs the profile and the "
                f"model in every Region it routes to, which one model ARN cannot grant — give the foundation-model id "
                f"{model_id.split('.', 1)[1]!r} (invoked in the stack's Region)"
            )
        if not _BEDROCK_MODEL.match(model_id):
            raise ValueError(
                f"{p}.model_id {model_id!r} is not a Bedrock foundation-model id (provider.model, e.g. 'amazon.nova-lite-v1:0')"
            )

    def router_escalation(self, region: str) -> Escalation:
        """The router's `escalation` section (containers/router/README.md), as the router's one escalation type."""
        model_id = {"model_id": self.model_id} if self.model_id else {}
        if self.kind == "sagemaker":
            return Escalation.of(kind="sagemaker", endpoint_name=self.endpoint_name, region=region, **model_id)
        if self.kind == "bedrock":
            return Escalation.of(kind="bedrock", model_id=self.model_id, region=region)
        return Escalation.of(kind="openai", url=self.url, **model_id)

    def router_config(self, region: str) -> dict[str, Any]:
        """router_escalation(region) as its JSON object."""
        return self.router_escalation(region).to_dict()


@dataclass(frozen=True, kw_only=True)
class RouterEndpointProps(EndpointPropsBase):
    """The SLM pre-filter's router on a SageMaker endpoint. Required: image, slm, escalation. The shared fields
    are EndpointPropsBase's; the defaults and fields of this endpoint:

    image: the router image (containers/router): a LlamaCppImage built from it, or an EngineImage (any ECR
        repository + tag/digest). Its architectures must include the instance type's.
    slm: the SLM's GravitonEndpoint (or an existing endpoint's name): the router classifies and answers easy
        requests through SageMaker Runtime on it; the role may invoke that endpoint only.
    escalation: RouterEscalation.sagemaker(llm) | .bedrock(model_id) | .openai(url) (see RouterEscalation).
    name: DNS label for names and tags (default "router").
    labels / slm_labels / confidence_threshold / few_shot / instructions: the router's decision settings
        (default simple/complex, SLM answers simple, 0.7, the router's built-in examples and prompt).
        few_shot entries are `{"text", "label"}`; custom labels need few_shot (the built-in ones are
        labelled simple/complex).
    max_in_flight: requests in progress per instance before the router answers 429 (default 64: its AWS
        call pool). config_overrides: other router keys (timeouts, retries, breaker, top_logprobs,
        classify_max_chars, cache_prompt, max_body_bytes, log_level, slm_model).
        The whole config travels in ROUTER_CONFIG_JSON, and SageMaker caps one environment value at 1024 bytes:
        long few_shot / instructions are refused with the size.
    instance_type: default ml.c7g.large (the router relays bytes; 2 vCPU, 4 GiB is plenty).
    min_capacity / max_capacity: default 2..4 (two instances: SageMaker spreads them over Availability Zones,
        and the router is the front door). target_concurrency: default 75% of max_in_flight;
        scale_out_cooldown default 60 s (a router instance starts in about a minute, no model to load),
        scale_in_cooldown 300 s.
    startup_health_check_timeout: default SageMaker's.
    vpc / security_groups: a created group's egress is HTTPS only (SageMaker Runtime and Bedrock through VPC
        interface endpoints or NAT), plus the port of an openai URL.
    latency_slo: p95 ModelLatency target, end to end (classification + the answering model's generation;
        default monitoring.latency.ROUTED_REQUEST_SLO_MS, 10 s); the alarm's threshold is this SLO alone.

    Network isolation is always off for the router: it calls SageMaker Runtime and Bedrock, which an
    isolated container cannot reach.
    """

    slm: GravitonEndpoint | str
    escalation: RouterEscalation
    name: str = "router"
    labels: tuple[str, ...] = ("simple", "complex")
    slm_labels: tuple[str, ...] = ("simple",)
    confidence_threshold: float = 0.7
    few_shot: tuple[Mapping[str, str], ...] = ()
    instructions: str | None = None
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    config_overrides: Mapping[str, Any] = field(default_factory=dict)
    instance_type: str = "ml.c7g.large"
    min_capacity: int = 2
    max_capacity: int = 4
    scale_out_cooldown: cdk.Duration = field(default_factory=lambda: cdk.Duration.seconds(60))
    scale_in_cooldown: cdk.Duration = field(default_factory=lambda: cdk.Duration.seconds(300))
    latency_slo: cdk.Duration = field(default_factory=lambda: cdk.Duration.millis(ROUTED_REQUEST_SLO_MS))

    # -- derived (instance, scales, initial_count: EndpointPropsBase) -----------------------------

    @property
    def slm_endpoint_name(self) -> str:
        return _endpoint_name(self.slm)

    def target_in_flight(self) -> float:
        return self.target_concurrency or float(max(1, int(self.max_in_flight * TARGET_IN_FLIGHT_SHARE)))

    def router_config(self, region: str) -> dict[str, Any]:
        """The router's JSON config (containers/router/README.md). The SLM is a SageMaker endpoint:
        `slm_endpoint_name` + `slm_region` (see the README's "Router support needed")."""
        # The decision keys through the one builder the EKS chart and `cpu-inference local` use too; the whole
        # config typed as the router reads it (config_overrides too: a wrong key or type fails at synth).
        decided = decision(
            labels=self.labels,
            slm_labels=self.slm_labels,
            confidence_threshold=self.confidence_threshold,
            few_shot=self.few_shot,
            instructions=self.instructions,
        )
        config = decided.updated(
            max_in_flight=self.max_in_flight,
            slm_endpoint_name=self.slm_endpoint_name,
            slm_region=region,
            escalation=self.escalation.router_escalation(region),
        )
        try:
            overrides = config_of(self.config_overrides)
        except ConfigError as e:
            raise ValueError(f"RouterEndpointProps.config_overrides.{e}") from None
        return config.updated(**{key: getattr(overrides, key) for key in overrides.set_keys()}).to_dict()

    def config_size_bytes(self) -> int:
        """Upper estimate of ROUTER_CONFIG_JSON's size: the longest Region name, 63 bytes per deploy-time token."""
        text = json.dumps(self.router_config(_LONGEST_REGION), separators=(",", ":"), ensure_ascii=False)
        return len(_TOKEN.sub("x" * _TOKEN_BYTES, text).encode())

    # -- validation -------------------------------------------------------------------------------

    def validate(self) -> None:
        p = "RouterEndpointProps"
        self._check_name(p)
        self._validate_image(p)
        _check_endpoint(self.slm, f"{p}.slm")
        if not isinstance(self.escalation, RouterEscalation):
            raise ValueError(
                f"{p}.escalation must be a RouterEscalation (RouterEscalation.sagemaker / .bedrock / .openai), got {type(self.escalation).__name__}"
            )
        self.escalation.validate()
        if self.escalation.kind == "sagemaker" and self.escalation.endpoint_name == self.slm_endpoint_name:
            raise ValueError(
                f"{p}.escalation: the SLM's own endpoint cannot be the escalation target — escalate to the LLM's endpoint"
            )
        self._validate_decision(p)
        self._validate_capacity(p)
        self._check_timeout(p, "startup_health_check_timeout")
        self._check_network(p)
        self._check_alarms(p)
        self._check_naming(p)
        size = self.config_size_bytes()
        if size > ENV_VALUE_MAX_BYTES:
            raise ValueError(
                f"{p}: the router config is {size} bytes as JSON but SageMaker allows {ENV_VALUE_MAX_BYTES} bytes per "
                f"environment value (ROUTER_CONFIG_JSON) — shorten few_shot ({len(self.few_shot)} examples) or instructions, "
                "or leave few_shot empty to use the router's built-in examples"
            )

    def _validate_image(self, p: str) -> None:
        self._check_image(p, built_from=" (built from containers/router)")
        arch = self._check_instance_type(p, "ml.c7g.large").arch
        self._check_image_arch(p, arch, "the router image")

    def _validate_decision(self, p: str) -> None:
        labels = list(self.labels)
        if len(labels) < 2 or len(set(labels)) != len(labels):
            raise ValueError(f"{p}.labels needs at least two distinct labels, got {labels}")
        bad = [x for x in labels if not x or not x.isprintable() or x != x.strip()]
        if bad:
            raise ValueError(f"{p}.labels must be non-empty printable text without surrounding spaces, got {bad}")
        unknown = [x for x in self.slm_labels if x not in labels]
        if not self.slm_labels or unknown or set(self.slm_labels) == set(labels):
            raise ValueError(
                f"{p}.slm_labels must be a non-empty strict subset of labels {labels} (the rest escalate), got {list(self.slm_labels)}"
            )
        if not 0 <= self.confidence_threshold <= 1:
            raise ValueError(f"{p}.confidence_threshold must be within 0..1, got {self.confidence_threshold}")
        for i, shot in enumerate(self.few_shot):
            if set(shot) != {"text", "label"} or shot["label"] not in labels or not str(shot["text"]).strip():
                raise ValueError(
                    f"{p}.few_shot[{i}] needs exactly the keys text (non-empty) and label (one of {labels}), got {dict(shot)!r}"
                )
        if not self.few_shot and not set(labels) >= BUILTIN_FEW_SHOT_LABELS:
            raise ValueError(
                f"{p}.few_shot: labels {labels} need their own examples — the router's built-in ones are labelled simple/complex"
            )
        if self.max_in_flight < 1:
            raise ValueError(f"{p}.max_in_flight must be >= 1, got {self.max_in_flight}")
        owned = sorted(set(self.config_overrides) - OVERRIDABLE_KEYS)
        if owned:
            raise ValueError(
                f"{p}.config_overrides may not set {', '.join(owned)}: the construct sets them from its props or SageMaker's "
                f"contract (overridable: {', '.join(sorted(OVERRIDABLE_KEYS))})"
            )

    def _validate_capacity(self, p: str) -> None:
        self._check_capacity_bounds(p)
        if self.target_concurrency is not None and not 0 < self.target_concurrency <= self.max_in_flight:
            raise ValueError(
                f"{p}.target_concurrency must be > 0 and <= max_in_flight ({self.max_in_flight}: 429 beyond it), got {self.target_concurrency}"
            )
