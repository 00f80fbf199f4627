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

The `lora` layout (issue 26: a SageMaker single-model endpoint serving a base and its LoRA adapters) is an entry's own
layout, for an entry WITH `adapters` (CatalogAdapter), and the only one it has: a bundle under
`lora_prefix(entry)` = `farm/<name>/<idhash>-lora-<8 hex of sha256 over the canonical JSON of the adapters>/` — the
base GGUF `<basename(file)>`, each adapter `lora/<adapter name>.gguf` (a PEFT adapter converted to it), and `lora.json`
(LORA_MANIFEST, lora_manifest: {"format", "model", "adapters": [{"name", "file", "scale"}]} in the adapters' order =
their ids) written LAST: the manifest is the bundle's seal and its key is KEY_OF["lora"] (what the deploy's waiter
HEADs). Another adapter list, order or scale is another prefix, never a rewrite; the failure marker is the entry's
failure_key as for any layout.

Stdlib only (and .errors): the library imports it at synth, the CodeBuild job and the Lambda handlers at run time."""

from __future__ import annotations

import hashlib
import json
import math
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
LAYOUTS = ("gguf", "mme", "lora")
# The catalog-wide layouts; `lora` is an entry's own (only an entry with adapters has a bundle).
CATALOG_LAYOUTS = ("gguf", "mme")
LORA_MANIFEST = "lora.json"  # the bundle's seal, written last (the container reads it: LLAMA_LORA_MANIFEST)
LORA_DIR = "lora/"  # the adapters' folder inside a bundle: lora/<adapter name>.gguf
LORA_FORMAT = 1  # the manifest's "format"
ENGINE_JSON = "engine.json"  # the MME tarball's member with the llama-server flags
FORMAT_VERSION = 1
# A PEFT LoRA adapter's two files (peft src/peft/utils/constants.py CONFIG_NAME, SAFETENSORS_WEIGHTS_NAME; the pin's
# convert_lora_to_gguf.py reads exactly these). An adapter entry whose file is PEFT_WEIGHTS is converted to GGUF by the
# copy (peft_convert.py) and lands as its basename with .gguf for .safetensors (CatalogEntry.basename); a bundle's
# adapter (CatalogAdapter) whose file is PEFT_WEIGHTS is converted the same way and lands as its lora/<name>.gguf.
PEFT_CONFIG = "adapter_config.json"
PEFT_WEIGHTS = "adapter_model.safetensors"

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
    "adapters",
)
_ADAPTER_FIELDS = ("name", "hf_repo", "file", "revision", "sha256", "token_secret_name", "scale")


class CatalogError(DownloadError, ValueError):
    """A catalog that cannot be copied as given; str() is one line naming the model and the field."""


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _source_problem(
    hf_repo: str, file: str, revision: str, sha256: str | None, token_secret_name: str | None
) -> str | None:
    """What is wrong with a Hub file source (a model's or an adapter's), or None."""
    if not REPO.match(hf_repo or ""):
        return f"hf_repo must be a Hugging Face repo as owner/name, got {hf_repo!r}"
    parts = (file or "").split("/")
    if not file or file.startswith("/") or ".." in parts or "" in parts or "*" in file:
        return f"file must be a path inside the repo (no leading '/', '..' or '*'), got {file!r}"
    if not REVISION.match(revision or "") or ".." in revision.split("/"):
        return f"revision must be a branch, tag or commit, got {revision!r}"
    if sha256 is not None and not SHA256.match(sha256):
        return f"sha256 must be 64 lowercase hex characters, got {sha256!r}"
    if token_secret_name is not None and not token_secret_name.strip():
        return "token_secret_name must not be empty (leave it out for public repos)"
    return None


@dataclass(frozen=True)
class CatalogAdapter:
    """A LoRA adapter inside a base entry's `lora` bundle (a SageMaker single-model endpoint): the name clients send
    as `model`, the Hub file it is copied from (hf_repo/file@revision, optionally pinned by sha256, a token secret for
    gated repos) — a GGUF adapter, or a PEFT adapter's PEFT_WEIGHTS that the copy converts to GGUF (`peft`) — and the
    scale the container applies it with. Its position in the entry's adapters is its id."""

    name: str
    hf_repo: str
    file: str
    revision: str = DEFAULT_REVISION
    sha256: str | None = None
    token_secret_name: str | None = None
    scale: float = 1.0

    def validate(self, entry: str) -> None:
        where = f"catalog entry {entry!r}: adapter {self.name!r}"
        if not isinstance(self.name, str) or not NAME.match(self.name):
            raise CatalogError(f"{where}: name must be a DNS label (lowercase letters, digits, '-'; at most 63)")
        problem = _source_problem(self.hf_repo, self.file, self.revision, self.sha256, self.token_secret_name)
        if problem:
            raise CatalogError(f"{where}: {problem}")
        if not (self.file.endswith(".gguf") or self.peft):
            raise CatalogError(
                f"{where}: an adapter is a .gguf file or a PEFT adapter's {PEFT_WEIGHTS}, got {self.file!r}"
            )
        # Only "a positive number" here (the manifest carries it as JSON): the engine's range is owned by
        # inference_runtime.lora.MAX_SCALE, which the config checks (config/schema.py Adapter.scale).
        if (
            isinstance(self.scale, bool)
            or not isinstance(self.scale, (int, float))
            or not math.isfinite(self.scale)
            or self.scale <= 0
        ):
            raise CatalogError(f"{where}: scale must be a positive number, got {self.scale!r}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "hf_repo": self.hf_repo,
            "file": self.file,
            "revision": self.revision,
            "sha256": self.sha256,
            "token_secret_name": self.token_secret_name,
            "scale": float(self.scale),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], entry: str) -> CatalogAdapter:
        if not isinstance(data, Mapping):
            raise CatalogError(f"catalog entry {entry!r}: each adapter must be a JSON object, got {str(data)[:80]!r}")
        unknown = sorted(set(data) - set(_ADAPTER_FIELDS))
        if unknown:
            raise CatalogError(
                f"catalog entry {entry!r}: adapter {data.get('name')!r}: unknown field(s) {', '.join(unknown)}; "
                f"known: {', '.join(_ADAPTER_FIELDS)}"
            )
        missing = [k for k in ("name", "hf_repo", "file") if not data.get(k)]
        if missing:
            raise CatalogError(f"catalog entry {entry!r}: adapter {data.get('name')!r}: missing {', '.join(missing)}")
        return cls(
            name=data["name"],
            hf_repo=data["hf_repo"],
            file=data["file"],
            revision=data.get("revision") or DEFAULT_REVISION,
            sha256=data.get("sha256") or None,
            token_secret_name=data.get("token_secret_name") or None,
            scale=data.get("scale", 1.0),
        )

    @property
    def peft(self) -> bool:
        """A PEFT adapter (file: its PEFT_WEIGHTS): the copy converts it to GGUF (peft_convert.convert_peft) and lands
        the GGUF as `member`; the bundle's identity (adapters_hash) stays the source's."""
        return posixpath.basename(self.file) == PEFT_WEIGHTS

    @property
    def member(self) -> str:
        """Its file inside the bundle, relative to the prefix (and to the manifest): `lora/<name>.gguf`."""
        return f"{LORA_DIR}{self.name}.gguf"

    def as_entry(self, base: str) -> CatalogEntry:
        """The same source as an adapter entry over `base` (what the copy's checks and landed-key reads take)."""
        return CatalogEntry(
            name=self.name,
            hf_repo=self.hf_repo,
            file=self.file,
            revision=self.revision,
            sha256=self.sha256,
            token_secret_name=self.token_secret_name,
            base=base,
        )


