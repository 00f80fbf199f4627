"""`python -m slm_router`: load the config, serve (mode router or gateway) until SIGTERM/SIGINT, drain, exit.

`python -m slm_router --print-config` validates the config and prints it as JSON (exit 2 on an error).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
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
        log.info("router listening on %s:%d (slm %s, escalation %s)", cfg.listen_host, port, cfg.slm_url, cfg.escalation.kind)
        warm = asyncio.create_task(server.router.warm_up())
    else:
        log.info("gateway listening on %s:%d (models: %s)", cfg.listen_host, port, ", ".join(m.name for m in cfg.gateway.models))
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
    try:
        cfg = config.load()
    except config.ConfigError as e:
        print(f"router: config error: {e}", file=sys.stderr)
        return 2
    if argv[:1] == ["--print-config"]:
        print(json.dumps(dataclasses.asdict(cfg), indent=2))
        return 0
    if argv:
        print(f"router: unknown arguments {argv} (only --print-config)", file=sys.stderr)
        return 2
    logging.basicConfig(level=cfg.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s", stream=sys.stderr)
    asyncio.run(serve(cfg))
    return 0


if __name__ == "__main__":
    sys.exit(main())
