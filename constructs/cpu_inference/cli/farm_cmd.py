"""`cpu-inference farm report CONFIG`: which models of a model farm are used, what each costs, which are idle.

Sources (one of):
  --metrics URL|FILE   Prometheus text expositions (repeatable): the gateway's /metrics and each pool replica's
                       supervisor /metrics (side port, inference_runtime.pool_status), as `cpu-inference local` or a
                       port-forward exposes them. Counters are summed over the sources. With --interval S the
                       sources are scraped twice, S seconds apart, and the report covers that interval; without it
                       the counters since each process started (--window says how long that was, for costs in USD).
  --prometheus URL     a Prometheus HTTP API (an Amazon Managed Prometheus workspace URL is SigV4-signed with the
                       botocore credentials), over --window (default 30d): increase() of the same counters.

Per model: requests, share of the farm's traffic, busy time (seconds to the response head summed over its
requests; the gateway's gateway_request_seconds), its share of its pool's busy time, cost (the pool's cost over the
window × that share) and its share of the farm's cost, cold loads and mean cold-load time (the supervisors'
series), 5xx. Idle models: in the config, no request in the window. A pool's cost per hour: --hourly-cost POOL=USD
(all its replicas; NAME may also be a dedicated model), else --instance-type with --price-per-hour or the AWS Price
List API (evaluation/pricing.py): the node's price × the share of it one replica blocks (max of its cpu and
memory shares) × the pool's live replicas (the gateway's gateway_pool_replica_up, averaged over the window).
"""

from __future__ import annotations

import argparse
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cpu_inference.cli import farm_status
from cpu_inference.cli.main import UserError
from inference_runtime.pool_status import COLD_LOAD_SECONDS, COLD_LOADS, COPY_FAILED_MODEL, LOAD_FAILURES

# The gateway's series (containers/router/slm_router/metrics.py); the rules read the same names (monitoring/farm_rules).
REQUESTS = "gateway_requests_total"
BUSY_SECONDS = "gateway_request_seconds_sum"
POOL_REPLICA_UP = "gateway_pool_replica_up"
PER_MODEL_COUNTERS = (BUSY_SECONDS, COLD_LOADS, COLD_LOAD_SECONDS, LOAD_FAILURES)

