"""Each deployed path of the task matrix, started on loopback from exactly what the app synthesized for a config:

- EKS: every dedicated model's Deployment (its engine container's command and env), the pool StatefulSet's container
  over the pool ConfigMap's preset.ini, and the gateway Deployment over its ConfigMap's config.json;
- SageMaker: every single-model endpoint's Model environment (`entrypoint.py serve`), the multi-model endpoint's Model
  environment with SAGEMAKER_MULTI_MODEL=true, its artifacts built from the catalog the stack ships (the S3 asset the
  copy job reads: engine.json is the copy job's own `engine_json(entry)`, the TargetModel its `mme_target_model`),
  each endpoint behind tests/evaluation/sagemaker_emulator.py so boto3 calls it by name.

Only what differs on a test machine is swapped, and nothing else: the image paths (entrypoint, engine binary) for the
repository's files and the built engine; cluster DNS names for loopback ports; /models, /opt/ml/model and
/opt/ml/models for local directories holding the stand-in files; the thread counts for 1 (2 shared cores); the user
(the tests' own instead of 65532). Every swap is listed in SWAPPED_ENV / the code below.

LoRA adapters (issue 26) sit where each stack puts them, as links to the stand-in adapter (`adapter_files`; by
default tests/support/lora.py's, trained on the generator stand-in): a dedicated pod's LLAMA_LORA paths
(/models/lora/<name>.gguf), a pool preset section's `lora` paths (the catalog's adapter keys under /models), a
single-model endpoint's `lora` bundle (the catalog entry's members under its lora_prefix plus lora.json from the
catalog's own writer: what SageMaker downloads from the S3Prefix into /opt/ml/model). The gateway config's adapter
paths name the same local files (it matches them against the engine's own list: GET /lora-adapters, the pool's
/status) — the /models swap again, nothing else."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aws_cdk as cdk

from cpu_inference.testing.crd_validation import flatten
from inference_runtime.lora import join_paths, split_paths
from tests.support.engine import free_port, stop_process, wait_healthy
from tests.support.k8s import objects

ROOT = Path(__file__).resolve().parents[2]
LLAMA_DIR = ROOT / "containers" / "llama-server"
ROUTER_DIR = ROOT / "containers" / "router"
LAMBDA_DIR = ROOT / "lambda"
IMAGE_LLAMA_DIR = "/opt/llama"
THREAD_VARS = ("LLAMA_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "INTRA_OP_NUM_THREADS")
# The container env names a test machine swaps (everything else is exactly the rendered value).
SWAPPED_ENV = (
    *THREAD_VARS,
    "MODEL_PATH",
    "LLAMA_SERVER_BIN",
    "LLAMA_HOST",
    "LLAMA_PORT",
    "LLAMA_MODELS_PRESET",
    "SERVE_HOST",
    "SERVE_PORT",
    "SAGEMAKER_BIND_TO_PORT",
    "ADAPTER_HOST",
    "LLAMA_RUN_AS",
    "SM_MODEL_DIR",
    "LLAMA_ENGINE_PORT",
    "LLAMA_LORA",
    "LLAMA_LORA_MANIFEST",
)
IMAGE_MODEL_DIR = "/models"  # the pod's model volume (a dedicated pod's emptyDir, a pool's Mountpoint volume)


def stand_in_adapter(name: str) -> Path:
    """The GGUF serving any config adapter: the SmolLM2 stand-in's real LoRA adapter (`make lora`)."""
    from tests.support.lora import lora_adapter_path

    return lora_adapter_path()


def _local_model_path(pod_path: str, local_dir: Path) -> Path:
    """A path under the pod's /models as the same path under `local_dir`."""
    assert pod_path.startswith(IMAGE_MODEL_DIR + "/"), pod_path
    return local_dir / pod_path[len(IMAGE_MODEL_DIR) + 1 :]


def _link(local: Path, target: Path) -> None:
    local.parent.mkdir(parents=True, exist_ok=True)
    if not local.exists():
        local.symlink_to(target)


@dataclass
class Synthesized:
    template: dict[str, Any]
    outdir: Path  # the cloud assembly (assets)
    config: Path  # the config it was synthesized from


