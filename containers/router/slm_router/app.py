"""Wire the service from its config: mode `router` (SLM pre-filter) or `gateway` (model farm entry point)."""

from __future__ import annotations

from .config import Config
from .server import Front


def build(cfg: Config) -> Front:
    if cfg.mode == "gateway":
        from .gateway import GatewayServer
        from .metrics import GatewayMetrics

        return GatewayServer(cfg, GatewayMetrics([m.name for m in cfg.gateway.models]))
    from .backends import make_llm, make_slm
    from .classifier import Classifier
    from .client import HttpClient
    from .metrics import Metrics
    from .router import Router
    from .server import RouterServer

    metrics = Metrics(cfg.labels)
    classify_client = HttpClient(cfg.slm_url, connect_timeout=cfg.timeouts.connect_s)
    classifier = Classifier(cfg, classify_client, on_retry=metrics.classify_retries.inc)
    router = Router(cfg, make_slm(cfg), make_llm(cfg), classifier, metrics)
    health = HttpClient(cfg.slm_url, connect_timeout=1.0, max_idle=2)
    server = RouterServer(router, metrics, health, max_body_bytes=cfg.max_body_bytes, max_in_flight=cfg.max_in_flight)
    metrics.in_flight.set_function(lambda: server.in_flight)
    return server
