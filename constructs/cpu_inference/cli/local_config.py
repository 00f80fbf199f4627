"""The router/gateway config `cpu-inference local` runs: the deployment's, built through the same typed model
(slm_router.config, the one definition the router parses) and the same decision builder, with the upstreams on
loopback."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING

from cpu_inference.cli.local_plan import Engine
from slm_router.config import Config as RouterConfig
from slm_router.config import Escalation, Gateway, GatewayAdapter, GatewayModel, GatewayPool, Timeouts

if TYPE_CHECKING:
    from cpu_inference.cli.local_pools import LocalPool


def router_config(config, slm: Engine, llm: Engine, host: str, port: int) -> RouterConfig:
    """The router config the deployment renders (the same decision keys, through the same builder), with the
    upstreams on loopback: the local SLM, and the local LLM in place of the escalation target."""
    from cpu_inference.config.rules import router_decision_config
    from cpu_inference.sizing.slm_context import prefilter_router_config

    esc = config.escalation
    escalation = Escalation.of(
        kind="openai", url=f"{llm.url}/v1", **({"model_id": esc.model} if esc.kind == "model" else {})
    )
    cfg = prefilter_router_config(
        router_decision_config(config),
        slm_url=slm.url,
        escalation=escalation,
        slm_model=slm.name if slm.vllm_dir is not None else "",
    )
    # What the chart owns (k8s/charts/router_chart.py router_config), then this machine's address. A laptop's CPU is
    # shared by every engine: generous timeouts rather than spurious fallbacks.
    return cfg.updated(
        mode="router",
        listen_host=host,
        listen_port=port,
        timeouts=Timeouts.of(classify_s=30, first_byte_s=300, total_s=900),
    )


def gateway_config(
    config, engines: list[Engine], host: str, port: int, pools: Sequence[LocalPool] = ()
) -> RouterConfig:
    """The gateway: dedicated models at their engines, pooled models in `gateway.pools` as the deployment's
    k8s/router_chart.gateway_pool builds them (GatewayPool.of(name, replication, models, replicas); not imported:
    k8s/ starts the jsii runtime) with this machine's one replica per pool, replication 1."""
    started = {e.name: e.url for e in engines}
    by_name = {e.name: e for e in engines}
    pooled = {e.name for p in pools for e in p.members}
    # Models not started point at a closed port: the gateway answers 503 + Retry-After, like a model at zero.
    closed = f"http://127.0.0.1:{closed_port()}"

    def dedicated(m) -> GatewayModel:
        e = by_name.get(m.name)
        if e is None or not e.adapters:
            return GatewayModel(name=m.name, url=started.get(m.name, closed))
        # Its adapters as its engine was started with them (--lora <links>, local_plan.link_adapters), in id order.
        adapters = tuple(
            GatewayAdapter(name=name, path=path, scale=scale)
            for (name, _, scale), path in zip(e.adapters, e.adapter_paths, strict=True)
        )
        return GatewayModel.of(name=m.name, url=e.url, adapters=adapters)

    models = tuple(dedicated(m) for m in config.models if m.name not in pooled)

    def pool_entry(p: LocalPool) -> GatewayPool:
        adapters = tuple(
            GatewayAdapter(name=name, path=p.adapter_path(name), scale=scale, base=e.name)
            for e in p.members
            for name, _, scale in e.adapters
        )
        return GatewayPool.of(
            name=p.name,
            replication=1,
            models=tuple(e.name for e in p.members),
            replicas=(p.url,),
            status_port=p.status_port,
            **({"adapters": adapters} if adapters else {}),
        )

    entries = tuple(pool_entry(p) for p in pools)
    # A cold model loads on the request that needs it: as long a head timeout as the engines' first byte here.
    gateway = Gateway.of(
        models=models, retry_after_s=5, **({"pools": entries, "cold_load_timeout_s": 300} if entries else {})
    )
    return RouterConfig.of(
        mode="gateway",
        gateway=gateway,
        listen_host=host,
        listen_port=port,
        timeouts=Timeouts.of(first_byte_s=300, total_s=900),
    )


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released): an engine's port, or a model not started."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
