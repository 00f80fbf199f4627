"""The model catalog of a farm: the ONE typed definition of which Hub files a stack serves from its pools and
where each lands in the model bucket. The library computes the keys at synth from it (pool presets, SageMaker
TargetModel), the ModelCatalog construct ships it as an S3 asset, and the copy job reads it back.

Keys are named by an identity hash — known at synth, never overwritten:
- `gguf_key`: `farm/<name>/<idhash>/<basename(file)>` (the pools read it through Mountpoint for S3);
- `mme_key`: `farm/<name>/<idhash>-<sha(engine_args)[:8]>.tar.gz`, a gzip-compressed tar of `<basename(file)>`
  and `engine.json` (SageMaker's ModelDataUrl "must point to a single gzip compressed tar archive (.tar.gz
  suffix)", botocore sagemaker ContainerDefinition.ModelDataUrl); `mme_target_model` is that key relative to
  the endpoint's `farm/` prefix (InvokeEndpoint TargetModel: 1..1024 printable characters).
idhash = 16 hex of sha256 over the canonical JSON of (hf_repo, file, revision, sha256). A branch revision
(`main`) is resolved to a commit by the first copy and the key keeps those bytes for good (the object's
`hf-source` metadata records the commit); a new revision or sha256 is a new identity, so a new key.

A copy that fails leaves `failure_key`: `farm/<name>/<idhash>/copy-failed.json` (COPY_FAILED_NAME), JSON
{"model", "reason", "attempt", "at"} — one marker per entry whatever the layouts: beside the GGUF for `gguf`, and
for `mme` beside the tarball `farm/<name>/<idhash>-<flags>.tar.gz` under the same idhash (a TargetModel
`<name>/<idhash>-<flags>.tar.gz` names its marker `<name>/<idhash>/copy-failed.json`). It is overwritable (not an
identity key) and the model's object wins over it: a later attempt that lands makes the marker stale, not wrong.

Stdlib only (and .errors): the library imports it at synth, the CodeBuild job and the Lambda handlers at run time."""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import DownloadError
from .hub import DEFAULT_REVISION

FARM_PREFIX = "farm/"
# Where the copy's state machine writes its per-batch results (Step Functions ResultWriter): not a model name
# (NAME cannot start with "_"), so never a model's key.
RUNS_PREFIX = f"{FARM_PREFIX}_runs/"
COPY_FAILED_NAME = "copy-failed.json"  # the failure marker's file name (docs/INTERFACE §1; the pool chart passes it on)
LAYOUTS = ("gguf", "mme")
ENGINE_JSON = "engine.json"  # the MME tarball's member with the llama-server flags
FORMAT_VERSION = 1

# What a model copy accepts, for one model (ModelArtifactProps) and a catalog entry alike (the library imports these).
NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")  # a DNS label: also a key segment and a TargetModel part
REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
_FLAG = re.compile(r"^[a-z][a-z0-9-]{0,63}$")  # a llama-server flag name without its leading dashes
_ENTRY_FIELDS = (
    "name",
    "hf_repo",
    "file",
    "revision",
    "sha256",
    "token_secret_name",
    "engine_args",
    "layouts",
    "base",
)


