"""The README reference tables, rendered from where each default is defined (issue 24: document defaults once).

    python scripts/reference_tables.py           # check: exit 1 naming the stale blocks (as the test does)
    python scripts/reference_tables.py --write   # rewrite them (`make docs`)

Each table lives between `<!-- BEGIN GENERATED: <name> -->` and `<!-- END GENERATED: <name> -->` in a README; the
prose around it is hand-written. The sources:

- `config-yaml` (README.md): every config.yaml key, walked from the pydantic schema (cpu_inference.config.schema):
  its default (a nested block's defaults are its parent's default instance's, so `router.replicas.min` is 2, not
  Replicas' 1) and its Field description.
- `graviton-endpoint-props`, `router-endpoint-props` (sagemaker/README.md): each props dataclass's field defaults
  (dataclasses.fields). A row here groups fields and says what they do; a default the construct computes (the field
  is None or empty) is described by the row, from the constants that compute it. Every field must be in one row,
  and only an unset field may carry a described default, so a literal default always comes from the dataclass.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import re
import sys
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parents[1]
BEGIN = "<!-- BEGIN GENERATED: {name} -->"
END = "<!-- END GENERATED: {name} -->"
NOTE = "<!-- rendered by scripts/reference_tables.py from the definitions; edit those, then run `make docs` -->"


def md(text: str) -> str:
    """A table cell: pipes escaped, one line."""
    return " ".join(text.split()).replace("|", "\\|")


def code(text: str) -> str:
    return f"`{text}`"


# -- config.yaml (pydantic) -----------------------------------------------------------------------------------------


def _models_in(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """(the BaseModel an annotation holds, whether it is a list of them) — `X | None`, `list[X]` unwrapped."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            if arg is not type(None):
                return _models_in(arg)
        return None, False
    if origin is list:
        inner, _ = _models_in(typing.get_args(annotation)[0])
        return inner, inner is not None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    return None, False


def yaml_value(value: Any) -> str:
    """A default as it would be written in config.yaml (flow style)."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json", exclude_defaults=True)
    if isinstance(value, enum.Enum):
        value = value.value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, list | tuple):
        return "[" + ", ".join(yaml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {yaml_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def config_rows(
    model: type[BaseModel], instance: BaseModel | None, prefix: str, no_expand: frozenset[type]
) -> Iterator[tuple[str, str, str]]:
    """(key, default, description) of every key below `model`, depth first in declaration order. `instance`: the
    block's default as its parent sets it (None: the block's own field defaults)."""
    for name, info in model.model_fields.items():
        key = f"{prefix}{info.alias or name}"
        sub, is_list = _models_in(info.annotation)
        if instance is not None:
            required, default = False, getattr(instance, name)
        elif info.default is not PydanticUndefined:
            required, default = False, info.default
        elif info.default_factory is not None:
            required, default = False, info.default_factory()  # type: ignore[call-arg]
        else:
            required, default = True, None
        if sub is None or sub in no_expand:
            yield key, "required" if required else code(yaml_value(default)), info.description or ""
            continue
        block_doc = (
            info.description
            or (sub.__doc__ if sub.__doc__ and sub.__doc__ != BaseModel.__doc__ else "")
            or "a block: its keys follow"
        )
        if is_list:  # a list of blocks: its default, then each entry's keys under key[]
            yield key, "required" if required else code(yaml_value(default)), block_doc
            yield from config_rows(sub, None, f"{key}[].", no_expand)
        elif default is None:  # an optional block, absent by default: its keys as written inside it
            yield key, "required" if required else code("null"), block_doc
            yield from config_rows(sub, None, f"{key}.", no_expand)
        else:  # a block with a default: its keys' defaults are that default's
            if info.description:
                yield key, "—", info.description
            yield from config_rows(sub, default, f"{key}.", no_expand)


def config_table() -> str:
    from cpu_inference.config import schema

    partials = frozenset({schema.ModelDefaults, schema.ModelEntry, schema.PartialModelSource})
    lines = ["| key | default | what |", "|---|---|---|"]
    lines += [
        f"| {code(key)} | {md(default)} | {md(what)} |"
        for key, default, what in config_rows(schema.Config, None, "", partials)
    ]
    return "\n".join(lines)


# -- props dataclasses ----------------------------------------------------------------------------------------------


def props_value(value: Any) -> str:
    """A props default as a Python user writes it (durations in s or ms)."""
    import aws_cdk as cdk

    if isinstance(value, cdk.Duration):
        ms = value.to_milliseconds()
        return f"{ms:g} ms" if ms < 1000 or ms % 1000 else f"{ms / 1000:g} s"
    if isinstance(value, enum.Enum):
        return code(value.name)
    if isinstance(value, bool):
        return code(str(value))
    if isinstance(value, int | float):
        return f"{value:g}"
    if isinstance(value, str):
        return code(value)
    if isinstance(value, tuple):
        return code(repr(value))
    return code(repr(value))


def _unset(value: Any) -> bool:
    return value is None or (isinstance(value, tuple | list | dict | Mapping) and not value)


@dataclass(frozen=True)
class Row:
    """Fields shown together; `computed`: what an unset field's default is (the construct computes it)."""

    fields: tuple[str, ...]
    what: str
    computed: Mapping[str, str | Callable[[], str]] = field(default_factory=dict)
    together: str | None = None  # one description of the default for every field of the row (all unset)