def synthesize(config_text: str, workdir: Path) -> Synthesized:
    """The app's stack for this config, as `cdk synth` writes it (cdk-nag included)."""
    from cpu_inference.app import build_app
    from cpu_inference.config import load
    from tests.support.cdk import synth

    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "config.yaml"
    path.write_text(config_text)
    app = cdk.App(outdir=str(workdir / "cdk.out"))
    _, stack = build_app(load(path), app=app)
    assembly = synth(app)
    return Synthesized(assembly.get_stack_by_name(stack.stack_name).template, Path(assembly.directory), path)


_TAKEN: set[int] = set()


def _port() -> int:
    """A free loopback port not handed out before: processes started together have not bound theirs yet."""
    while (port := free_port()) in _TAKEN:
        pass
    _TAKEN.add(port)
    return port


def _base_env(**extra: str) -> dict[str, str]:
    keep = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(
            ("LLAMA_", "SAGEMAKER_", "ADAPTER_", "MODEL_", "SM_", "MME_", "SERVE_", "VLLM_", "ROUTER_", "AWS_")
        )
    }
    keep.update(LLAMA_ARG_REPACK="0")  # this machine's hypervisor faults on AMX tiles (tests/conftest.py)
    keep.update(extra)
    return keep


def _one_thread(env: dict[str, str]) -> dict[str, str]:
    return {**env, **{k: "1" for k in THREAD_VARS if k in env}}


@dataclass
class Started:
    """Processes of one path; `urls` maps a config model name to where the path serves it."""

    procs: list[subprocess.Popen] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)
    urls: dict[str, str] = field(default_factory=dict)

    def tail(self, n: int = 15) -> str:
        return "\n".join(
            f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-n:])
            for log in self.logs
            if log.exists()
        )

    def spawn(self, argv: list[str], env: Mapping[str, str], log: Path, **kw: Any) -> subprocess.Popen:
        with open(log, "wb") as out:
            proc = subprocess.Popen(argv, env=dict(env), stdout=out, stderr=subprocess.STDOUT, **kw)
        self.procs.append(proc)
        self.logs.append(log)
        return proc

    def stop(self) -> None:
        for proc in reversed(self.procs):
            stop_process(proc, timeout=40)


# --- EKS ------------------------------------------------------------------------------------------------------------