class CatalogError(DownloadError, ValueError):
    """A catalog that cannot be copied as given; str() is one line naming the model and the field."""


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class CatalogEntry:
    """One pooled model: `hf_repo/file@revision` (optionally pinned by sha256), a Secrets Manager secret name
    holding a Hub token for gated repos, and the llama-server flags (`engine_args`, e.g. {"ctx-size": "2048",
    "parallel": "1", "threads": "2"}) that the MME tarball's engine.json carries. layouts: this entry's own layouts
    (None: the catalog's) — a farm's dedicated model on SageMaker is read as one GGUF (`gguf`) by its own endpoint
    while the pooled ones are `mme` tarballs. Left out of the JSON when None, so a catalog without it keeps its
    fingerprint. base: for a LoRA adapter, the name of the catalog's model it is served over (None: a model); the
    copy checks the adapter's GGUF header against that model's (gguf_meta.adapter_problem) and fails the entry on a
    mismatch. An adapter is copied like a model (same identity hash, keys and marker); absent from the JSON if None."""

    name: str
    hf_repo: str
    file: str
    revision: str = DEFAULT_REVISION
    sha256: str | None = None
    token_secret_name: str | None = None
    engine_args: Mapping[str, str] = field(default_factory=dict, hash=False)
    layouts: tuple[str, ...] | None = None
    base: str | None = None

    def validate(self) -> None:
        where = f"catalog entry {self.name!r}"
        if self.base is not None and (
            not isinstance(self.base, str) or not NAME.match(self.base) or self.base == self.name
        ):
            raise CatalogError(
                f"{where}: base must be the name of another entry of the catalog (its model), got {self.base!r}"
            )
        if self.base is not None and not self.file.endswith(".gguf"):
            raise CatalogError(f"{where}: an adapter (base {self.base!r}) is a .gguf file, got {self.file!r}")
        if self.layouts is not None and (
            not self.layouts or len(set(self.layouts)) != len(self.layouts) or not set(self.layouts) <= set(LAYOUTS)
        ):
            raise CatalogError(
                f"{where}: layouts must be a non-empty, duplicate-free subset of {LAYOUTS} (or None: the catalog's), "
                f"got {self.layouts!r}"
            )
        if not isinstance(self.name, str) or not NAME.match(self.name):
            raise CatalogError(f"{where}: name must be a DNS label (lowercase letters, digits, '-'; at most 63)")
        if not REPO.match(self.hf_repo or ""):
            raise CatalogError(f"{where}: hf_repo must be a Hugging Face repo as owner/name, got {self.hf_repo!r}")
        parts = (self.file or "").split("/")
        if not self.file or self.file.startswith("/") or ".." in parts or "" in parts or "*" in self.file:
            raise CatalogError(
                f"{where}: file must be a path inside the repo (no leading '/', '..' or '*'), got {self.file!r}"
            )
        if not REVISION.match(self.revision or "") or ".." in self.revision.split("/"):
            raise CatalogError(f"{where}: revision must be a branch, tag or commit, got {self.revision!r}")
        if self.sha256 is not None and not SHA256.match(self.sha256):
            raise CatalogError(f"{where}: sha256 must be 64 lowercase hex characters, got {self.sha256!r}")
        if self.token_secret_name is not None and not self.token_secret_name.strip():
            raise CatalogError(f"{where}: token_secret_name must not be empty (leave it out for public repos)")
        for flag, value in dict(self.engine_args).items():
            if not isinstance(flag, str) or not _FLAG.match(flag):
                raise CatalogError(
                    f"{where}: engine_args key {flag!r} must be a llama-server flag without '--' (e.g. 'ctx-size')"
                )
            if not isinstance(value, str):
                raise CatalogError(
                    f"{where}: engine_args[{flag!r}] must be a string, got {type(value).__name__} (write {str(value)!r})"
                )

    @property
    def basename(self) -> str:
        return posixpath.basename(self.file)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "hf_repo": self.hf_repo,
            "file": self.file,
            "revision": self.revision,
            "sha256": self.sha256,
            "token_secret_name": self.token_secret_name,
            "engine_args": dict(self.engine_args),
        }
        if self.layouts is not None:  # absent otherwise: catalogs written before keep their bytes and fingerprint
            out["layouts"] = list(self.layouts)
        if self.base is not None:  # the same: absent for a model
            out["base"] = self.base
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CatalogEntry:
        unknown = sorted(set(data) - set(_ENTRY_FIELDS))
        if unknown:
            raise CatalogError(
                f"catalog entry {data.get('name')!r}: unknown field(s) {', '.join(unknown)}; known: {', '.join(_ENTRY_FIELDS)}"
            )
        missing = [k for k in ("name", "hf_repo", "file") if not data.get(k)]
        if missing:
            raise CatalogError(f"catalog entry {data.get('name')!r}: missing {', '.join(missing)}")
        entry = cls(
            name=data["name"],
            hf_repo=data["hf_repo"],
            file=data["file"],
            revision=data.get("revision") or DEFAULT_REVISION,
            sha256=data.get("sha256") or None,
            token_secret_name=data.get("token_secret_name") or None,
            engine_args=dict(data.get("engine_args") or {}),
            layouts=tuple(data["layouts"]) if data.get("layouts") is not None else None,
            base=data.get("base"),
        )
        entry.validate()
        return entry


def identity_hash(entry: CatalogEntry) -> str:
    """16 hex of sha256 over the canonical JSON of what the bytes are: (hf_repo, file, revision, sha256)."""
    identity = {"hf_repo": entry.hf_repo, "file": entry.file, "revision": entry.revision, "sha256": entry.sha256}
    return _sha256_hex(_canonical(identity))[:16]


def engine_args_hash(entry: CatalogEntry) -> str:
    """8 hex of sha256 over the canonical JSON of engine_args: new flags make a new tarball, never a rewrite."""
    return _sha256_hex(_canonical(dict(entry.engine_args)))[:8]


def gguf_key(entry: CatalogEntry) -> str:
    return f"{FARM_PREFIX}{entry.name}/{identity_hash(entry)}/{entry.basename}"


def mme_key(entry: CatalogEntry) -> str:
    return f"{FARM_PREFIX}{entry.name}/{identity_hash(entry)}-{engine_args_hash(entry)}.tar.gz"


def mme_target_model(entry: CatalogEntry) -> str:
    """InvokeEndpoint's TargetModel: the tarball's key relative to the endpoint's ModelDataUrl `s3://<bucket>/farm/`."""
    return mme_key(entry).removeprefix(FARM_PREFIX)