def _field_default(f: dataclasses.Field[Any]) -> tuple[bool, Any]:
    if f.default is not dataclasses.MISSING:
        return True, f.default
    if f.default_factory is not dataclasses.MISSING:
        return True, f.default_factory()
    return False, None


def props_table(cls: type, rows: Sequence[Row]) -> str:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    listed = [name for row in rows for name in row.fields]
    missing, unknown = sorted(set(fields) - set(listed)), sorted(set(listed) - set(fields))
    twice = sorted({n for n in listed if listed.count(n) > 1})
    if missing or unknown or twice:
        raise SystemExit(
            f"{cls.__name__}: every field in exactly one row (scripts/reference_tables.py) — "
            f"missing {missing}, unknown {unknown}, twice {twice}"
        )
    lines = ["| prop | default | what |", "|---|---|---|"]
    for row in rows:
        shown: list[str] = []
        for name in row.fields:
            has, value = _field_default(fields[name])
            described = row.computed.get(name)
            if (described is not None or row.together is not None) and has and not _unset(value):
                raise SystemExit(
                    f"{cls.__name__}.{name}: its default {value!r} is set in the dataclass; only an unset "
                    "default (None, empty) may be described in scripts/reference_tables.py"
                )
            if not has:
                shown.append("required")
            elif described is not None:
                shown.append(described() if callable(described) else described)
            else:
                shown.append("—" if _unset(value) else props_value(value))
        if row.together is not None:
            default = row.together
        elif set(shown) == {"required"}:
            default = "required"
        else:
            default = ", ".join(shown) if len(set(shown)) > 1 else shown[0]
        lines.append(f"| {', '.join(code(n) for n in row.fields)} | {md(default)} | {md(row.what)} |")
    return "\n".join(lines)


def _alarm_output_tokens() -> str:
    from cpu_inference.monitoring import latency

    by_count: dict[int, list[str]] = {}
    for task, tokens in latency.ALARM_OUTPUT_TOKENS.items():
        by_count.setdefault(tokens, []).append(task)
    parts = ", ".join(f"{n} {'/'.join(tasks)}" for n, tasks in sorted(by_count.items(), reverse=True))
    return f"by task ({parts}; an SLM that answers: {latency.ALARM_OUTPUT_TOKENS[latency.ANSWER_TASK]})"


def _time_per_output_token() -> str:
    from cpu_inference.engines import LLAMA_CPP, VLLM
    from cpu_inference.monitoring import latency

    ms = latency.TIME_PER_OUTPUT_TOKEN_MS
    return f"{ms[LLAMA_CPP]} ms (vLLM: {ms[VLLM]} ms)"


def _slot_target() -> str:
    from cpu_inference.sagemaker import endpoint_props

    return f"{endpoint_props.TARGET_SLOT_UTILIZATION:.0%} of the slots"


def _in_flight_target() -> str:
    from cpu_inference.sagemaker import router_props

    share, default = router_props.TARGET_IN_FLIGHT_SHARE, router_props.DEFAULT_MAX_IN_FLIGHT
    return f"{share:.0%} of `max_in_flight` ({int(default * share)})"


_VPC = "no VPC"
_ALARMS = (
    "latency_slo",
    "error_rate_4xx_percent",
    "error_rate_5xx_percent",
    "utilization_alarm_percent",
    "alarm_topic",
    "dashboard",
)