@dataclass(frozen=True)
class CatalogEntry:
    """One pooled model: `hf_repo/file@revision` (optionally pinned by sha256), a Secrets Manager secret name
    holding a Hub token for gated repos, and the llama-server flags (`engine_args`, e.g. {"ctx-size": "2048",
    "parallel": "1", "threads": "2"}) that the MME tarball's engine.json carries. layouts: this entry's own layouts
    (None: the catalog's) — a farm's dedicated model on SageMaker is read as one GGUF (`gguf`) by its own endpoint
    while the pooled ones are `mme` tarballs. Left out of the JSON when None, so a catalog without it keeps its
    fingerprint. base: for a LoRA adapter, the name of the catalog's model it is served over (None: a model); the
    copy checks the adapter's GGUF header against that model's (gguf_meta.adapter_problem) and fails the entry on a
    mismatch. An adapter is copied like a model (same identity hash, keys and marker); absent from the JSON if None.
    adapters: a base served WITH its LoRA adapters from one bundle (the `lora` layout, the entry's only one:
    layouts=("lora",)); each adapter is header-checked against this base as an adapter entry is. Absent from the JSON
    when None, so catalogs without it keep their bytes and fingerprint."""

    name: str
    hf_repo: str
    file: str
    revision: str = DEFAULT_REVISION
    sha256: str | None = None
    token_secret_name: str | None = None
    engine_args: Mapping[str, str] = field(default_factory=dict, hash=False)
    layouts: tuple[str, ...] | None = None
    base: str | None = None
    adapters: tuple[CatalogAdapter, ...] | None = None

    def _validate_adapters(self, where: str) -> None:
        """The `lora` layout ⇔ adapters: an entry with adapters has exactly layouts ("lora",) and no base."""
        bundle = self.layouts is not None and "lora" in self.layouts
        if self.adapters is None:
            if bundle:
                raise CatalogError(f"{where}: the 'lora' layout is a bundle of a base and its adapters: give adapters")
            return
        if not isinstance(self.adapters, tuple) or not self.adapters:
            raise CatalogError(
                f"{where}: adapters must be a non-empty tuple of CatalogAdapter (leave it out for none), "
                f"got {self.adapters!r}"
            )
        if self.base is not None:
            raise CatalogError(f"{where}: an adapter (base {self.base!r}) cannot have adapters of its own")
        if self.layouts != ("lora",):
            raise CatalogError(
                f"{where}: an entry with adapters is copied as one 'lora' bundle: its layouts must be ('lora',), "
                f"got {self.layouts!r}"
            )
        seen = {self.name}
        for adapter in self.adapters:
            if not isinstance(adapter, CatalogAdapter):
                raise CatalogError(f"{where}: adapters must be CatalogAdapter, got {type(adapter).__name__}")
            adapter.validate(self.name)
            if adapter.name in seen:
                raise CatalogError(
                    f"{where}: adapter name {adapter.name!r} appears twice (or is the base's name): names are what "
                    "clients send as `model`, so they must be unique"
                )
            seen.add(adapter.name)

    def validate(self) -> None:
        where = f"catalog entry {self.name!r}"
        if self.base is not None and (
            not isinstance(self.base, str) or not NAME.match(self.base) or self.base == self.name
        ):
            raise CatalogError(
                f"{where}: base must be the name of another entry of the catalog (its model), got {self.base!r}"
            )
        if self.base is not None and not (self.file.endswith(".gguf") or self.peft):
            raise CatalogError(
                f"{where}: an adapter (base {self.base!r}) is a .gguf file or a PEFT adapter's {PEFT_WEIGHTS}, "
                f"got {self.file!r}"
            )
        if self.layouts is not None and (
            not self.layouts or len(set(self.layouts)) != len(self.layouts) or not set(self.layouts) <= set(LAYOUTS)
        ):
            raise CatalogError(
                f"{where}: layouts must be a non-empty, duplicate-free subset of {LAYOUTS} (or None: the catalog's), "
                f"got {self.layouts!r}"
            )
        if not isinstance(self.name, str) or not NAME.match(self.name):
            raise CatalogError(f"{where}: name must be a DNS label (lowercase letters, digits, '-'; at most 63)")
        problem = _source_problem(self.hf_repo, self.file, self.revision, self.sha256, self.token_secret_name)
        if problem:
            raise CatalogError(f"{where}: {problem}")
        self._validate_adapters(where)
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
    def peft(self) -> bool:
        """A PEFT adapter (file: its PEFT_WEIGHTS), converted to GGUF by the copy: the identity stays the source's."""
        return self.base is not None and posixpath.basename(self.file) == PEFT_WEIGHTS

    @property
    def basename(self) -> str:
        """The landed file's name: the file's own, a PEFT adapter's as .gguf (`adapter_model.gguf`)."""
        name = posixpath.basename(self.file)
        return name.removesuffix(".safetensors") + ".gguf" if self.peft else name

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
        if self.adapters is not None:  # the same: absent for an entry without a bundle
            out["adapters"] = [a.to_dict() for a in self.adapters]
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
            adapters=_adapters_from(data.get("adapters"), data["name"]),
        )
        entry.validate()
        return entry