KEY_OF = {"gguf": gguf_key, "mme": mme_key}


def engine_json(entry: CatalogEntry) -> bytes:
    """The MME tarball's engine.json: the entry's engine_args as one JSON object of llama-server flags (what the
    container's MME adapter reads beside the GGUF: containers/llama-server/mme_adapter.read_engine_json)."""
    return (_canonical(dict(entry.engine_args)) + "\n").encode()


def failure_key(entry: CatalogEntry) -> str:
    """`farm/<name>/<idhash>/copy-failed.json`: the one failure marker of an entry, for every layout."""
    return f"{FARM_PREFIX}{entry.name}/{identity_hash(entry)}/{COPY_FAILED_NAME}"


def items_json(catalog: Catalog) -> str:
    """The copy's work list: a JSON array of the entries' names, in catalog order — what the state machine's
    Distributed Map reads (ItemReader, a JSON array in S3) and batches; each batch's names reach the job as
    CATALOG_NAMES (buildspec.CATALOG_NAMES_ENV)."""
    return json.dumps([e.name for e in catalog.entries], separators=(",", ":"))


@dataclass(frozen=True)
class Catalog:
    """Every pooled model of a stack and the layouts to write (⊆ {"gguf", "mme"}: gguf for the EKS pools'
    Mountpoint volume, mme for a SageMaker multi-model endpoint)."""

    entries: tuple[CatalogEntry, ...]
    layouts: tuple[str, ...] = ("gguf",)

    def validate(self, *, whole: bool = True) -> None:
        """whole: the adapters' bases must be entries too (False for a batch's subset, whose bases may be elsewhere)."""
        if not self.entries:
            raise CatalogError("the catalog has no entries: give at least one pooled model")
        if not self.layouts or len(set(self.layouts)) != len(self.layouts) or not set(self.layouts) <= set(LAYOUTS):
            raise CatalogError(
                f"catalog layouts must be a non-empty, duplicate-free subset of {LAYOUTS}, got {self.layouts!r}"
            )
        seen: set[str] = set()
        for entry in self.entries:
            entry.validate()
            if entry.name in seen:
                raise CatalogError(f"catalog entry {entry.name!r} appears twice: model names must be unique")
            seen.add(entry.name)
        models = {e.name for e in self.entries if e.base is None}
        for entry in self.entries:
            if entry.base is not None and (entry.base in seen or whole) and entry.base not in models:
                raise CatalogError(
                    f"catalog entry {entry.name!r}: base {entry.base!r} is not a model of the catalog (an adapter's base "
                    "is a model entry without a base)"
                )

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": FORMAT_VERSION,
            "layouts": list(self.layouts),
            "entries": [e.to_dict() for e in self.entries],
        }

    def to_json(self) -> str:
        """Canonical JSON (sorted keys, no spaces): equal catalogs give equal bytes, so equal asset hashes. A batch's
        subset has one too (its adapters' bases may be in another batch): the whole catalog is validated where it is
        made (artifacts/model_catalog.py) and read (from_json)."""
        self.validate(whole=False)
        return _canonical(self.to_dict())

    @classmethod
    def from_json(cls, text: str | bytes) -> Catalog:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CatalogError(f"the catalog is not JSON: {exc}") from None
        if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
            raise CatalogError(
                f"the catalog must be a JSON object with version {FORMAT_VERSION}, got {str(data)[:80]!r}"
            )
        catalog = cls(
            entries=tuple(CatalogEntry.from_dict(e) for e in data.get("entries") or []),
            layouts=tuple(data.get("layouts") or ()),
        )
        catalog.validate()
        return catalog

    def fingerprint(self) -> str:
        """sha256 hex of the canonical JSON: what each copy batch checks the catalog it reads against."""
        return _sha256_hex(self.to_json())

    def entry(self, name: str) -> CatalogEntry:
        for e in self.entries:
            if e.name == name:
                return e
        raise KeyError(f"no model {name!r} in the catalog")

    def subset(self, names: list[str] | tuple[str, ...] | None) -> Catalog:
        """The entries named (in catalog order), all of them for None; an unknown name is refused in one line."""
        if names is None:
            return self
        wanted = set(names)
        unknown = sorted(wanted - {e.name for e in self.entries})
        if unknown:
            raise CatalogError(f"no model {', '.join(map(repr, unknown))} in the catalog {self.fingerprint()}")
        return Catalog(tuple(e for e in self.entries if e.name in wanted), self.layouts)

    def layouts_of(self, entry: CatalogEntry) -> tuple[str, ...]:
        """The layouts written for `entry`: its own, else the catalog's."""
        return entry.layouts if entry.layouts is not None else self.layouts

    def keys(self, entry: CatalogEntry) -> dict[str, str]:
        """layout → key for one entry: its own layouts, else this catalog's."""
        return {layout: KEY_OF[layout](entry) for layout in self.layouts_of(entry)}