GRAVITON_ROWS = (
    Row(
        ("name", "model", "spec", "image"),
        "DNS label; `ModelArtifact` or `s3://bucket/prefix/`; `sizing.ModelSpec` (`engine` llama.cpp or vllm); `LlamaCppImage` or `EngineImage(repository, tag=/digest=, engine=)` serving `spec.engine`",
    ),
    Row(
        ("instance_type",),
        "must be a SageMaker instance of `sizing`'s catalog, the model must fit it (else the error names a larger one), and the image must have its architecture",
    ),
    Row(
        ("min_capacity", "max_capacity", "initial_instance_count"),
        "instance bounds (min ≥ 1: real-time endpoints do not scale to zero)",
        {"initial_instance_count": "min"},
    ),
    Row(
        ("autoscaling", "target_concurrency"),
        "target tracking on `ConcurrentRequestsPerModel` (below) when max > min",
        {"target_concurrency": _slot_target},
    ),
    Row(
        ("scale_out_cooldown", "scale_in_cooldown"),
        "a new instance takes minutes (boot, download, load), so scale in slowly",
    ),
    Row(
        ("queue_depth",),
        "requests admitted per instance beyond the slots; more get 429 + `Retry-After`",
        {"queue_depth": "= slots"},
    ),
    Row(
        ("environment",),
        "extra engine settings (`LLAMA_FLASH_ATTN`, `LLAMA_EXTRA_ARGS`, …; vLLM: `SERVE_EXTRA_ARGS`); the computed keys are refused",
    ),
    Row(
        ("model_file", "model_key"),
        "S3-URI models: the GGUF's path under the prefix (`MODEL_PATH`; refused for vLLM, which serves the directory), the bucket's KMS key",
    ),
    Row(
        ("lora_manifest",),
        "S3-URI llama.cpp models served with LoRA adapters: the manifest's path under the prefix (a farm catalog's `lora` bundle: `lora.json`; `LLAMA_LORA_MANIFEST`). Clients pick an adapter by its name in the body's `model`; `spec.adapter_bytes` counts in memory, volume and timeouts",
    ),
    Row(
        ("model_download_timeout", "startup_health_check_timeout"),
        "60..3600 s (below)",
        together="sized to the model file (vLLM: + its compile warm-up)",
    ),
    Row(
        ("volume_size_gb",),
        "ML storage volume in GB (SageMaker downloads the model onto it; `VolumeSizeInGB` 1–512 per botocore). Not set on instance-storage types (`ml.r7gd`): SageMaker attaches no EBS volume there and refuses the field",
        {"volume_size_gb": "model file + 10 % + 6 GiB (vLLM: 10 GiB)"},
    ),
    Row(
        ("vpc", "vpc_subnets", "security_groups"),
        "with a VPC and no groups: one group, no inbound, HTTPS egress only (S3/ECR via VPC endpoints or NAT)",
        together=_VPC,
    ),
    Row(
        ("network_isolation",),
        "no network from the container (the engine runs `--offline`; SageMaker still downloads the model and pulls the image)",
    ),
    Row(
        ("encryption_key",),
        "ML storage volume, container logs (created key only) and captured data",
        {"encryption_key": "new key, rotation on"},
    ),
    Row(
        ("data_capture_percent", "data_capture_bucket", "data_capture_prefix", "data_capture_retention_days"),
        "request/response capture to S3 (0 = off), KMS-encrypted; a created bucket is TLS-only, access-logged and expires captures (days)",
        {"data_capture_bucket": "new bucket", "data_capture_prefix": "`data-capture/<name>`"},
    ),
    Row(("existing_role",), "execution role to use (grants are added to it)", {"existing_role": "new role"}),
    Row(_ALARMS, "alarms and dashboard (below); `latency_slo` is the first-token target"),
    Row(
        ("alarm_output_tokens", "time_per_output_token"),
        "the answer length and decode speed the latency alarm budgets for (below)",
        {"alarm_output_tokens": _alarm_output_tokens, "time_per_output_token": _time_per_output_token},
    ),
    Row(
        ("endpoint_name_prefix", "variant_name"),
        "the endpoint name is `<prefix>-<placement hash>`",
        {"endpoint_name_prefix": "`<stack>-<name>`"},
    ),
    Row(("log_retention", "removal_policy"), "container logs; created key and capture bucket"),
)

