"""A PEFT LoRA adapter (a Hub repo with adapter_config.json + adapter_model.safetensors) converted to GGUF inside the
catalog copy, by the engine pin's own converter, then landed like any adapter entry (catalog_copy.copy_entry hands a
PEFT entry here: land_peft; catalog.CatalogEntry.peft) or as a member of a SageMaker base's `lora` bundle
(catalog_copy.CatalogCopy._plan_adapter; catalog.CatalogAdapter.peft). Both convert with convert_peft, the one
conversion, and header-check its GGUF against their base before they write it.

Per source (convert_peft): the two PEFT files at the commit the weights resolved to (the repo's Hub client, hub.py;
the weights verified against the pinned sha256, else the Hub's LFS sha256), the base's config.json from
adapter_config.json's `base_model_name_or_path` (a Hub repo; at its `revision`, else the default branch) — the
converter needs only that file of the base (`--base`: "only config is needed, actual model weights are not required",
convert_lora_to_gguf.py of the pin) — then `convert_lora_to_gguf.py <peft dir> --base <dir with config.json>
CONVERT_ARGS --outfile <gguf>` run by the converter's python, offline. An adapter entry's GGUF is header-checked
against the base GGUF exactly as a GGUF adapter (CatalogCopy._check_adapter: general.type adapter, adapter.type lora,
the base's architecture and tensor shapes) BEFORE it is written, and lands at the entry's gguf key
`farm/<name>/<idhash>/adapter_model.gguf` (idhash: the PEFT source's repo, file, revision, sha256) with PutObject
If-None-Match (never overwritten) and S3's own SHA-256 check (ConvertedPeft.put; a bundle member lands the same way at
`<bundle prefix>lora/<name>.gguf`). Its metadata: `sha256` (the GGUF's), `hf-source` (the weights at their commit),
SOURCE_SHA256_META (the weights' sha256: what a pinned source is compared with), `base-config` and CONVERTER_META. Any
failure is the entry's, with its marker.

The converter's environment (setup(), `python -m model_download.peft_convert setup DIR`, run by the catalog
buildspec's install phase only when the catalog has PEFT adapters: buildspec.catalog_build_spec): the pinned
llama-cpp-python sdist (containers/llama-server/engine-pin.env; tests/…/test_peft_convert.py keeps these constants
equal to it) — its vendor/llama.cpp convert_lora_to_gguf.py, conversion/ and gguf-py/ — and CONVERTER_REQUIREMENTS,
hash-locked and installed --no-deps into DIR/site. At run time PEFT_CONVERT_ENV names DIR; PEFT_CONVERT_PYTHON may
name another python that already has the requirements (the tests: the cached vLLM environment's)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import posixpath
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .catalog import PEFT_CONFIG, REPO, CatalogEntry
from .copy import existing_object, hf_source, put_if_absent
from .errors import ChecksumMismatchError, DownloadError
from .hub import DEFAULT_REVISION, FileInfo, FileRef, Hub

if TYPE_CHECKING:
    import threading

    from .catalog_copy import CatalogCopy, EntryReceipt

# The engine pin (containers/llama-server/engine-pin.env; a test keeps these equal to it: this package ships alone).
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
LLAMA_CPP_PYTHON_SDIST = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"
LLAMA_CPP_PYTHON_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
# The sdist's PyPI file URL, as containers/llama-server/Dockerfile ADDs it.
SDIST_URL = (
    "https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/"
    + LLAMA_CPP_PYTHON_SDIST
)
_VENDOR = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}/vendor/llama.cpp/"
# What of the pin's tree the converter imports: itself, the model classes it reuses (`from conversion import …`) and
# its own gguf-py (it puts gguf-py on sys.path unless NO_LOCAL_GGUF is set).
CONVERTER_FILES = ("convert_lora_to_gguf.py", "conversion/", "gguf-py/")
CONVERTER_SCRIPT = "convert_lora_to_gguf.py"
# The one set of converter flags (scripts/build_lora.sh converts the test adapter with them too): F16 adapter tensors,
# half of F32's size (the converter's default); llama.cpp applies them to a quantized base as they are.
CONVERT_ARGS = ("--outtype", "f16")
CONVERTER = f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION} {CONVERTER_SCRIPT} {' '.join(CONVERT_ARGS)}"
CONVERT_TIMEOUT_SECONDS = 1800
SOURCE_SHA256_META = "source-sha256"
CONVERTER_META = "converter"
BASE_CONFIG = "config.json"
_CHUNK = 8 * 1024 * 1024

# The converter's environment. ENV_DIR_ENV: the directory setup() filled (site/ and llama.cpp/); PYTHON_ENV: a python
# that already has CONVERTER_REQUIREMENTS (then site/ is not needed).
ENV_DIR_ENV = "PEFT_CONVERT_ENV"
PYTHON_ENV = "PEFT_CONVERT_PYTHON"
# The CPython the lock's wheels are built for (the catalog buildspec selects it: runtime-versions python, CodeBuild's
# Amazon Linux 2023 standard image; https://docs.aws.amazon.com/codebuild/latest/userguide/available-runtimes.html).
PYTHON_VERSION = "3.11"
# Where the lock's wheels come from: PyPI, and torch's CPU build, which PyPI does not carry (PyPI's Linux x86_64
# torch is the CUDA build; the pin's requirements/requirements-convert_legacy_llama.txt adds the same
# `--extra-index-url https://download.pytorch.org/whl/cpu`). Every file is pinned by its sha256 (--require-hashes).
INDEX_URL = "https://pypi.org/simple"
TORCH_CPU_INDEX_URL = "https://download.pytorch.org/whl/cpu"
# What convert_lora_to_gguf.py of the pin imports (torch, transformers' AutoConfig, safetensors, its gguf-py's numpy,
# pyyaml, tqdm, requests) and their whole dependency closure, resolved by pip for CPython 3.11 manylinux x86_64 at
# the torch of the vLLM test environment (scripts/build_vllm_env.sh: 2.13.0+cpu, what the tests convert with) and
# installed --no-deps --only-binary :all:. The pin's own requirements-convert_hf_to_gguf.txt names torch 2.11 and
# transformers 4.57 — the converter is the same script under both (the tests compare its output).
CONVERTER_REQUIREMENTS = """\
annotated-doc==0.0.7 --hash=sha256:6bc31bbbec6dfaaedc1676dbc11dbda96fe22a2b5c400e9ebad113fec44a9dc6
annotated-types==0.8.0 --hash=sha256:f072f4d804ea359e4eaf198b1af7a8b0943881a87f31bb764f8bf219bb9419e0
anyio==4.16.0 --hash=sha256:c66ae634e0b8228396b801741beb3294326d4b6102f7bba4041c0dfb58c29026
certifi==2026.10.19.post1 --hash=sha256:1324c476b4811eff41a8bc2122cd0bbd4d9c7234c725446d99ab1612b3a7fdd2
charset-normalizer==3.5.3 --hash=sha256:2a6f937e0b70133d1f826d0a253331b6fe1a4c874808cc12e16f2fb8177042f4
click==8.5.1 --hash=sha256:8bb5376d2006950386f8c6427613334a2acadc5f559cb80e638d00b4df957e37
filelock==4.3.1 --hash=sha256:79e43df8e9fe509cd83a3899a7c186c8077cbbe4d200a1ed3705c2f3bb6bc487
fsspec==2026.9.0 --hash=sha256:8dd6e646e99ea382bd85f97a45e6b526a442d79423a7dc673f1e2756d05fcb5f
h11==0.16.0 --hash=sha256:63cf8bbe7522de3bf65932fda1d9c2772064ffb3dae62d55932da54b31cb6c86
hf-xet==1.8.0 --hash=sha256:29dab7c904cd1914a0439c6e1306c12c7497c8bd32290fbe563ebf51ca4b6d6d
httpcore==1.0.9 --hash=sha256:2d400746a40668fc9dec9810239072b40b4484b640a8c38fd654a024c7a1bf55
httpx==0.28.1 --hash=sha256:d909fcccc110f8c7faf814ca82a9a4d816bc5a6dbfea25d6591d6985b8ba59ad
huggingface_hub==1.33.0 --hash=sha256:04e434b06e100eddbce9a6e817d72693a7884b10a79bd67ab48080d5c07eb899
idna==3.20 --hash=sha256:ab7ae7122974553370f0bdb919e1a960b2cd1bc1ef0276416d896db81c14582c
jinja2==3.1.6 --hash=sha256:85ece4451f492d0c13c5dd7c13a64681a86afae63a5f347908daf103ce6d2f67
markdown-it-py==4.3.0 --hash=sha256:7aa1511a46c39138de78d9eba92ce47e63124d8003fc98b3a351909e04239efa
markupsafe==3.0.4 --hash=sha256:6da83a088f8ef93b2d483a8232a4dbf4d69d3d8496b568a03c56becac43e1808
mdurl==0.1.2 --hash=sha256:84008a41e51615a49fc9966191ff91509e3c40b939176e643fd50a5c2196b8f8
mpmath==1.3.0 --hash=sha256:a0b2b9fe80bbcd81a6647ff13108738cfb482d481d826cc0e02f5b35e5c88d2c
networkx==3.6.1 --hash=sha256:d47fbf302e7d9cbbb9e2555a0d267983d2aa476bac30e90dfbe5669bd57f3762
numpy==2.3.5 --hash=sha256:8cba086a43d54ca804ce711b2a940b16e452807acebe7852ff327f1ecd49b0d4
packaging==26.4 --hash=sha256:81383611a09c1bc0b08b76e0fd5829d7c6824c65b27a6aee339da133f4233ea2
pydantic==2.14.4 --hash=sha256:653a2ad9f6d8858529c77c72717d0ea991d6c6837fe683246b2f4b2bbfc3fadc
pydantic_core==2.50.5 --hash=sha256:488319076ec92908b91fc6265ce761f1d78748f69f85518564fd16bf333e1b70
pygments==2.21.0 --hash=sha256:2363c69b61c4a97c838da3b130dcd6468f4848992b21a82f2a63ec34377137d9
pyyaml==6.0.4 --hash=sha256:622aa875fa6533f25fedcffe23079357d65a690d462200afed5d8e9d0e01ebee
regex==2026.11.19 --hash=sha256:86d3b2ea69b3c56df3e8ddbac6cd98eaf5a8c5b5e7e006897ebdf7a28d6818e6
requests==2.34.2 --hash=sha256:2a0d60c172f83ac6ab31e4554906c0f3b3588d37b5cb939b1c061f4907e278e0
rich==15.0.0 --hash=sha256:33bd4ef74232fb73fe9279a257718407f169c09b78a87ad3d296f548e27de0bb
safetensors==0.8.0 --hash=sha256:fd6f3f93c9a0a7cc2788ee63fb763353d4bd2e89b0751bc78fcf7dda00bea774
sentencepiece==0.2.2 --hash=sha256:1416b92f2f010333786fe6306ed2631121d5ea492219b0841e967b6765e64107
setuptools==84.2.1 --hash=sha256:ca140b45d5325a9478f880e351484f62fef15f336462e449ca0c03c873d589c2
shellingham==1.5.4 --hash=sha256:7ecfff8f2fd72616f7481040475a65b2bf8af90a56c89140852d1120324e8686
sympy==1.14.0 --hash=sha256:e091cc3e99d2141a0ba2847328f5479b05d94a6635cb96148ccb3f34671bd8f5
tokenizers==0.23.2 --hash=sha256:41c2f84d172449b4dadb9cdc508e3e364076613c35b16e76ecfe47a60d1e3305
torch==2.13.0+cpu --hash=sha256:6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b
tqdm==4.70.1 --hash=sha256:c293e525e6fef9c20e8728fd4612df02a0aa31bb5fe91ecd93e123b1b7bffa73
transformers==5.18.0 --hash=sha256:d79e5a515a572ee3deb33eb0d578be47d91e70c75d54cf21bf6eede6edef14a9
typer==0.29.2 --hash=sha256:f30731f8ca758368b836b3714872e58e395cef8fcaff918c853b1969ed5274e7
typing-inspection==0.4.5 --hash=sha256:bc210535442b39e1bf2805e0c7a17dfd6a4ace760c84c7f7d16245d23a6b1c39
typing_extensions==4.16.0 --hash=sha256:481caa481374e813c1b176ada14e97f1f67a4539ce9cfeb3f350d78d6370c2e8
urllib3==2.8.0 --hash=sha256:0cf3cae568d36aa9576b28dfb35f11328f1cb974ca7647d9475ebb86c75ac6e3
"""


def requirements_file(directory: Path) -> Path:
    path = directory / "peft-convert-requirements.txt"
    path.write_text(CONVERTER_REQUIREMENTS)
    return path


def extract_converter(sdist: Path, dest: Path) -> Path:
    """The pin's converter from `sdist` (sha256-checked against the pin) into `dest` (= the sdist's vendor/llama.cpp);
    the converter script's path."""
    digest = hashlib.sha256()
    with open(sdist, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            digest.update(block)
    if digest.hexdigest() != LLAMA_CPP_PYTHON_SHA256:
        raise ChecksumMismatchError(
            f"{sdist}: sha256 {digest.hexdigest()} is not the engine pin's {LLAMA_CPP_PYTHON_SHA256} "
            f"({LLAMA_CPP_PYTHON_SDIST})"
        )
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist, "r:gz") as tar:
        members = []
        for m in tar.getmembers():
            rel = m.name.removeprefix(_VENDOR)
            if m.name.startswith(_VENDOR) and any(
                rel == f or (f.endswith("/") and rel.startswith(f)) for f in CONVERTER_FILES
            ):
                m.name = rel
                members.append(m)
        tar.extractall(dest, members=members, filter="data")
    script = dest / CONVERTER_SCRIPT
    if not script.is_file():
        raise DownloadError(f"{sdist} holds no {_VENDOR}{CONVERTER_SCRIPT}")
    return script