def _adapters_from(data: Any, entry: str) -> tuple[CatalogAdapter, ...] | None:
    if data is None:
        return None
    if not isinstance(data, list):
        raise CatalogError(f"catalog entry {entry!r}: adapters must be a JSON array, got {str(data)[:80]!r}")
    return tuple(CatalogAdapter.from_dict(a, entry) for a in data)


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


def adapters_hash(entry: CatalogEntry) -> str:
    """8 hex of sha256 over the canonical JSON of the adapters, in order: what each adapter's bytes are (as
    identity_hash: repo, file, revision, sha256 — not the token secret) and its name and scale. Another list, order
    (= ids) or scale is another bundle, never a rewrite."""
    if not entry.adapters:
        raise CatalogError(f"catalog entry {entry.name!r} has no adapters, so no 'lora' bundle")
    identity = [
        {
            "name": a.name,
            "hf_repo": a.hf_repo,
            "file": a.file,
            "revision": a.revision,
            "sha256": a.sha256,
            "scale": float(a.scale),
        }
        for a in entry.adapters
    ]
    return _sha256_hex(_canonical(identity))[:8]


def lora_prefix(entry: CatalogEntry) -> str:
    """`farm/<name>/<idhash>-lora-<adapters_hash>/`: the bundle's key prefix. It ends with '/': a SageMaker
    ModelDataSource S3Prefix "always ends with a forward slash" and takes every object matching it (botocore sagemaker
    S3ModelDataSource.S3DataType), so neither the entry's failure marker nor another bundle falls under it."""
    return f"{FARM_PREFIX}{entry.name}/{identity_hash(entry)}-lora-{adapters_hash(entry)}/"