def _container(obj: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((c for c in obj["spec"]["template"]["spec"]["containers"] if c["name"] == name), None)


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def _local_entrypoint(command: list[str]) -> list[str]:
    assert command[:2] == ["python3", f"{IMAGE_LLAMA_DIR}/entrypoint.py"], command
    return [sys.executable, str(LLAMA_DIR / "entrypoint.py"), *command[2:]]


def eks_dedicated_llama(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """model name -> its Deployment's llama-server container."""
    out = {}
    for o in objs:
        if o["kind"] == "Deployment" and (c := _container(o, "llama-server")) is not None:
            out[o["metadata"]["name"]] = c
    return out


def eks_dedicated_vllm(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        o["metadata"]["name"]: c for o in objs if o["kind"] == "Deployment" and (c := _container(o, "vllm")) is not None
    }


def gateway_config(objs: list[dict[str, Any]]) -> dict[str, Any]:
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "gateway"]
    return json.loads(cm["data"]["config.json"])


@contextmanager
def eks_stack(
    syn: Synthesized,
    files: Callable[[str], Path],
    binary: Path,
    workdir: Path,
    vllm: Callable[[str, dict[str, str], Path], tuple[str, Callable[[], None]]] | None = None,
    adapter_files: Callable[[str], Path] = stand_in_adapter,
) -> Iterator[Started]:
    """The EKS path: dedicated engines, pool replicas and the gateway, from the rendered objects. `files(model)` is
    the stand-in file of a config model, `adapter_files(adapter)` of a config adapter; `vllm(name, rendered_env,
    log)` starts a vLLM container (returns its URL and a stopper) for vLLM Deployments."""
    from tests.runtime.router.harness import start_router, stop_router

    objs = objects(syn.template)
    started = Started()
    stoppers: list[Callable[[], None]] = []
    service_url: dict[str, str] = {}
    adapter_paths: dict[str, str] = {}  # an adapter's path in the pod -> the local link at the same place
    try:
        for name, c in eks_dedicated_llama(objs).items():
            port = _port()
            env = _base_env(**_one_thread(_env(c)))
            env.update(
                MODEL_PATH=str(files(name)), LLAMA_SERVER_BIN=str(binary), LLAMA_HOST="127.0.0.1", LLAMA_PORT=str(port)
            )
            if "LLAMA_LORA" in env:  # its adapters, fetched by the init container to /models/lora/<name>.gguf
                local = _adapter_links(env["LLAMA_LORA"], workdir / f"{name}-models", adapter_files)
                adapter_paths.update(local)
                env["LLAMA_LORA"] = join_paths(list(local.values()))
            started.spawn(_local_entrypoint(c["command"]), env, workdir / f"{name}.log")
            service_url[name] = f"http://127.0.0.1:{port}"
        for name, c in eks_dedicated_vllm(objs).items():
            assert vllm is not None, f"{name} is a vLLM Deployment: pass vllm= to start it"
            url, stop = vllm(name, _env(c), workdir / f"{name}.log")
            stoppers.append(stop)
            service_url[name] = url
        cfg = gateway_config(objs)
        for m in cfg["gateway"]["models"]:
            m["url"] = service_url[m["name"]]
        for pool in cfg["gateway"].get("pools", []):
            replicas = _pool_replicas(objs, pool, files, adapter_files, binary, workdir, started, adapter_paths)
            assert len(replicas) == len(pool["replicas"])
            pool["replicas"] = replicas
        for entry in (*cfg["gateway"]["models"], *cfg["gateway"].get("pools", [])):
            for adapter in entry.get("adapters", []):
                adapter["path"] = adapter_paths[adapter["path"]]
        for url in service_url.values():
            wait_healthy(url, None, timeout=420)
        cfg.update(listen_host="127.0.0.1", listen_port=_port())
        router = start_router(cfg, workdir / "gateway", timeout=60)
        started.logs.append(router.log)
        base = f"{router.url}/v1"
        started.urls = {m["name"]: base for m in cfg["gateway"]["models"]}
        started.urls.update({n: base for p in cfg["gateway"].get("pools", []) for n in p["models"]})
        try:
            yield started
        finally:
            stop_router(router)
    finally:
        started.stop()
        for stop in stoppers:
            stop()


def _adapter_links(value: str, local_dir: Path, adapter_files: Callable[[str], Path]) -> dict[str, str]:
    """A `lora` / LLAMA_LORA value's pod paths -> local links at the same places under `local_dir`, each to the
    stand-in of its adapter. The adapter's name is in its path: /models/lora/<name>.gguf (a dedicated pod,
    k8s/workloads/model_fetch.adapter_path) or /models/<name>/<idhash>/<file> (a pool, the catalog's key)."""
    out = {}
    for pod_path in split_paths(value):
        rel = pod_path[len(IMAGE_MODEL_DIR) + 1 :]
        adapter = rel.split("/", 1)[1].removesuffix(".gguf") if rel.startswith("lora/") else rel.split("/", 1)[0]
        local = _local_model_path(pod_path, local_dir)
        _link(local, adapter_files(adapter))
        out[pod_path] = str(local)
    return out


def _pool_replicas(
    objs: list[dict[str, Any]],
    pool: dict[str, Any],
    files: Callable[[str], Path],
    adapter_files: Callable[[str], Path],
    binary: Path,
    workdir: Path,
    started: Started,
    adapter_paths: dict[str, str],
) -> list[str]:
    """Every replica of the pool's StatefulSet (its rendered `replicas` URLs), each the container's command over the
    ConfigMap's preset with /models mapped to a local directory of stand-in files at the preset's paths (a section's
    `lora` adapters too: their local paths are added to `adapter_paths`)."""
    sts = next(o for o in objs if o["kind"] == "StatefulSet" and o["metadata"]["name"] == f"pool-{pool['name']}")
    c = _container(sts, "llama-server")
    assert c is not None
    env = _env(c)
    cm = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == f"pool-{pool['name']}")
    mount = next(
        m["mountPath"] for m in c["volumeMounts"] if env["LLAMA_MODELS_PRESET"].startswith(m["mountPath"] + "/")
    )
    key = env["LLAMA_MODELS_PRESET"][len(mount) + 1 :]
    preset = cm["data"][key]
    models_dir = workdir / f"pool-{pool['name']}-models"
    section = None
    lines = []
    for line in preset.splitlines():
        if m := re.fullmatch(r"\[(.+)\]", line):
            section = m.group(1)
        elif m := re.fullmatch(r"model = /models/(.+)", line):
            local = models_dir / m.group(1)
            _link(local, files(section or ""))
            line = f"model = {local}"
        elif m := re.fullmatch(r"lora = (/models/.+)", line):
            links = _adapter_links(m.group(1), models_dir, adapter_files)
            adapter_paths.update(links)
            line = f"lora = {join_paths(list(links.values()))}"
        elif re.fullmatch(r"threads = \d+", line):
            line = "threads = 1"  # 2 shared cores
        lines.append(line)
    preset_path = workdir / f"pool-{pool['name']}.ini"
    preset_path.write_text("\n".join(lines) + "\n")
    urls = []
    for i in range(len(pool["replicas"])):
        port = _port()
        penv = _base_env(**_one_thread(env))
        penv.update(
            LLAMA_MODELS_PRESET=str(preset_path),
            LLAMA_SERVER_BIN=str(binary),
            LLAMA_HOST="127.0.0.1",
            LLAMA_PORT=str(port),
        )
        started.spawn(_local_entrypoint(c["command"]), penv, workdir / f"pool-{pool['name']}-{i}.log")
        urls.append(f"http://127.0.0.1:{port}")
    return urls