ROUTER_ROWS = (
    Row(
        ("image", "slm", "escalation"),
        "the router image (`LlamaCppImage` from `containers/router`, or `EngineImage`); the SLM's `GravitonEndpoint` or an existing endpoint's name; `RouterEscalation.sagemaker(endpoint or name)` / `.bedrock(model_id)` / `.openai(url, model_id=)`",
    ),
    Row(("name",), "names and tags"),
    Row(
        ("labels", "slm_labels", "confidence_threshold", "few_shot", "instructions"),
        "the decision (router README); custom labels need `few_shot`",
        {"few_shot": "the router's built-in examples", "instructions": "the router's built-in prompt"},
    ),
    Row(("max_in_flight",), "requests in progress per instance; more get 429 + `Retry-After`"),
    Row(
        ("config_overrides",),
        "other router keys: `timeouts`, `retries`, `breaker`, `top_logprobs`, `classify_max_chars`, `cache_prompt`, `max_body_bytes`, `log_level`, `slm_model`",
    ),
    Row(("instance_type",), "any SageMaker CPU instance of the catalog; the image must have its architecture"),
    Row(
        ("min_capacity", "max_capacity", "initial_instance_count"),
        "two instances by default: SageMaker spreads them over Availability Zones, and the router is the front door",
        {"initial_instance_count": "min"},
    ),
    Row(
        ("autoscaling", "target_concurrency", "scale_out_cooldown", "scale_in_cooldown"),
        "target tracking on in-flight requests when max > min (below)",
        {"target_concurrency": _in_flight_target},
    ),
    Row(
        ("startup_health_check_timeout",),
        "time for `/ping` to answer 200",
        {"startup_health_check_timeout": "SageMaker's"},
    ),
    Row(
        ("vpc", "vpc_subnets", "security_groups"),
        "with a VPC and no groups: one group, no inbound, egress 443 (SageMaker Runtime, Bedrock, ECR through VPC endpoints or NAT) plus an `openai` URL's port",
        together=_VPC,
    ),
    Row(
        ("encryption_key", "log_retention", "existing_role"),
        "as `GravitonEndpoint`",
        {"encryption_key": "new key (rotation)", "existing_role": "new role"},
    ),
    Row(
        _ALARMS,
        "`EndpointMonitoring`'s alarms; the latency is end to end (classification + the answering model's generation)",
    ),
    Row(
        ("endpoint_name_prefix", "variant_name", "removal_policy"),
        "as `GravitonEndpoint`",
        {"endpoint_name_prefix": "`<stack>-<name>`"},
    ),
)


def graviton_table() -> str:
    from cpu_inference.sagemaker.props import GravitonEndpointProps

    return props_table(GravitonEndpointProps, GRAVITON_ROWS)


def router_table() -> str:
    from cpu_inference.sagemaker.router_props import RouterEndpointProps

    return props_table(RouterEndpointProps, ROUTER_ROWS)


# -- the blocks -----------------------------------------------------------------------------------------------------

SAGEMAKER_README = ROOT / "constructs" / "cpu_inference" / "sagemaker" / "README.md"
# name -> (the README holding it, the renderer)
BLOCKS: dict[str, tuple[Path, Callable[[], str]]] = {
    "config-yaml": (ROOT / "README.md", config_table),
    "graviton-endpoint-props": (SAGEMAKER_README, graviton_table),
    "router-endpoint-props": (SAGEMAKER_README, router_table),
}


def _block(name: str) -> re.Pattern[str]:
    return re.compile(re.escape(BEGIN.format(name=name)) + r"\n.*?" + re.escape(END.format(name=name)), re.S)


def rendered(name: str) -> str:
    _, render = BLOCKS[name]
    return f"{BEGIN.format(name=name)}\n{NOTE}\n\n{render()}\n\n{END.format(name=name)}"


def stale() -> list[str]:
    """The blocks whose README text differs from what the definitions render now (a missing block is stale)."""
    out = []
    for name, (path, _) in BLOCKS.items():
        found = _block(name).search(path.read_text(encoding="utf-8"))
        if found is None or found.group(0) != rendered(name):
            out.append(f"{path.relative_to(ROOT)}: {name}")
    return out


def write() -> list[str]:
    changed = []
    for name, (path, _) in BLOCKS.items():
        text = path.read_text(encoding="utf-8")
        pattern = _block(name)
        if pattern.search(text) is None:
            raise SystemExit(
                f"{path.relative_to(ROOT)}: no {BEGIN.format(name=name)} … {END.format(name=name)} markers; add them where the table goes"
            )
        new = pattern.sub(lambda _m, n=name: rendered(n), text, count=1)  # type: ignore[misc]
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(f"{path.relative_to(ROOT)}: {name}")
    return changed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--write", action="store_true", help="rewrite the generated blocks (default: check them)")
    args = p.parse_args(argv)
    if args.write:
        for line in write():
            print(f"rewrote {line}")
        return 0
    behind = stale()
    for line in behind:
        print(f"stale: {line} — run `make docs`", file=sys.stderr)
    return 1 if behind else 0


if __name__ == "__main__":
    sys.exit(main())