def setup(dest: Path, *, sdist: Path | None = None, install: bool = True) -> None:
    """Fill `dest` for the copy job: the lock into dest/site (pip, hash-checked) and the pin's converter into
    dest/llama.cpp (from `sdist`, else downloaded from SDIST_URL; sha256-checked)."""
    dest.mkdir(parents=True, exist_ok=True)
    if install:
        if f"{sys.version_info[0]}.{sys.version_info[1]}" != PYTHON_VERSION:
            raise DownloadError(
                f"the PEFT converter's lock is for CPython {PYTHON_VERSION}, this is {sys.version.split()[0]}: run "
                f"setup with python{PYTHON_VERSION}"
            )
        command = [
            sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
            "--require-hashes", "--only-binary", ":all:", "--target", str(dest / "site"),
            "--index-url", INDEX_URL, "--extra-index-url", TORCH_CPU_INDEX_URL,
            "-r", str(requirements_file(dest)),
        ]  # fmt: skip
        subprocess.run(command, check=True)
    if sdist is None:
        sdist = dest / LLAMA_CPP_PYTHON_SDIST
        with urllib.request.urlopen(SDIST_URL, timeout=120) as r, open(sdist, "wb") as f:  # noqa: S310 - a fixed https URL
            for block in iter(lambda: r.read(_CHUNK), b""):
                f.write(block)
    extract_converter(sdist, dest / "llama.cpp")