DEFAULT_WINDOW = "30d"
HTTP_TIMEOUT_S = 30.0
# Subquery resolution for the mean number of live pool replicas over the window: KEDA scales within minutes.
REPLICAS_RESOLUTION = "5m"
# Amazon Managed Prometheus query endpoints: https://aps-workspaces.<region>.amazonaws.com/workspaces/<id>/api/v1/query
# (AMP user guide, "Query your Prometheus metrics"), signed with SigV4 for service `aps`.
AMP_HOST = re.compile(r"^aps-workspaces\.([a-z0-9-]+)\.amazonaws\.com$")
AMP_SERVICE = "aps"
_DURATION = re.compile(r"^(\d+)([smhdwy])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}  # Prometheus durations (365d years)


def register(sub: argparse._SubParsersAction) -> None:
    farm = sub.add_parser(
        "farm", help="operate a model farm: `farm report` ranks models by traffic and cost; `farm status` copy progress"
    )
    farm_sub = farm.add_subparsers(dest="farm_command", required=True, metavar="SUBCOMMAND")
    p = farm_sub.add_parser(
        "report",
        help="models ranked by requests, share of traffic and cost, cold loads, errors; the idle ones",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("config", nargs="?", default="config.yaml", help="the farm's config (its models and pools)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--metrics", action="append", metavar="URL|FILE", help="a /metrics exposition (repeatable)")
    src.add_argument("--prometheus", metavar="URL", help="a Prometheus HTTP API base URL (AMP: the workspace URL)")
    p.add_argument(
        "--interval", type=float, metavar="S", help="--metrics: scrape twice, S seconds apart; report that interval"
    )
    p.add_argument(
        "--window",
        metavar="DURATION",
        help=f"--prometheus: the window (default {DEFAULT_WINDOW}); --metrics without --interval: how long the "
        "counters have run (for costs in USD)",
    )
    p.add_argument("--match", default="", metavar="LABELS", help='--prometheus: extra matchers, e.g. namespace="farm"')
    p.add_argument(
        "--hourly-cost", action="append", default=[], metavar="NAME=USD", help="a pool's (or dedicated model's) USD/h"
    )
    p.add_argument("--instance-type", metavar="TYPE", help="EKS: the node type pool replicas run on (its price)")
    p.add_argument("--price-per-hour", type=float, metavar="USD", help="the node's USD/h (else the AWS Price List API)")
    p.add_argument("--region", help="region of the price (default: AWS_REGION / profile, else us-east-1)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)
    farm_status.register(farm_sub)


# --- sources -------------------------------------------------------------------------------------------------------


@dataclass
class Counts:
    """What the report needs, summed over sources (gateway pods, pool replicas)."""

    requests: dict[tuple[str, str], float] = field(default_factory=dict)  # (model, code) -> count
    per_model: dict[str, dict[str, float]] = field(default_factory=dict)  # series name -> model -> value
    copy_failed: set[str] = field(default_factory=set)
    replicas: dict[str, float] = field(default_factory=dict)  # pool -> live replicas (mean over the window)


def duration_seconds(text: str) -> float:
    m = _DURATION.match(text.strip())
    if not m:
        raise UserError(f"--window {text!r}: give a Prometheus duration such as 30d, 12h or 90m")
    return float(int(m.group(1)) * _UNITS[m.group(2)])


def read_exposition(source: str) -> str:
    if re.match(r"^https?://", source):
        try:
            with urllib.request.urlopen(source, timeout=HTTP_TIMEOUT_S) as r:  # noqa: S310 - the user's URL
                return r.read().decode()
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise UserError(f"--metrics {source}: cannot read it ({reason})") from None
    path = Path(source)
    if not path.is_file():
        raise UserError(f"--metrics {source}: no such file (give a /metrics URL or a saved exposition)")
    return path.read_text()


def parse_expositions(texts: Iterable[tuple[str, str]]) -> Counts:
    """Sum the report's series over (source, exposition text) pairs."""
    from prometheus_client.parser import text_string_to_metric_families

    c = Counts()
    up: dict[tuple[str, str], float] = {}
    for source, text in texts:
        try:
            families = list(text_string_to_metric_families(text))
        except ValueError as exc:
            raise UserError(f"--metrics {source}: not a Prometheus text exposition ({exc})") from None
        for family in families:
            for s in family.samples:
                model = s.labels.get("model")
                if s.name == REQUESTS and model:
                    key = (model, s.labels.get("code", ""))
                    c.requests[key] = c.requests.get(key, 0.0) + s.value
                elif s.name in PER_MODEL_COUNTERS and model:
                    bucket = c.per_model.setdefault(s.name, {})
                    bucket[model] = bucket.get(model, 0.0) + s.value
                elif s.name == COPY_FAILED_MODEL and model and s.value > 0:
                    c.copy_failed.add(model)
                elif s.name == POOL_REPLICA_UP and "pool" in s.labels:
                    key = (s.labels["pool"], s.labels.get("replica", ""))
                    up[key] = max(up.get(key, 0.0), s.value)  # live for any gateway pod
    for (pool, _), v in up.items():
        c.replicas[pool] = c.replicas.get(pool, 0.0) + v
    return c


def delta(before: Counts, after: Counts) -> Counts:
    """Counter increase between two scrapes; a counter that went down was reset (a restart): its new value."""

    def inc(a: Mapping[Any, float], b: Mapping[Any, float]) -> dict[Any, float]:
        return {k: (v - a.get(k, 0.0) if v >= a.get(k, 0.0) else v) for k, v in b.items()}

    return Counts(
        requests=inc(before.requests, after.requests),
        per_model={name: inc(before.per_model.get(name, {}), v) for name, v in after.per_model.items()},
        copy_failed=after.copy_failed,
        replicas=after.replicas,
    )


def scrape(sources: Sequence[str], interval: float | None, sleep: Callable[[float], None] = time.sleep) -> Counts:
    first = parse_expositions((s, read_exposition(s)) for s in sources)
    if interval is None:
        return first
    sleep(interval)
    return delta(first, parse_expositions((s, read_exposition(s)) for s in sources))


def _sigv4_headers(url: str) -> dict[str, str]:
    """SigV4 headers for a GET of `url` on an AMP workspace (botocore's signer and credential chain)."""
    import botocore.session
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    host = urllib.parse.urlsplit(url).hostname or ""
    m = AMP_HOST.match(host)
    assert m is not None
    creds = botocore.session.get_session().get_credentials()
    if creds is None:
        raise UserError(f"--prometheus {url}: an AMP workspace needs AWS credentials (none found by botocore)")
    request = AWSRequest(method="GET", url=url)
    SigV4Auth(creds.get_frozen_credentials(), AMP_SERVICE, m.group(1)).add_auth(request)
    return dict(request.headers.items())


def query_api(base: str, query: str) -> list[dict[str, Any]]:
    """An instant query's vector: [{"metric": {...}, "value": [ts, "v"]}] (the Prometheus HTTP API's documented
    response: https://prometheus.io/docs/prometheus/latest/querying/api/#instant-queries)."""
    url = base.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": query})
    host = urllib.parse.urlsplit(url).hostname or ""
    headers = _sigv4_headers(url) if AMP_HOST.match(host) else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=HTTP_TIMEOUT_S) as r:  # noqa: S310
            body = json.loads(r.read())
    except urllib.error.HTTPError as exc:  # 400/422/503 carry the API's JSON error
        try:
            body = json.loads(exc.read())
        except ValueError:
            raise UserError(f"--prometheus {base}: HTTP {exc.code} for {query}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise UserError(f"--prometheus {base}: cannot query it ({getattr(exc, 'reason', exc)})") from None
    if body.get("status") != "success":
        raise UserError(f"--prometheus {base}: {body.get('errorType', 'error')}: {body.get('error')} (query {query})")
    data = body.get("data") or {}
    if data.get("resultType") != "vector":
        raise UserError(f"--prometheus {base}: expected a vector for {query}, got {data.get('resultType')}")
    return list(data.get("result") or [])


def api_queries(window: str, match: str = "") -> dict[str, str]:
    m = f"{{{match}}}" if match else ""
    q = {
        REQUESTS: f"sum by (model, code) (increase({REQUESTS}{m}[{window}]))",
        COPY_FAILED_MODEL: f"max by (model) ({COPY_FAILED_MODEL}{m})",
        POOL_REPLICA_UP: f"sum by (pool) (avg_over_time((max by (pool, replica) ({POOL_REPLICA_UP}{m}))"
        f"[{window}:{REPLICAS_RESOLUTION}]))",
    }
    for name in PER_MODEL_COUNTERS:
        q[name] = f"sum by (model) (increase({name}{m}[{window}]))"
    return q


def from_api(base: str, window: str, match: str = "") -> Counts:
    c = Counts()
    for name, query in api_queries(window, match).items():
        for row in query_api(base, query):
            labels, value = row.get("metric", {}), float(row["value"][1])
            if name == REQUESTS and "model" in labels:
                c.requests[(labels["model"], labels.get("code", ""))] = value
            elif name == COPY_FAILED_MODEL and "model" in labels and value > 0:
                c.copy_failed.add(labels["model"])
            elif name == POOL_REPLICA_UP and "pool" in labels:
                c.replicas[labels["pool"]] = value
            elif "model" in labels:
                c.per_model.setdefault(name, {})[labels["model"]] = value
    return c


# --- the report ----------------------------------------------------------------------------------------------------


@dataclass
class Group:
    """A pool, or a dedicated model: what its cost is shared by."""

    name: str
    kind: str  # pool | dedicated
    models: list[str]
    hourly_cost_usd: float | None = None
    cost_source: str = "unknown"
    replicas: float | None = None
    cost_usd: float | None = None


@dataclass
class ModelRow:
    model: str
    group: str
    requests: float
    traffic_share: float
    busy_seconds: float
    busy_share_of_pool: float
    cost_usd: float | None
    cost_share: float | None
    cold_loads: float
    mean_cold_load_seconds: float | None
    errors_5xx: float
    unavailable_503: float
    load_failures: float
    copy_failed: bool


def groups_of(config: Any) -> list[Group]:
    groups = [Group(p.name, "pool", [m.name for m in config.pool_models(p.name)]) for p in config.farm.pools]
    groups += [Group(m.name, "dedicated", [m.name]) for m in config.models if config.pool_of(m) is None]
    return groups


def parse_costs(items: Sequence[str], names: set[str]) -> dict[str, float]:
    costs: dict[str, float] = {}
    for item in items:
        name, sep, usd = item.partition("=")
        try:
            value = float(usd) if sep else -1.0
        except ValueError:
            value = -1.0
        if value < 0:
            raise UserError(f"--hourly-cost {item!r}: give NAME=USD per hour, e.g. small=0.42")
        if name not in names:
            raise UserError(
                f"--hourly-cost {name}: not a pool or dedicated model of the config ({', '.join(sorted(names))})"
            )
        costs[name] = value
    return costs


def price_groups(
    groups: Sequence[Group],
    given: Mapping[str, float],
    config: Any,
    counts: Counts,
    args: argparse.Namespace,
    hours: float | None,
) -> None:
    node = None
    if args.instance_type or args.price_per_hour is not None:
        from cpu_inference import sizing
        from cpu_inference.cli.bench_cmd import _region
        from cpu_inference.evaluation.pricing import resolve_price

        if not args.instance_type:
            raise UserError("--price-per-hour is the node's price: give --instance-type too (its vCPUs and memory)")
        if args.instance_type not in sizing.CATALOG:
            raise UserError(
                f"--instance-type {args.instance_type}: not in the instance catalog (`cpu-inference size` lists them)"
            )
        price = resolve_price(args.instance_type, _region(args.region)[0], price_per_hour=args.price_per_hour)
        node = (sizing.CATALOG[args.instance_type], price)
    pools = {p.name: p for p in config.farm.pools}
    for g in groups:
        if g.kind == "pool":
            pool = pools[g.name]
            g.replicas = counts.replicas.get(g.name, float(pool.replicas.min))
        if g.name in given:
            g.hourly_cost_usd, g.cost_source = given[g.name], "--hourly-cost"
        elif g.kind == "pool" and node is not None and node[1].usd_per_hour is not None:
            it, price = node
            share = max(pools[g.name].cpu / it.vcpus, pools[g.name].memory_gib / it.memory_gib)
            assert g.replicas is not None and price.usd_per_hour is not None
            g.hourly_cost_usd = price.usd_per_hour * share * g.replicas
            g.cost_source = (
                f"{it.name} ${price.usd_per_hour:g}/h ({price.source}) × {share:.2f} × {g.replicas:g} replicas"
            )
        if g.hourly_cost_usd is not None and hours is not None:
            g.cost_usd = g.hourly_cost_usd * hours


def build_report(config: Any, counts: Counts, groups: Sequence[Group], window_seconds: float | None) -> dict[str, Any]:
    requests: dict[str, float] = defaultdict(float)
    errors: dict[str, float] = defaultdict(float)
    unavailable: dict[str, float] = defaultdict(float)
    for (model, code), v in counts.requests.items():
        requests[model] += v
        if code.startswith("5"):
            (unavailable if code == "503" else errors)[model] += v
    busy = counts.per_model.get(BUSY_SECONDS, {})
    cold = counts.per_model.get(COLD_LOADS, {})
    cold_s = counts.per_model.get(COLD_LOAD_SECONDS, {})
    failures = counts.per_model.get(LOAD_FAILURES, {})
    total = sum(requests.values())
    group_of = {m: g for g in groups for m in g.models}
    # Cost share needs every group's cost per hour (the window cancels); USD needs the window too.
    weights = {g.name: g.hourly_cost_usd for g in groups}
    rows: list[ModelRow] = []
    configured = [m.name for m in config.models]
    seen = set(configured) | set(requests)  # a model the config no longer lists still shows (pool "?")
    for model in seen:
        g = group_of.get(model)
        pool_busy = sum(busy.get(m, 0.0) for m in (g.models if g else [model]))
        share = busy.get(model, 0.0) / pool_busy if pool_busy > 0 else 0.0
        rows.append(
            ModelRow(
                model=model,
                group=g.name if g else "?",
                requests=requests.get(model, 0.0),
                traffic_share=requests.get(model, 0.0) / total if total else 0.0,
                busy_seconds=busy.get(model, 0.0),
                busy_share_of_pool=share,
                cost_usd=g.cost_usd * share if g and g.cost_usd is not None else None,
                cost_share=None,
                cold_loads=cold.get(model, 0.0),
                mean_cold_load_seconds=cold_s.get(model, 0.0) / cold[model] if cold.get(model) else None,
                errors_5xx=errors.get(model, 0.0),
                unavailable_503=unavailable.get(model, 0.0),
                load_failures=failures.get(model, 0.0),
                copy_failed=model in counts.copy_failed,
            )
        )
    # Cost share among the priced groups (the window cancels out): a group's cost per hour × the model's busy share.
    # An idle group still costs but has no model to charge it to: the shares are of the busy groups' cost.
    hourly = {r.model: w * r.busy_share_of_pool for r in rows if (w := weights.get(r.group)) is not None}
    farm = sum(hourly.values())
    for r in rows:
        r.cost_share = hourly[r.model] / farm if r.model in hourly and farm > 0 else None
    rows.sort(key=lambda r: (-r.requests, -r.busy_seconds, r.model))
    idle = sorted(r.model for r in rows if r.requests == 0)
    return {
        "window_seconds": window_seconds,
        "requests": total,
        "models": [asdict(r) for r in rows if r.requests > 0],
        "idle": idle,
        "copy_failed": sorted(counts.copy_failed),
        "groups": [asdict(g) for g in groups],
    }


def _num(v: float | None, fmt: str = "{:,.0f}") -> str:
    return "—" if v is None else fmt.format(v)


def _window_text(seconds: float) -> str:
    return (
        f"{seconds / 86400:g} d"
        if seconds >= 86400
        else f"{seconds / 3600:.2f} h"
        if seconds >= 3600
        else f"{seconds:.0f} s"
    )


def render_table(report: dict[str, Any]) -> str:
    head = (
        "model",
        "pool",
        "requests",
        "traffic",
        "busy s",
        "of pool",
        "cost $",
        "cost",
        "cold",
        "cold s",
        "5xx",
        "503",
    )
    lines = [
        (
            r["model"],
            r["group"],
            _num(r["requests"]),
            _num(r["traffic_share"], "{:.1%}"),
            _num(r["busy_seconds"], "{:,.1f}"),
            _num(r["busy_share_of_pool"], "{:.1%}"),
            _num(r["cost_usd"], "{:,.4g}"),
            _num(r["cost_share"], "{:.1%}"),
            _num(r["cold_loads"]),
            _num(r["mean_cold_load_seconds"], "{:.2f}"),
            _num(r["errors_5xx"]),
            _num(r["unavailable_503"]),
        )
        for r in report["models"]
    ]
    widths = [max(len(x) for x in col) for col in zip(head, *lines, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" if i < 2 else f"{{:>{w}}}" for i, w in enumerate(widths))
    window = report["window_seconds"]
    out = [
        f"window: {_window_text(window) if window else 'since the processes started'}; "
        f"{report['requests']:,.0f} requests to {len(report['models'])} models",
        fmt.format(*head),
        *(fmt.format(*row) for row in lines),
    ]
    for g in report["groups"]:
        if g["kind"] == "pool":
            cost = (
                f"${g['hourly_cost_usd']:.4g}/h ({g['cost_source']})"
                if g["hourly_cost_usd"] is not None
                else "cost unknown"
            )
            out.append(f"pool {g['name']}: {len(g['models'])} models, {g['replicas']:g} replica(s), {cost}")
    if any(g["hourly_cost_usd"] is None for g in report["groups"] if g["kind"] == "pool"):
        out.append("costs: pass --hourly-cost POOL=USD, or --instance-type (and --price-per-hour or AWS credentials)")
    out.append(f"idle ({len(report['idle'])}): {', '.join(report['idle']) or '—'}")
    if report["copy_failed"]:
        out.append(f"copy failed ({len(report['copy_failed'])}): {', '.join(report['copy_failed'])}")
    return "\n".join(out)


def report(args: argparse.Namespace) -> dict[str, Any]:
    from cpu_inference.config.loader import load

    config = load(args.config)
    if config.pattern != "model-farm":
        raise UserError(f"{args.config}: pattern is {config.pattern}; farm report reads a model-farm config")
    groups = groups_of(config)
    given = parse_costs(args.hourly_cost, {g.name for g in groups})  # before any I/O: a typo fails at once
    if args.prometheus:
        if args.interval is not None:
            raise UserError("--interval goes with --metrics (two scrapes); --prometheus uses --window")
        window = args.window or DEFAULT_WINDOW
        seconds: float | None = duration_seconds(window)
        counts = from_api(args.prometheus, window, args.match)
    else:
        if args.interval is not None and args.interval <= 0:
            raise UserError("--interval must be > 0 seconds")
        if args.interval is not None and args.window:
            raise UserError("--window and --interval both set the window: give one")
        seconds = (
            args.interval if args.interval is not None else (duration_seconds(args.window) if args.window else None)
        )
        counts = scrape(args.metrics, args.interval)
    price_groups(groups, given, config, counts, args, seconds / 3600 if seconds else None)
    return build_report(config, counts, groups, seconds)


def run(args: argparse.Namespace) -> int:
    data = report(args)
    print(json.dumps(data, indent=2) if args.json else render_table(data))
    return 0
