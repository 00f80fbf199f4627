"""What deploys is what runs: the container environment MultiModelEndpoint synthesizes (read back from the template)
starts the real image entrypoint the way SageMaker starts it (`serve`, SAGEMAKER_MULTI_MODEL=true injected), a
farm artifact (.tar.gz of GGUF + engine.json, extracted where SageMaker puts it) loads on the real llama-server with
the construct's threads, and InvokeEndpoint's TargetModel path reaches the container as SageMaker sends it."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import aws_cdk as cdk
import httpx
import pytest
from aws_cdk import aws_ecr as ecr

from cpu_inference.artifacts import ModelBucket
from cpu_inference.sagemaker import EngineImage, MultiModelEndpoint, MultiModelEndpointProps
from tests.support.cdk import template_json
from tests.support.engine import child_pids, free_port, wait_healthy

pytestmark = pytest.mark.engine

ENGINE_DIR = Path(__file__).resolve().parents[2] / "containers" / "llama-server"
MIB = 1024 * 1024


def synthesized_environment() -> tuple[dict[str, str], MultiModelEndpoint]:
    stack = cdk.Stack(cdk.App(), "Farm", env=cdk.Environment(account="123456789012", region="us-east-1"))
    image = EngineImage(
        ecr.Repository.from_repository_name(stack, "Repo", "llama-server"), digest="sha256:" + "cd" * 32
    )
    ep = MultiModelEndpoint(
        stack,
        "Pool",
        props=MultiModelEndpointProps(
            name="small",
            image=image,
            model_bucket=ModelBucket(stack, "Models"),
            instance_type="ml.c8g.large",
            # One thread per model: the adapter's own default would be every CPU (2 here), so the child's --threads
            # shows which one reached the engine.
            threads_per_model=1,
            memory_budget_bytes=3 * 1024 * MIB,
            target_models={"m-0001": "m-0001/0123456789abcdef-89abcdef.tar.gz"},
        ),
    )
    (model,) = [r for r in template_json(stack)["Resources"].values() if r["Type"] == "AWS::SageMaker::Model"]
    return model["Properties"]["PrimaryContainer"]["Environment"], ep


def test_the_container_plans_the_synthesized_budgets(tmp_path: Path) -> None:
    """The real entrypoint's multi-model plan from the synthesized environment: the memory budget is the construct's
    (not the whole instance), and a request's generation budget leaves room for a cold load inside InvokeEndpoint's
    60 s (F5, F6)."""
    environment, ep = synthesized_environment()
    sys.path.insert(0, str(ENGINE_DIR))
    try:
        import entrypoint
    finally:
        sys.path.remove(str(ENGINE_DIR))
    # The instance's memory as the container would detect it (ml.c8g.large: 4 GiB).
    plan = entrypoint.multi_model_plan(
        {**environment, "LLAMA_SERVER_BIN": str(tmp_path / "llama-server")}, cpus=2, memory_limit=4 * 1024 * MIB
    )
    assert plan.memory_budget == 3 * 1024 * MIB
    assert plan.adapter.generation_budget == 20.0 == 60 - ep.props.cold_load_alarm.to_seconds() - 10
    # Without memory_budget_bytes: the memory alarm's 85% of the instance, not the adapter's 100% default.
    stack = cdk.Stack(cdk.App(), "Farm2", env=cdk.Environment(account="123456789012", region="us-east-1"))
    image = EngineImage(
        ecr.Repository.from_repository_name(stack, "Repo", "llama-server"), digest="sha256:" + "cd" * 32
    )
    default = MultiModelEndpoint(
        stack,
        "Pool",
        props=MultiModelEndpointProps(
            name="small", image=image, model_bucket=ModelBucket(stack, "Models"), instance_type="ml.c8g.large"
        ),
    )
    plan = entrypoint.multi_model_plan(
        {**default.environment, "LLAMA_SERVER_BIN": "x"}, cpus=2, memory_limit=4 * 1024 * MIB
    )
    assert plan.memory_budget == int(4 * 1024 * MIB * 0.85)


def test_the_synthesized_environment_serves_a_farm_artifact(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path
) -> None:
    environment, ep = synthesized_environment()
    assert environment == {
        "LLAMA_THREADS": "1",
        "MME_MEMORY_BUDGET_BYTES": str(3 * 1024 * MIB),
        "ADAPTER_GENERATION_BUDGET_SECONDS": "20",
    }
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LLAMA_", "SAGEMAKER_", "ADAPTER_", "MME_", "MODEL_", "SM_"))
    }
    env.update(environment)
    env.update(
        SAGEMAKER_MULTI_MODEL="true",  # SageMaker injects it into a multi-model endpoint's container
        # Local plumbing only: the built engine, a free port on loopback, this user instead of the image's 65532.
        LLAMA_SERVER_BIN=str(llama_server_bin),
        SAGEMAKER_BIND_TO_PORT=str(port),
        ADAPTER_HOST="127.0.0.1",
        LLAMA_RUN_AS=f"{os.getuid()}:{os.getgid()}",
    )
    log = tmp_path / "mme.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(ENGINE_DIR / "entrypoint.py"), "serve"], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_healthy(url, proc, timeout=30, path="/ping")
        except (RuntimeError, TimeoutError) as e:
            raise AssertionError(f"{e}\n{log.read_text()}") from None

        # SageMaker, on the first InvokeEndpoint(TargetModel=...): download <prefix><TargetModel>, extract it under
        # /opt/ml/models/<model_name>/model (model_name is opaque), then POST /models.
        target = ep.target_models["m-0001"]
        archive = tmp_path / "artifact.tar.gz"
        with tarfile.open(archive, "w:gz", compresslevel=1) as tar:
            tar.add(smollm2_gguf, arcname=smollm2_gguf.name)
            engine = json.dumps({"ctx-size": "256", "parallel": "1"}).encode()  # no threads: the construct's apply
            info = tarfile.TarInfo("engine.json")
            info.size = len(engine)
            tar.addfile(info, io.BytesIO(engine))
        model_dir = tmp_path / "opt-ml-models" / "a1b2c3" / "model"
        model_dir.mkdir(parents=True)
        with tarfile.open(archive) as tar:
            tar.extractall(model_dir, filter="data")

        r = httpx.post(f"{url}/models", json={"model_name": "a1b2c3", "url": str(model_dir)}, timeout=120)
        assert r.status_code == 200, r.text + log.read_text()
        (child,) = child_pids(proc.pid)
        args = Path(f"/proc/{child}/cmdline").read_bytes().decode().split("\0")
        assert args[args.index("--threads") + 1] == "1"
        assert "memory budget 3072 MiB" in log.read_text()

        body = {"messages": [{"role": "user", "content": "What is 2+2?"}], "max_tokens": 4, "temperature": 0}
        r = httpx.post(
            f"{url}/models/a1b2c3/invoke", json=body, headers={"X-Amzn-SageMaker-Target-Model": target.path}, timeout=60
        )
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