@dataclass(frozen=True)
class Converter:
    """How to run the pin's convert_lora_to_gguf.py: the python, the script, and the site directory it imports from."""

    python: str
    script: Path
    site: Path | None = None

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Converter:
        env = os.environ if environ is None else environ
        where = env.get(ENV_DIR_ENV)
        if not where:
            raise DownloadError(
                f"this copy job has no PEFT converter ({ENV_DIR_ENV} unset): the catalog buildspec sets it up when the "
                "catalog has PEFT adapters (buildspec.catalog_build_spec) — redeploy, or run "
                f"`python -m model_download.peft_convert setup DIR` and set {ENV_DIR_ENV}=DIR"
            )
        root = Path(where)
        script = root / "llama.cpp" / CONVERTER_SCRIPT
        if not script.is_file():
            raise DownloadError(f"{ENV_DIR_ENV}={where} holds no llama.cpp/{CONVERTER_SCRIPT}: run setup into it")
        site = root / "site"
        return cls(env.get(PYTHON_ENV) or sys.executable, script, site if site.is_dir() else None)

    def convert(self, peft_dir: Path, base_dir: Path, out: Path, *, label: str) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("NO_LOCAL_GGUF", "PYTHONPATH", "PYTHONHOME")}
        if self.site is not None:
            env["PYTHONPATH"] = str(self.site)
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")  # --base is local: the converter needs no network
        command = [self.python, str(self.script), str(peft_dir), "--base", str(base_dir), *CONVERT_ARGS]
        try:
            done = subprocess.run(
                [*command, "--outfile", str(out)],
                env=env,
                capture_output=True,
                text=True,
                timeout=CONVERT_TIMEOUT_SECONDS,
            )
        except subprocess.TimeoutExpired:
            raise DownloadError(f"{label}: {CONVERTER_SCRIPT} ran past {CONVERT_TIMEOUT_SECONDS} s") from None
        if done.returncode != 0 or not out.is_file():
            lines = [line.strip() for line in (done.stderr or "").splitlines() if line.strip()]
            errors = [line for line in lines if line.startswith("ERROR") or "Error" in line.split(":")[0]]
            why = " / ".join((errors or lines)[-2:])[:600] or "no output"
            raise DownloadError(f"{label}: {CONVERTER_SCRIPT} ({CONVERTER}) failed (exit {done.returncode}): {why}")


