"""`cpu-inference bench`: closed-loop load at each concurrency level, the p95 search, and cost per
1,000 queries at the chosen level. Produces the report dict that report.py renders."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from cpu_inference.evaluation.client import ChatClient, ChatResult
from cpu_inference.evaluation.loadgen import LoadSettings, run_level
from cpu_inference.evaluation.pricing import Price, cost_per_1k_queries, queries_per_hour
from cpu_inference.evaluation.server import ServerInfo
from cpu_inference.evaluation.stats import LevelStats, meets_target, pick_concurrency, summarize

REPORT_KIND = "cpu-inference.bench"
REPORT_VERSION = 1


@dataclass(frozen=True)
class BenchPlan:
    endpoint: str
    concurrency: tuple[int, ...]
    requests: int  # per level
    p95_ms: float
    latency_metric: str = "e2e"
    max_error_rate: float = 0.0
    instance_type: str | None = None
    instance_count: int = 1
    region: str = "us-east-1"
    warmup: int = 1
    prompt_source: str = "built-in prompts"
    load: LoadSettings = field(default_factory=LoadSettings)

    def validate(self) -> None:
        if not self.concurrency or any(c < 1 for c in self.concurrency):
            raise ValueError("--concurrency: a comma-separated list of integers >= 1, e.g. 1,2,4,8")
        if self.requests < 1:
            raise ValueError("--requests must be >= 1")
        if self.p95_ms <= 0:
            raise ValueError("--p95-ms must be > 0")
        if self.instance_count < 1:
            raise ValueError("--instance-count must be >= 1")
        if self.latency_metric == "ttft" and not self.load.stream:
            raise ValueError("--latency-metric ttft needs a streamed response; drop --no-stream")


def run_bench(
    client: ChatClient,
    prompts: Sequence[list[dict[str, Any]]],
    plan: BenchPlan,
    price: Price,
    *,
    on_result: Callable[[ChatResult], None] | None = None,
    on_level: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    plan.validate()
    server = client.server_info()  # which engine is measured, asked before any load
    started_at = dt.datetime.now(dt.UTC)
    t0 = time.perf_counter()
    warm = (
        run_level(client, prompts, concurrency=1, requests=plan.warmup, settings=plan.load, on_result=on_result)
        if plan.warmup
        else []
    )
    levels: list[LevelStats] = []
    for c in sorted(set(plan.concurrency)):
        if on_level is not None:
            on_level(c)
        # Every level starts at a different prompt so a prompt cache cannot favour later levels.
        results = run_level(
            client,
            prompts,
            concurrency=c,
            requests=plan.requests,
            settings=plan.load,
            on_result=on_result,
            prompt_offset=len(levels) * plan.requests + plan.warmup,
        )
        levels.append(summarize(c, results))
    return build_report(
        plan,
        price,
        levels,
        warmup=warm,
        started_at=started_at,
        duration_s=time.perf_counter() - t0,
        client_description=client.description,
        client_kind=client.kind,
        server=server,
    )


def build_report(
    plan: BenchPlan,
    price: Price,
    levels: list[LevelStats],
    *,
    warmup: Sequence[ChatResult] = (),
    started_at: dt.datetime | None = None,
    duration_s: float = 0.0,
    client_description: str = "",
    client_kind: str = "",
    server: ServerInfo | None = None,
) -> dict[str, Any]:
    chosen = pick_concurrency(levels, plan.p95_ms, metric=plan.latency_metric, max_error_rate=plan.max_error_rate)
    rows = []
    for lv in levels:
        row = lv.to_dict()
        row["meets_p95"] = meets_target(lv, plan.p95_ms, metric=plan.latency_metric, max_error_rate=plan.max_error_rate)
        row["queries_per_hour"] = round(queries_per_hour(lv.qps), 1)
        cost = cost_per_1k_queries(price.usd_per_hour, lv.qps, instances=plan.instance_count)
        row["cost_per_1k_queries_usd"] = None if cost is None else round(cost, 9)
        rows.append(row)
    selected = None
    if chosen is not None:
        cost = cost_per_1k_queries(price.usd_per_hour, chosen.qps, instances=plan.instance_count)
        selected = {
            "concurrency": chosen.concurrency,
            "p95_ms": chosen.p95_ms(plan.latency_metric),
            "qps": chosen.qps,
            "queries_per_hour": round(queries_per_hour(chosen.qps), 1),
            "output_tok_s": chosen.output_tok_s,
            "cost_per_1k_queries_usd": None if cost is None else round(cost, 9),
        }
    settings = asdict(plan.load)
    return {
        "kind": REPORT_KIND,
        "version": REPORT_VERSION,
        "started_at": (started_at or dt.datetime.now(dt.UTC)).isoformat(timespec="seconds"),
        "duration_s": round(duration_s, 2),
        "endpoint": plan.endpoint,
        "endpoint_kind": client_kind,
        "endpoint_description": client_description,
        "server": (server or ServerInfo(None, source="", detail="not asked")).to_dict(),
        "instance_type": plan.instance_type,
        "instance_count": plan.instance_count,
        "region": plan.region,
        "price": price.to_dict(),
        "target": {"p95_ms": plan.p95_ms, "latency_metric": plan.latency_metric, "max_error_rate": plan.max_error_rate},
        "settings": {
            **settings,
            "requests_per_level": plan.requests,
            "concurrency": sorted(set(plan.concurrency)),
            "warmup": plan.warmup,
            "prompts": plan.prompt_source,
        },
        "levels": rows,
        "selected": selected,
        "verdict": verdict(plan, price, chosen, selected),
        "totals": {
            "requests": sum(lv.requests for lv in levels),
            "errors": sum(lv.errors for lv in levels),
            "rejected": sum(lv.rejected for lv in levels),
            "output_tokens": sum(lv.output_tokens for lv in levels),
            "warmup_requests": len(warmup),
            "warmup_output_tokens": sum(r.output_tokens or 0 for r in warmup if r.ok),
        },
    }


def verdict(plan: BenchPlan, price: Price, chosen: LevelStats | None, selected: dict[str, Any] | None) -> str:
    metric = "end-to-end" if plan.latency_metric == "e2e" else "time-to-first-token"
    if chosen is None or selected is None:
        return f"no concurrency level met p95 {metric} <= {plan.p95_ms:g} ms (error rate <= {plan.max_error_rate:.0%}); cost per 1,000 queries at that target is not defined"
    head = f"concurrency {chosen.concurrency}: p95 {metric} {selected['p95_ms']:.0f} ms <= {plan.p95_ms:g} ms at {chosen.qps:.3f} queries/s ({selected['queries_per_hour']:.0f}/h)"
    if selected["cost_per_1k_queries_usd"] is None:
        return f"{head}; cost per 1,000 queries unknown — {price.detail}"
    count = f" x{plan.instance_count}" if plan.instance_count > 1 else ""
    return f"{head}; ${selected['cost_per_1k_queries_usd']:.4f} per 1,000 queries at ${price.usd_per_hour:g}/h{count} ({price.source})"
