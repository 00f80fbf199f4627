"""Wire the service from its config: mode `router` (SLM pre-filter) or `gateway` (model farm entry point)."""

from __future__ import annotations

from .config import Config
from .server import Front


def build(cfg: Config) -> Front:
    if cfg.mode == "gateway":
        from .gateway import GatewayServer
        from .metrics import GatewayMetrics

        pools = {p.name: len(p.replicas) for p in cfg.gateway.pools}
        return GatewayServer(cfg, GatewayMetrics([m.name for m in cfg.gateway.models], pools))
    from .backends import make_llm, make_slm
    from .classifier import Classifier, Transport
    from .client import HttpClient
    from .metrics import Metrics
    from .router import Router
    from .server import RouterServer

    metrics = Metrics(cfg.labels)
    slm = make_slm(cfg)
    if cfg.slm_endpoint_name:
        from .aws import SageMakerBackend, SageMakerTransport

        assert isinstance(slm, SageMakerBackend)  # make_slm's choice for an slm_endpoint_name
        classify_client: Transport = SageMakerTransport(slm)  # the SLM backend's botocore client
        health = None  # a SageMaker endpoint has no /health for us: readiness follows the SLM's circuit
    else:
        classify_client = HttpClient(cfg.slm_url, connect_timeout=cfg.timeouts.connect_s)
        health = HttpClient(cfg.slm_url, connect_timeout=1.0, max_idle=2)
    classifier = Classifier(cfg, classify_client, on_retry=metrics.classify_retries.inc)
    router = Router(cfg, slm, make_llm(cfg), classifier, metrics)
    server = RouterServer(router, metrics, health, max_body_bytes=cfg.max_body_bytes, max_in_flight=cfg.max_in_flight)
    metrics.in_flight.set_function(lambda: server.in_flight)
    return server
