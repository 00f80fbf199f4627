"""LoRA adapters over a base model (stdlib only: every image ships it, the library imports it).

One base llama-server loads its adapters at start and applies one per request (facts of the pinned llama.cpp, the
llama-cpp-python 0.3.36 sdist's vendor/llama.cpp):
- `--lora A.gguf,B.gguf` loads them in that order (common/arg.cpp:2955, parse_csv_row: a path cannot hold a comma);
  adapter i is the i-th path: GET /lora-adapters answers [{"id": i, "path": <as given>, "scale": ...}, ...]
  (tools/server/server-task.cpp:1660). `--lora-init-without-apply` skips applying them at load (common.cpp:1412).
- a request applies adapter i with `"lora": [{"id": i, "scale": s}]`; every adapter it does not list gets scale 0
  (tools/server/server-common.cpp:177 parse_lora_request, server-context.cpp:1675 construct_lora_list). Requests
  with different adapters are not batched together (server-context.cpp can_batch_with: are_lora_equal).
- a request WITHOUT `lora` runs with the adapters' load-time scales (server-context.cpp:1703 `slot.lora =
  params_base.lora_adapters`), and `--lora-init-without-apply` leaves those at 1.0 (it only skips the first apply;
  upstream llama.cpp#28674, open; fix proposed in #28707): a plain request to the base would run with EVERY adapter
  applied. So the gateway sends the base's own requests with BASE_LORA (every adapter at scale 0) — see base_lora.

- a slot's prompt KV (and the host-RAM prompt cache) is reused across requests that select DIFFERENT adapters
  whenever the prompt prefix matches, so an answer is silently computed partly under another adapter (upstream
  llama.cpp#26207, open; its workaround: `cache_prompt: false`). So every request to a base that has adapters — the
  base's own and its adapters' — is sent with cache_prompt false (isolated): each re-processes its whole prompt.

Ids are positions, so whoever sends `lora` must know the backend's order: the gateway never trusts its config's
order but looks the adapter's path up in the backend's own list (a dedicated llama-server's GET /lora-adapters, a
pool replica's supervisor /status), so a backend rolled out with another list answers 503, never a wrong adapter.

A SageMaker single-model endpoint gets a base and its adapters as one bundle (the catalog's `lora` layout,
lambda/model_download/catalog.py, which SageMaker downloads whole into /opt/ml/model): LLAMA_LORA_MANIFEST names its
manifest (read_manifest: the base GGUF and the adapters in id order, files relative to the manifest's folder); the
same process starts llama-server with those paths and maps `model` = an adapter's name to its id
(sagemaker_adapter.py), so the ids cannot disagree.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from .env import EngineConfigError
from .llama_flags import LORA, LORA_INIT_WITHOUT_APPLY

DEFAULT_SCALE = 1.0
MAX_SCALE = 4.0  # a scale in (0, MAX_SCALE]: 1.0 is the adapter as trained; past a few it only degrades the base
LORA_FIELD = "lora"  # the request body's key (server-schema.cpp field_json("lora"))
# Kubernetes' DNS label (RFC 1123): what a client sends as `model`, unique across every model and adapter name.
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclass(frozen=True)
class Adapter:
    """One LoRA adapter. name: what clients send as `model`. base: the base model's name. path: the adapter GGUF as
    the engine sees it (what its --lora / preset `lora` names and GET /lora-adapters echoes). scale: applied with."""

    name: str
    base: str
    path: str
    scale: float = DEFAULT_SCALE


def adapter_ids(adapters: Sequence[Adapter]) -> dict[str, int]:
    """name -> id: the adapter's position in `adapters` (one base's adapters, in the order its engine loads them)."""
    return {a.name: i for i, a in enumerate(adapters)}


CACHE_PROMPT_FIELD = "cache_prompt"  # the request body's switch (server-task.cpp params_from_json_cmpl "cache_prompt")


def isolated(body: Mapping[str, Any]) -> dict[str, Any]:
    """`body` with cache_prompt false: a request to a base that has adapters must not reuse prompt KV computed under
    another adapter (llama.cpp#26207, module docstring). Overrides a client's own cache_prompt."""
    return {**body, CACHE_PROMPT_FIELD: False}


def request_lora(adapter_id: int, scale: float) -> list[dict[str, Any]]:
    """The `lora` field that applies adapter `adapter_id` (and no other) to one request."""
    return [{"id": adapter_id, "scale": scale}]


def base_lora() -> list[dict[str, Any]]:
    """The `lora` field of a request to a base that has adapters: adapter 0 at scale 0, so construct_lora_list sets
    every adapter to 0 (a request without `lora` would run with all of them at 1.0: module docstring). An id the
    backend does not have is ignored (construct_lora_list looks up only the ids it has)."""
    return request_lora(0, 0.0)


def name_problem(name: str) -> str | None:
    if not _NAME.fullmatch(name):
        return f"{name!r} must be a DNS label (1-63 of a-z, 0-9, '-', starting and ending with a letter or digit)"
    return None


def scale_problem(scale: float) -> str | None:
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale <= MAX_SCALE:
        return f"must be a number in (0, {MAX_SCALE:g}], got {scale!r}"
    return None


def path_problem(path: str) -> str | None:
    """Why `path` cannot be one of --lora's comma-separated paths (parse_csv_row), or None."""
    if not path or path != path.strip():
        return f"must be a non-empty path without surrounding spaces, got {path!r}"
    if any(c in path for c in ",\n\r;#"):
        return f"must not contain ',' (--lora separates paths with it), ';', '#' or a line break, got {path!r}"
    return None


def join_paths(paths: Sequence[str]) -> str:
    """The value of --lora / a preset's `lora` key (each path checked: path_problem)."""
    for p in paths:
        problem = path_problem(p)
        if problem:
            raise ValueError(f"adapter path {problem}")
    return ",".join(paths)


def split_paths(value: str) -> tuple[str, ...]:
    """The paths of a --lora / `lora` value, as the engine splits them (blank items dropped)."""
    return tuple(p.strip() for p in value.split(",") if p.strip())


def lora_args(paths: Sequence[str]) -> list[str]:
    """A dedicated llama-server's flags for these adapters ([] for none)."""
    if not paths:
        return []
    return [*LORA.args(join_paths(paths)), *LORA_INIT_WITHOUT_APPLY.args()]


def lora_preset(paths: Sequence[str]) -> dict[str, str]:
    """A base's preset section keys for these adapters ({} for none)."""
    if not paths:
        return {}
    return {LORA.key: join_paths(paths), LORA_INIT_WITHOUT_APPLY.key: LORA_INIT_WITHOUT_APPLY.value()}


def engine_adapter_paths(doc: Any) -> tuple[str, ...] | None:
    """The adapters' paths in id order from a llama-server's GET /lora-adapters answer, or None when it is not one."""
    if not isinstance(doc, list):
        return None
    by_id: dict[int, str] = {}
    for entry in doc:
        if not isinstance(entry, Mapping):
            return None
        i, path = entry.get("id"), entry.get("path")
        if isinstance(i, bool) or not isinstance(i, int) or not isinstance(path, str):
            return None
        by_id[i] = path
    if sorted(by_id) != list(range(len(by_id))):
        return None
    return tuple(by_id[i] for i in range(len(by_id)))


def adapters_problem(adapters: Sequence[Adapter], models: Collection[str]) -> str | None:
    """Why these adapters cannot be served over `models` (every served model name), or None: each name a DNS label
    unique across models and adapters, its base one of `models`, its scale in range, its path usable and not given
    twice for the same base."""
    seen: set[str] = set(models)
    paths: set[tuple[str, str]] = set()
    for a in adapters:
        problem = name_problem(a.name)
        if problem:
            return f"adapter {problem}"
        if a.name in seen:
            return f"adapter {a.name!r}: the name is already a model's or another adapter's; names are unique"
        seen.add(a.name)
        if a.base not in models:
            return f"adapter {a.name!r}: its base {a.base!r} is not a served model"
        problem = scale_problem(a.scale)
        if problem:
            return f"adapter {a.name!r}: scale {problem}"
        problem = path_problem(a.path)
        if problem:
            return f"adapter {a.name!r}: path {problem}"
        if (a.base, a.path) in paths:
            return f"adapter {a.name!r}: path {a.path!r} is another adapter's of {a.base!r} too"
        paths.add((a.base, a.path))
    return None


# --- a bundle's manifest (SageMaker: the catalog's `lora` layout) ----------------------------------------------------

MANIFEST_ENV = "LLAMA_LORA_MANIFEST"  # the manifest's path (the construct sets /opt/ml/model/lora.json)
MANIFEST_FORMAT = 1  # the catalog's LORA_FORMAT (a test round-trips the catalog's writer through read_manifest)


class BundledAdapter(NamedTuple):
    """One adapter of a bundle, at its id (its position in the manifest): name (what clients send as `model`), path (the
    GGUF as llama-server loads it: the manifest's folder / its `file`), scale."""

    name: str
    path: str
    scale: float


@dataclass(frozen=True)
class LoraBundle:
    """A manifest read: model (the base GGUF's path), adapters in id order."""

    manifest: str
    model: str
    adapters: tuple[BundledAdapter, ...]

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(a.path for a in self.adapters)

    def ids(self) -> dict[str, int]:
        return {a.name: i for i, a in enumerate(self.adapters)}


def _member(root: Path, value: Any, where: str) -> Path:
    """A manifest's relative file name → its path under `root` (never outside it), which must be a file."""
    if not isinstance(value, str) or not value or value.startswith("/") or "\\" in value:
        raise EngineConfigError(f"{where} must be a file name relative to the manifest's folder, got {value!r}")
    parts = value.split("/")
    if ".." in parts or "" in parts or "." in parts or posixpath.normpath(value) != value:
        raise EngineConfigError(f"{where} must be a file name relative to the manifest's folder, got {value!r}")
    path = root / value
    if not path.is_file():
        raise EngineConfigError(f"{where} {value!r}: no such file {path} (the bundle is incomplete)")
    return path


def read_manifest(path: str | Path) -> LoraBundle:
    """A bundle's manifest: {"format": 1, "model": "<base GGUF>", "adapters": [{"name", "file", "scale"}, ...]} (the
    catalog's lora_manifest), every file relative to the manifest's folder and present. Each problem is one
    EngineConfigError naming LLAMA_LORA_MANIFEST, the field and what it got."""
    where = f"{MANIFEST_ENV} {path}"
    manifest = Path(path)
    try:
        doc = json.loads(manifest.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EngineConfigError(f"{where}: no such file (the model data has no adapter manifest)") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise EngineConfigError(f"{where}: not a JSON manifest ({e})") from None
    if not isinstance(doc, dict):
        raise EngineConfigError(f"{where}: must be a JSON object, got {type(doc).__name__}")
    if doc.get("format") != MANIFEST_FORMAT:
        raise EngineConfigError(f"{where}: format must be {MANIFEST_FORMAT}, got {doc.get('format')!r}")
    root = manifest.parent
    model = _member(root, doc.get("model"), f"{where}: model")
    items = doc.get("adapters")
    if not isinstance(items, list) or not items:
        raise EngineConfigError(f"{where}: adapters must be a non-empty list, got {items!r}"[:300])
    adapters: list[BundledAdapter] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        at = f"{where}: adapters[{i}]"
        if not isinstance(item, dict):
            raise EngineConfigError(f"{at} must be an object with name, file, scale")
        name = item.get("name")
        if not isinstance(name, str):
            raise EngineConfigError(f"{at}.name must be a string, got {name!r}")
        problem = name_problem(name)
        if problem:
            raise EngineConfigError(f"{at}.name {problem}")
        if name in seen:
            raise EngineConfigError(f"{at}.name {name!r} is another adapter's too: names are unique")
        seen.add(name)
        scale = item.get("scale", DEFAULT_SCALE)
        problem = scale_problem(scale)  # NaN and inf fail its range too
        if problem:
            raise EngineConfigError(f"{at}.scale {problem}")
        file = _member(root, item.get("file"), f"{at}.file")
        problem = path_problem(str(file))
        if problem:
            raise EngineConfigError(f"{at}.file: the path {problem}")
        adapters.append(BundledAdapter(name, str(file), float(scale)))
    return LoraBundle(str(manifest), str(model), tuple(adapters))


def manifest_from_env(env: Mapping[str, str]) -> LoraBundle | None:
    """The bundle LLAMA_LORA_MANIFEST names (read_manifest), or None when it is unset or blank."""
    path = env.get(MANIFEST_ENV, "").strip()
    return read_manifest(path) if path else None
