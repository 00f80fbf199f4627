"""`python -m slm_router`: load the config, serve (mode router or gateway) until SIGTERM/SIGINT, drain, exit.

`python -m slm_router serve` is the same service as SageMaker starts it (`docker run IMAGE serve`): the port
defaults to 8080 (SageMaker's) unless ROUTER_PORT is set, and /ping + /invocations answer next to the usual routes.
`python -m slm_router --print-config` validates the config and prints it as JSON (exit 2 on an error).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import signal
import sys

from . import config
from .app import build
from .server import RouterServer

log = logging.getLogger("router")


async def serve(cfg: config.Config) -> None:
    server = build(cfg)
    port = await server.start(cfg.listen_host, cfg.listen_port)
    warm = None
    if isinstance(server, RouterServer):
        slm = f"SageMaker endpoint {cfg.slm_endpoint_name}" if cfg.slm_endpoint_name else cfg.slm_url
        log.info("router listening on %s:%d (slm %s, escalation %s)", cfg.listen_host, port, slm, cfg.escalation.kind)
        warm = asyncio.create_task(server.router.warm_up())
    else:
        pools = ", ".join(f"{p.name}: {len(p.models)} models on {len(p.replicas)} replicas" for p in cfg.gateway.pools)
        log.info(
            "gateway listening on %s:%d (models: %s%s)",
            cfg.listen_host,
            port,
            ", ".join(m.name for m in cfg.gateway.models),
            f"; pools: {pools}" if pools else "",
        )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("stopping: draining requests in progress")
    if warm is not None:
        warm.cancel()
    await server.close()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    env = dict(os.environ)
    if argv[:1] == ["serve"]:  # SageMaker's container contract: `serve`, port 8080
        argv = argv[1:]
        env.setdefault("ROUTER_PORT", "8080")
    try:
        cfg = config.load(env)
    except config.ConfigError as e:
        print(f"router: config error: {e}", file=sys.stderr)
        return 2
    if argv[:1] == ["--print-config"]:
        print(json.dumps(dataclasses.asdict(cfg), indent=2))
        return 0
    if argv:
        print(f"router: unknown arguments {argv} (only serve or --print-config)", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=cfg.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s", stream=sys.stderr
    )
    # botocore's DEBUG log holds whole request and response bodies (prompts, answers, the API key secret): the
    # router's own DEBUG lines are enough.
    logging.getLogger("botocore").setLevel(max(logging.INFO, logging.getLogger().level))
    asyncio.run(serve(cfg))
    return 0


if __name__ == "__main__":
    sys.exit(main())