class LocalFile:
    """A RangeSource over a file on disk (the converted GGUF, for the header check)."""

    def __init__(self, path: Path) -> None:
        self.path, self._size = path, path.stat().st_size

    @property
    def size(self) -> int:
        return self._size

    @property
    def label(self) -> str:
        return str(self.path)

    def read_range(
        self,
        start: int,
        end: int,
        *,
        stop: threading.Event | None = None,
        on_bytes: Callable[[int], None] | None = None,
    ) -> bytes:
        with open(self.path, "rb") as f:
            f.seek(start)
            return f.read(end - start + 1)


def _fetch(hub: Hub, info: FileInfo, dest: Path, stop: threading.Event) -> str:
    """The file's bytes into dest; their sha256."""
    digest = hashlib.sha256()
    source = hub.open(info)
    with open(dest, "wb") as f:
        for start in range(0, info.size, _CHUNK):
            data = source.read_range(start, min(start + _CHUNK, info.size) - 1, stop=stop)
            digest.update(data)
            f.write(data)
    return digest.hexdigest()


def _fetch_small(hub: Hub, ref: FileRef, dest: Path, stop: threading.Event) -> FileInfo:
    info = hub.info(ref)
    if info.size == 0:
        raise DownloadError(f"{info.ref}: the Hub reports an empty file")
    _fetch(hub, info, dest, stop)
    return info


