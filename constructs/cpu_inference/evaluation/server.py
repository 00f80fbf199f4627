"""Which engine served a benchmark: read from the endpoint's own `GET /v1/models`, so a report says what it measured
and `bench compare` can put a llama.cpp run beside a vLLM run of the same model.

Both engines answer the OpenAI list-models shape `{"object": "list", "data": [{"id", "owned_by", ...}]}`:
llama-server sets `owned_by` to "llamacpp" (llama.cpp tools/server/server-context.cpp, the /v1/models handler),
vLLM to "vllm" (vllm/entrypoints/serve/engine/protocol.py, `ModelCard.owned_by`). Anything else (a router in
front, another server) is recorded as it came, with no engine name guessed."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from cpu_inference.engines import LLAMA_CPP, VLLM

# owned_by as each engine reports it -> our engine name (cpu_inference.engines.ENGINES).
OWNED_BY_ENGINE = {"llamacpp": LLAMA_CPP, "vllm": VLLM}
UNKNOWN = "unknown"


@dataclass(frozen=True)
class ServerInfo:
    engine: str | None  # an ENGINES name, or None when the endpoint did not say
    owned_by: str | None = None
    model: str | None = None  # the served model id (llama-server: alias or file name; vLLM: served name)
    max_model_len: int | None = None  # vLLM reports it per model
    source: str = "GET /v1/models"
    detail: str = ""  # why the engine is unknown

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def label(self) -> str:
        return self.engine or (f"{UNKNOWN} (owned_by {self.owned_by})" if self.owned_by else UNKNOWN)


def from_models_body(body: bytes | str | dict[str, Any], *, source: str = "GET /v1/models") -> ServerInfo:
    """ServerInfo from a list-models response body (the first model: both engines serve one per process)."""
    try:
        data = json.loads(body) if isinstance(body, (bytes, str)) else body
        first = data["data"][0]
        owned_by = first.get("owned_by")
        model = first.get("id")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return ServerInfo(None, source=source, detail="no model list in the answer")
    owned = owned_by if isinstance(owned_by, str) else None
    engine = OWNED_BY_ENGINE.get(owned or "")
    max_len = first.get("max_model_len")
    return ServerInfo(
        engine,
        owned,
        model if isinstance(model, str) else None,
        max_len if isinstance(max_len, int) else None,
        source,
        "" if engine else f"owned_by {owned!r} names no engine this tool knows ({', '.join(sorted(OWNED_BY_ENGINE))})",
    )


def engine_label(report: dict[str, Any]) -> str:
    """The engine a bench report records (older reports have none: "unknown")."""
    server = report.get("server") or {}
    return server.get("engine") or (f"{UNKNOWN} (owned_by {server['owned_by']})" if server.get("owned_by") else UNKNOWN)


def model_label(report: dict[str, Any]) -> str:
    server = report.get("server") or {}
    return server.get("model") or (report.get("settings") or {}).get("model") or "?"