# --- SageMaker ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SageMakerModel:
    endpoint_name: str
    environment: dict[str, str]
    mode: str  # SingleModel | MultiModel


def sagemaker_models(template: dict[str, Any]) -> list[SageMakerModel]:
    """Every endpoint with its Model's container environment (endpoint -> endpoint config -> variant -> model)."""
    res = template["Resources"]

    def ref(v: Any) -> str:
        return v["Ref"] if isinstance(v, dict) and "Ref" in v else v["Fn::GetAtt"][0]

    out = []
    for ep in (r for r in res.values() if r["Type"] == "AWS::SageMaker::Endpoint"):
        config = res[ref(ep["Properties"]["EndpointConfigName"])]
        (variant,) = config["Properties"]["ProductionVariants"]
        container = res[ref(variant["ModelName"])]["Properties"]["PrimaryContainer"]
        env = {k: flatten(v) for k, v in (container.get("Environment") or {}).items()}
        out.append(SageMakerModel(flatten(ep["Properties"]["EndpointName"]), env, container.get("Mode", "SingleModel")))
    return out


def catalog(syn: Synthesized) -> Any:
    """The model catalog the stack ships as an S3 asset (what the copy job reads), parsed by the copy job's own code."""
    if str(LAMBDA_DIR) not in sys.path:
        sys.path.insert(0, str(LAMBDA_DIR))
    from model_download.catalog import Catalog

    found = [p for p in syn.outdir.glob("asset.*.json") if '"entries"' in p.read_text()]
    assert len(found) == 1, found
    return Catalog.from_json(found[0].read_text())


def mme_artifacts(syn: Synthesized, files: Callable[[str], Path], workdir: Path) -> dict[str, tuple[str, Path]]:
    """config model -> (TargetModel, the .tar.gz S3 would hold): GGUF + engine.json, written with the copy job's own
    naming and engine.json (lambda/model_download/catalog.py)."""
    from model_download.catalog import engine_json, mme_target_model

    out = {}
    for entry in catalog(syn).entries:
        archive = workdir / f"{entry.name}.tar.gz"
        with tarfile.open(archive, "w:gz", compresslevel=0, format=tarfile.PAX_FORMAT) as tar:
            tar.add(files(entry.name), arcname=entry.basename)
            data = engine_json(entry)
            info = tarfile.TarInfo("engine.json")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        out[entry.name] = (mme_target_model(entry), archive)
    return out