def base_repo(adapter_config: dict[str, object], label: str) -> FileRef:
    """The base model's config.json on the Hub, from the PEFT adapter_config.json."""
    name = adapter_config.get("base_model_name_or_path")
    if not isinstance(name, str) or not REPO.match(name):
        raise DownloadError(
            f"{label}: {PEFT_CONFIG}'s base_model_name_or_path {name!r} is not a Hub repo (owner/name): the converter "
            f"needs the base model's {BASE_CONFIG} — publish the adapter with base_model_name_or_path set to its base's repo"
        )
    revision = adapter_config.get("revision")
    return FileRef(name, BASE_CONFIG, revision if isinstance(revision, str) and revision else DEFAULT_REVISION)


@dataclass(frozen=True)
class ConvertedPeft:
    """A PEFT adapter converted to a local GGUF (convert_peft): where it is, its sha256 and size, and what it was made
    from — the weights at their commit (`source`, verified to hash to `source_sha256`) and the base's config.json."""

    path: Path
    sha256: str
    size: int
    source: FileInfo
    source_sha256: str
    base_config: FileInfo

    def metadata(self) -> dict[str, str]:
        """The landed object's metadata: `sha256` (the GGUF's, what the copy reads back), `hf-source` (the weights at
        their commit), SOURCE_SHA256_META (what a pinned sha256 is compared with), `base-config` and CONVERTER_META."""
        src, base = self.source, self.base_config
        return {
            "sha256": self.sha256,
            "hf-source": hf_source(src.ref.repo, src.ref.file, str(src.commit)),
            SOURCE_SHA256_META: self.source_sha256,
            "base-config": hf_source(base.ref.repo, BASE_CONFIG, base.commit or base.ref.revision),
            CONVERTER_META: CONVERTER,
        }

    def put(self, s3, bucket: str, key: str) -> bool:  # noqa: ANN001
        """PutObject If-None-Match (never overwritten) with S3's own SHA-256 check; False when the key exists."""
        data = self.path.read_bytes()
        return put_if_absent(
            s3,
            bucket=bucket,
            key=key,
            Body=data,
            ContentType="application/octet-stream",
            # S3 refuses bytes that do not hash to it.
            ChecksumSHA256=base64.b64encode(bytes.fromhex(self.sha256)).decode(),
            Metadata=self.metadata(),
        )