def lora_manifest_key(entry: CatalogEntry) -> str:
    """The bundle's seal, written last: `<lora_prefix>lora.json` (KEY_OF["lora"])."""
    return lora_prefix(entry) + LORA_MANIFEST


def lora_member_keys(entry: CatalogEntry) -> dict[str, str]:
    """Every member of the bundle but the manifest, in write order: the base ("" → `<prefix><basename>`), then each
    adapter by name (`<prefix>lora/<name>.gguf`)."""
    prefix = lora_prefix(entry)
    return {"": prefix + entry.basename, **{a.name: prefix + a.member for a in entry.adapters or ()}}


def lora_manifest(entry: CatalogEntry) -> bytes:
    """lora.json: {"format": 1, "model": <the base GGUF's file name>, "adapters": [{"name", "file", "scale"}, ...]},
    the adapters in the entry's order (their ids); `file`s are relative to the manifest's directory. What the
    container reads (containers/inference_runtime/lora.py) to start llama-server with --lora in that order."""
    if not entry.adapters:
        raise CatalogError(f"catalog entry {entry.name!r} has no adapters, so no lora.json")
    manifest = {
        "format": LORA_FORMAT,
        "model": entry.basename,
        "adapters": [{"name": a.name, "file": a.member, "scale": float(a.scale)} for a in entry.adapters],
    }
    return (_canonical(manifest) + "\n").encode()


KEY_OF = {"gguf": gguf_key, "mme": mme_key, "lora": lora_manifest_key}


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
        if (
            not self.layouts
            or len(set(self.layouts)) != len(self.layouts)
            or not set(self.layouts) <= set(CATALOG_LAYOUTS)
        ):
            raise CatalogError(
                f"catalog layouts must be a non-empty, duplicate-free subset of {CATALOG_LAYOUTS} ('lora' is the own "
                f"layout of an entry with adapters), got {self.layouts!r}"
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

    def token_secrets(self) -> dict[str, str]:
        """Every Hub token secret the copy reads → where it is named (an entry's, or a bundled adapter's: the copy
        opens each adapter's Hub with its own secret), in name order."""
        named: dict[str, str] = {}
        for e in self.entries:
            if e.token_secret_name:
                named.setdefault(e.token_secret_name, e.name)
            for a in e.adapters or ():
                if a.token_secret_name:
                    named.setdefault(a.token_secret_name, f"{e.name}.adapters[{a.name}]")
        return dict(sorted(named.items()))

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