def model_of(sm: SageMakerModel) -> str:
    """The config model a single-model endpoint serves (the alias its env carries)."""
    return sm.environment.get("LLAMA_MODEL_ALIAS") or sm.environment["SERVE_MODEL_NAME"]


@dataclass
class SageMakerPaths:
    """boto3 clients by config model: `runtime(model)` plus the EndpointName and TargetModel to call it with."""

    clients: dict[str, tuple[Any, str, str | None]] = field(default_factory=dict)


def boto3_runtime(url: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "sagemaker-runtime",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, read_timeout=180),
    )


@contextmanager
def sagemaker_stack(
    syn: Synthesized,
    files: Callable[[str], Path],
    binary: Path,
    workdir: Path,
    vllm: Callable[[str, dict[str, str], Path], tuple[str, Callable[[], None]]] | None = None,
    adapter_files: Callable[[str], Path] = stand_in_adapter,
) -> Iterator[SageMakerPaths]:
    """Every endpoint of the template as SageMaker runs it, each behind its own SageMaker Runtime emulator; a base
    with adapters reads the catalog's `lora` bundle of its entry (`lora_bundle`)."""
    from tests.evaluation.sagemaker_emulator import MultiModelStore, SageMakerRuntimeEmulator

    started = Started()
    paths = SageMakerPaths()
    with ExitStack() as stack:
        # The artifacts (a tarball and its extraction per pooled model, ~100 MB each) go once the processes stopped
        # (callbacks run last-registered first).
        stack.callback(_remove_artifacts, workdir)
        stack.callback(started.stop)
        containers: list[tuple[SageMakerModel, str, MultiModelStore | None]] = []
        models = sagemaker_models(syn.template)
        # Every pooled model's artifact, built once; each multi-model endpoint holds its own pool's models only.
        artifacts = mme_artifacts(syn, files, workdir) if any(sm.mode == "MultiModel" for sm in models) else {}
        pool_models = _pool_members(syn, [sm.endpoint_name for sm in models if sm.mode == "MultiModel"])
        for sm in models:
            if "SERVE_MODEL_NAME" in sm.environment:  # a vLLM endpoint
                assert vllm is not None, f"{sm.endpoint_name} is a vLLM endpoint: pass vllm= to start it"
                url, stop = vllm(model_of(sm), sm.environment, workdir / f"{sm.endpoint_name}.log")
                stack.callback(stop)
                containers.append((sm, url, None))
                continue
            port = _port()
            env = _base_env(**_one_thread(sm.environment))
            env.update(
                LLAMA_SERVER_BIN=str(binary),
                SAGEMAKER_BIND_TO_PORT=str(port),
                ADAPTER_HOST="127.0.0.1",
                LLAMA_ENGINE_PORT=str(_port()),
                LLAMA_RUN_AS=f"{os.getuid()}:{os.getgid()}",
            )
            store = None
            if sm.mode == "MultiModel":
                env["SAGEMAKER_MULTI_MODEL"] = "true"  # SageMaker injects it into a multi-model endpoint's container
                store = MultiModelStore(
                    {t: a for m, (t, a) in artifacts.items() if m in pool_models[sm.endpoint_name]},
                    workdir / f"{sm.endpoint_name}-opt-ml-models",
                )
            else:
                name = model_of(sm)
                model_dir = workdir / f"{sm.endpoint_name}-opt-ml-model"
                model_dir.mkdir(parents=True, exist_ok=True)
                rendered = sm.environment["MODEL_PATH"]
                assert rendered.startswith("/opt/ml/model/"), rendered
                local = model_dir / rendered[len("/opt/ml/model/") :]
                if "LLAMA_LORA_MANIFEST" in sm.environment:
                    manifest = lora_bundle(syn, name, files, adapter_files, model_dir)
                    assert sm.environment["LLAMA_LORA_MANIFEST"] == f"/opt/ml/model/{manifest.name}"
                    env["LLAMA_LORA_MANIFEST"] = str(manifest)
                else:
                    local.symlink_to(files(name))
                env.update(MODEL_PATH=str(local), SM_MODEL_DIR=str(model_dir))
            started.spawn(
                [sys.executable, str(LLAMA_DIR / "entrypoint.py"), "serve"], env, workdir / f"{sm.endpoint_name}.log"
            )
            containers.append((sm, f"http://127.0.0.1:{port}", store))
        for sm, url, store in containers:
            try:
                wait_healthy(url, None, timeout=420, path="/ping")
            except (RuntimeError, TimeoutError) as e:
                raise AssertionError(f"{sm.endpoint_name}: {e}\n{started.tail()}") from None
            emu = stack.enter_context(SageMakerRuntimeEmulator(url, sm.endpoint_name, models=store))
            runtime = boto3_runtime(emu.url)
            if store is None:
                paths.clients[model_of(sm)] = (runtime, sm.endpoint_name, None)
            else:
                for model, (target, _) in mme_artifacts_index(store).items():
                    paths.clients[model] = (runtime, sm.endpoint_name, target)
        yield paths