def convert_peft(
    hub: Hub, info: FileInfo, expected_sha256: str, work: Path, *, label: str, stop: threading.Event
) -> ConvertedPeft:
    """THE conversion of a PEFT source (a catalog adapter entry's and a `lora` bundle member's alike): the weights
    `info` (resolved to a commit) into `work`, checked against `expected_sha256`, the adapter_config.json beside them
    at the same commit (a LORA adapter naming its base's Hub repo), the base's config.json, then the pin's converter
    (Converter.from_env) writes `work/<weights name>.gguf`. Nothing is written to S3; the caller header-checks the
    GGUF against its base (gguf_meta) before it lands it (ConvertedPeft.put)."""
    converter = Converter.from_env()
    if stop.is_set():
        raise DownloadError("not started: the job was told to stop (CodeBuild timeout or StopBuild)")
    peft_dir, base_dir = work / "peft", work / "base"
    peft_dir.mkdir(parents=True)
    base_dir.mkdir()
    weights = posixpath.basename(info.ref.file)
    got = _fetch(hub, info, peft_dir / weights, stop)
    if got != expected_sha256:
        raise ChecksumMismatchError(
            f"sha256 mismatch for {info.ref}: expected {expected_sha256}, the downloaded bytes hash to {got}; "
            "nothing was converted"
        )
    config_ref = FileRef(info.ref.repo, posixpath.join(posixpath.dirname(info.ref.file), PEFT_CONFIG), str(info.commit))
    _fetch_small(hub, config_ref, peft_dir / PEFT_CONFIG, stop)
    try:
        adapter_config = json.loads((peft_dir / PEFT_CONFIG).read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise DownloadError(f"{label}: {PEFT_CONFIG} is not JSON ({exc})") from None
    if not isinstance(adapter_config, dict) or adapter_config.get("peft_type") != "LORA":
        kind = adapter_config.get("peft_type") if isinstance(adapter_config, dict) else None
        raise DownloadError(f"{label}: {PEFT_CONFIG} has peft_type {kind!r}; only LORA adapters convert to GGUF")
    base_info = _fetch_small(hub, base_repo(adapter_config, label), base_dir / BASE_CONFIG, stop)
    out = work / (weights.removesuffix(".safetensors") + ".gguf")
    converter.convert(peft_dir, base_dir, out, label=label)
    digest = hashlib.sha256()
    with open(out, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            digest.update(block)
    return ConvertedPeft(out, digest.hexdigest(), out.stat().st_size, info, expected_sha256, base_info)


def land_peft(copy: CatalogCopy, entry: CatalogEntry, keys: dict[str, str], hub: Hub, info: FileInfo) -> EntryReceipt:
    """Convert the PEFT adapter `entry` (its weights resolved as `info`: convert_peft) and land it at its gguf key."""
    from .catalog_copy import EntryReceipt, _held, expected_sha256

    label = f"adapter {entry.name} ({entry.hf_repo}/{entry.file}@{info.commit})"
    if set(keys) != {"gguf"}:
        raise DownloadError(
            f"{label}: a PEFT adapter is converted into the gguf layout only, this catalog writes {sorted(keys)}"
        )
    expected = expected_sha256(info, entry.sha256)
    key = keys["gguf"]
    with tempfile.TemporaryDirectory(prefix="peft-") as tmp:
        converted = convert_peft(hub, info, expected, Path(tmp), label=label, stop=copy.stop)
        # Before anything is written: a wrong adapter never lands.
        copy._check_adapter(entry, lambda: LocalFile(converted.path))
        written = converted.put(copy.s3, copy.bucket, key)
    if not written:  # another run landed it meanwhile: kept if the copy wrote it from this source, never replaced
        head = existing_object(copy.s3, copy.bucket, key)
        if head is None:
            raise DownloadError(
                f"s3://{copy.bucket}/{key} was being written by another run at the same time; run again"
            )
        held = _held(head, entry, copy.bucket, key)
        return EntryReceipt(entry.name, held.commit or str(info.commit), held.sha256, held.size, keys)
    return EntryReceipt(entry.name, str(info.commit), converted.sha256, converted.size, keys, ("gguf",))


def main(argv: list[str] | None = None) -> int:
    """`python -m model_download.peft_convert setup DIR [--sdist PATH]`: the converter's environment into DIR."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m model_download.peft_convert")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("setup", help="install the pinned converter and its hash-locked requirements into DIR")
    s.add_argument("dir", type=Path)
    s.add_argument("--sdist", type=Path, help="the pinned llama-cpp-python sdist (default: downloaded from PyPI)")
    args = parser.parse_args(argv)
    setup(args.dir, sdist=args.sdist)
    print(f"model_download: peft_convert: {CONVERTER} ready in {args.dir}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