def lora_bundle(
    syn: Synthesized,
    model: str,
    files: Callable[[str], Path],
    adapter_files: Callable[[str], Path],
    model_dir: Path,
) -> Path:
    """`model`'s catalog `lora` bundle in `model_dir` as SageMaker downloads its S3Prefix into /opt/ml/model: every
    member at its key under catalog.lora_prefix(entry) (lora_member_keys: the base, then lora/<adapter>.gguf) as a
    link to its stand-in, then lora.json from the catalog's own writer (lora_manifest). Returns the manifest."""
    entries = catalog(syn).entries  # first: it puts lambda/ on sys.path
    from model_download.catalog import LORA_MANIFEST, lora_manifest, lora_member_keys, lora_prefix

    (entry,) = [e for e in entries if e.name == model and "lora" in (e.layouts or ())]
    prefix = lora_prefix(entry)
    for adapter, key in lora_member_keys(entry).items():
        _link(model_dir / key[len(prefix) :], adapter_files(adapter) if adapter else files(model))
    manifest = model_dir / LORA_MANIFEST
    manifest.write_bytes(lora_manifest(entry))
    return manifest


def _remove_artifacts(workdir: Path) -> None:
    for extracted in workdir.glob("*opt-ml-models"):
        shutil.rmtree(extracted, ignore_errors=True)
    for archive in workdir.glob("*.tar.gz"):
        archive.unlink()


def _pool_members(syn: Synthesized, endpoints: list[str]) -> dict[str, set[str]]:
    """Multi-model endpoint -> the config models of its pool. A pool's endpoint is named `<stack>-<pool>-<hash>`
    (sagemaker/_naming.endpoint_name with the pool's name); each pool must match exactly one endpoint."""
    from cpu_inference.config import load

    config = load(syn.config)
    out: dict[str, set[str]] = {e: set() for e in endpoints}
    for pool in config.farm.pools:
        members = {m.name for m in config.pool_models(pool.name)}
        if not members:
            continue
        (endpoint,) = [e for e in endpoints if e.rsplit("-", 1)[0].endswith(f"-{pool.name}")]
        out[endpoint] |= members
    return out


def mme_artifacts_index(store: Any) -> dict[str, tuple[str, Path]]:
    """config model -> (TargetModel, archive) of a store built by mme_artifacts (archives are <model>.tar.gz)."""
    return {Path(a).name[: -len(".tar.gz")]: (t, a) for t, a in store.artifacts.items()}


@contextmanager
def deployed(
    target: str,
    config_text: str,
    files: Callable[[str], Path],
    binary: Path,
    workdir: Path,
    vllm: Callable[[str, dict[str, str], Path], tuple[str, Callable[[], None]]] | None = None,
    adapter_files: Callable[[str], Path] = stand_in_adapter,
) -> Iterator[Any]:
    """`config_text` synthesized, then its `target` path started (eks_stack or sagemaker_stack)."""
    start = {"eks": eks_stack, "sagemaker": sagemaker_stack}[target]
    syn = synthesize(config_text, workdir)
    with start(syn, files, binary, workdir, vllm=vllm, adapter_files=adapter_files) as running:
        yield running
