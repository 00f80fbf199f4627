"""Every task on every path, through exactly what deploys (issue 23), generated from the one table in
tests/support/task_matrix.py:

- the table covers tasks × paths × engines × via (the model's own name, or a LoRA adapter's over it: issue 26) as
  the product defines them (schema's Task, targets × servings + local, engines), so a new task or path fails here
  until it has its row;
- every refused cell is refused by `cpu-inference validate` with one line (no traceback);
- every served llama.cpp cell: its task's requests (tests/support/matrix_requests.py) sent the way users send them
  (openai SDK to the EKS gateway and to `cpu-inference local`; boto3 invoke_endpoint to SageMaker endpoints) through
  the processes started from the synthesized stack (tests/support/matrix_paths.py), answered by the real engine with
  real models (SmolLM2 for generation, all-MiniLM-L6-v2 for embeddings checked against transformers, the MiniLM
  cross-encoder stand-in for rerank). The vLLM cells run in tests/runtime/vllm/test_task_matrix.py;
- every served adapter cell: the same requests with the adapter's name as `model`, on the same started path (the
  generated configs put the real stand-in adapter, tests/support/lora.py, on every generator whose path serves
  adapters), the same checks, and a chat answered the adapter's way while its base's name is not.
"""

from __future__ import annotations

import subprocess
import sys
from itertools import product
from pathlib import Path

import pytest

from tests.support.matrix_requests import via_openai, via_sagemaker
from tests.support.task_matrix import (
    CELLS,
    ENGINES,
    LOCAL,
    NOT_CARRIED,
    PATHS,
    PREFILTER_ROLES,
    REFUSED,
    REQUESTS,
    SERVED,
    TASKS,
    VIAS,
    Cell,
    adapter_name,
    carries_adapter,
    config_yaml,
    model_line,
    model_name,
    prefilter_refusal,
    refusal,
    served,
)

ROOT = Path(__file__).resolve().parents[2]
CLI = str(Path(sys.executable).parent / "cpu-inference")
ENGINE = "llama.cpp"


def _cases(path: str) -> list:
    return [
        pytest.param(c, kind, id=f"{c.task}:{kind}" + (":adapter" if c.adapter else ""))
        for c in served(ENGINE, path)
        for kind in c.requests()
    ]


def _names(cell: Cell, serving: str) -> tuple[str, str | None]:
    """(the `model` a client sends for `cell`, its base's name when that is an adapter) in the generated configs."""
    base = model_name(cell.task, ENGINE, serving)
    return (adapter_name(cell.task, ENGINE, serving), base) if cell.adapter else (base, None)


# --- the table ------------------------------------------------------------------------------------------------------


def test_the_table_covers_every_task_path_and_engine_the_product_has() -> None:
    assert set(REQUESTS) == set(TASKS), "a task without its requests: add its row to REQUESTS"
    assert {(c.task, c.path, c.engine, c.via) for c in CELLS} == set(product(TASKS, PATHS, ENGINES, VIAS))
    assert set(ENGINES) == {"llama.cpp", "vllm"} and LOCAL in PATHS and len(PATHS) == 5
    assert len(SERVED) + len(REFUSED) == len(CELLS) and all(c.requests() for c in SERVED)
    # Through an adapter a client gets what the base serves, never more: same requests, served only where the base is.
    assert all(c.base in SERVED and c.requests() == c.base.requests() for c in SERVED if c.adapter)


# The test that runs each llama.cpp path's served cells (the vLLM paths: tests/runtime/vllm/test_task_matrix.py).
PATH_TESTS = {
    "eks-dedicated": "test_eks_dedicated",
    "eks-pool": "test_eks_pool_through_the_gateway",
    "sagemaker-single": "test_sagemaker_single_model_endpoint",
    "sagemaker-mme": "test_sagemaker_multi_model_endpoint",
    LOCAL: "test_cpu_inference_local",
}


def test_every_served_cell_model_or_adapter_is_run_by_its_paths_test(request) -> None:
    """Each served llama.cpp cell is a parametrization of its path's test (collected from this module), and each path's
    generated config carries an adapter on exactly the models whose adapter cells are served."""
    from cpu_inference.config.loader import parse

    assert set(PATH_TESTS) == set(PATHS)
    module = request.module
    for path, name in PATH_TESTS.items():
        marks = [
            m for m in getattr(module, name).pytestmark if m.name == "parametrize" and m.args[0] == ("cell", "kind")
        ]
        run = {p.values[0] for m in marks for p in m.args[1]}
        assert run == set(served(ENGINE, path)), path
    for target in ("eks", "sagemaker"):
        config = parse(config_yaml(target, ENGINE), "matrix.yaml")
        with_adapters = {m.name: [a.name for a in m.adapters] for m in config.models if m.adapters}
        expected = {
            model_name(c.task, ENGINE, c.serving or ""): [adapter_name(c.task, ENGINE, c.serving or "")]
            for c in SERVED
            if c.adapter and c.engine == ENGINE and c.target == target
        }
        assert with_adapters == expected and all(
            carries_adapter(target, c.task, ENGINE, c.serving or "") for c in SERVED if c.adapter and c.target == target
        )


def test_what_a_path_cannot_carry_is_the_services_own_limit() -> None:
    import botocore.session

    runtime = botocore.session.get_session().get_service_model("sagemaker-runtime")
    stream = runtime.operation_model("InvokeEndpointWithResponseStream").input_shape.members
    assert (
        "TargetModel" not in stream and "TargetModel" in runtime.operation_model("InvokeEndpoint").input_shape.members
    )
    assert set(NOT_CARRIED) == {("sagemaker-mme", "chat-stream")}


@pytest.mark.parametrize("cell", REFUSED, ids=lambda c: c.id)
def test_a_combination_the_library_cannot_serve_is_refused_at_validate_with_one_line(
    cell: Cell, tmp_path: Path
) -> None:
    target = cell.target or "eks"
    config = tmp_path / "config.yaml"
    config.write_text(
        "\n".join(
            [
                f"target: {target}",
                "pattern: model-farm",
                "models:",
                model_line(target, cell.task, cell.engine, cell.serving or "dedicated", adapter=cell.adapter),
                "",
            ]
        )
    )
    out = subprocess.run([CLI, "validate", str(config)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    errors = [line for line in out.stderr.splitlines() if "warning:" not in line]
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr
    # One line per problem, each naming its key (a cell may break two rules: vLLM + rerank + pool).
    assert errors and all(e.startswith(f"{config}: models[0].") for e in errors), out.stderr
    expected = refusal(cell)
    assert expected is not None and any(expected in e for e in errors), out.stderr


@pytest.mark.parametrize(("role", "task"), list(product(PREFILTER_ROLES, TASKS)))
def test_the_slm_prefilters_models_generate_or_are_refused_at_validate(role: str, task: str, tmp_path: Path) -> None:
    slm, llm = ("classification", "chat")
    slm, llm = (task, llm) if role == "slm" else (slm, task)
    source = "{hf_repo: HuggingFaceTB/SmolLM2-135M-Instruct-GGUF, file: smollm2-135m-instruct-q4_1.gguf}"
    config = tmp_path / "config.yaml"
    config.write_text(f"""pattern: slm-prefilter
models:
- {{name: slm, role: slm, task: {slm}, parameters_billions: 0.135, context_window: 4096, source: {source}}}
- {{name: llm, role: llm, task: {llm}, parameters_billions: 0.135, source: {source}}}
escalation: {{kind: model, model: llm}}
""")
    out = subprocess.run([CLI, "validate", str(config)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    errors = [line for line in out.stderr.splitlines() if "warning:" not in line]
    expected = prefilter_refusal(role, task)
    if expected is None:
        assert out.returncode == 0 and not errors, out.stderr
    else:
        index = 0 if role == "slm" else 1
        assert out.returncode != 0 and "Traceback" not in out.stderr
        assert len(errors) == 1 and errors[0].startswith(f"{config}: models[{index}].task: {expected}"), out.stderr


@pytest.mark.parametrize("target", ["eks", "sagemaker"])
@pytest.mark.parametrize("engine", ENGINES)
def test_the_generated_configs_of_the_served_cells_validate(target: str, engine: str, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(config_yaml(target, engine))
    out = subprocess.run([CLI, "validate", str(config)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


# --- the paths ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def eks(tmp_path_factory, stand_in_files, llama_server_bin):
    from tests.support.matrix_paths import deployed

    with deployed(
        "eks", config_yaml("eks", ENGINE), stand_in_files, llama_server_bin, tmp_path_factory.mktemp("eks")
    ) as running:
        yield running


@pytest.fixture(scope="module")
def sagemaker(tmp_path_factory, stand_in_files, llama_server_bin):
    from tests.support.matrix_paths import deployed

    with deployed(
        "sagemaker", config_yaml("sagemaker", ENGINE), stand_in_files, llama_server_bin, tmp_path_factory.mktemp("sm")
    ) as running:
        yield running


@pytest.fixture(scope="module")
def local(tmp_path_factory, llama_server_bin):
    """`cpu-inference local --stand-ins` on the EKS config: every dedicated model its own engine, the pool one
    router-mode process, the gateway in front (what a user runs)."""
    from tests.cli.test_local import LocalRun

    work = tmp_path_factory.mktemp("local")
    config = work / "config.yaml"
    config.write_text(config_yaml("eks", ENGINE))
    from tests.support.lora import lora_adapter_path

    lora_adapter_path()  # `make lora`'s adapter, which --stand-ins serves for the SmolLM2 stand-in's adapters
    run = LocalRun(
        config,
        "--llama-server",
        str(llama_server_bin),
        "--stand-ins",
        "--threads",
        "1",
        "--log-dir",
        str(work / "logs"),
    )
    try:
        run.wait_for("Ctrl-C stops everything", timeout=300)
        yield f"{run.url}/v1"
    finally:
        run.kill()


@pytest.mark.engine
@pytest.mark.parametrize(("cell", "kind"), _cases("eks-dedicated"))
def test_eks_dedicated(cell: Cell, kind: str, eks, reference) -> None:
    name, base = _names(cell, "dedicated")
    via_openai(eks.urls[base or name], name, kind, reference, base=base)


@pytest.mark.engine
@pytest.mark.parametrize(("cell", "kind"), _cases("eks-pool"))
def test_eks_pool_through_the_gateway(cell: Cell, kind: str, eks, reference) -> None:
    name, base = _names(cell, "pool")
    via_openai(eks.urls[base or name], name, kind, reference, base=base)


@pytest.mark.engine
@pytest.mark.parametrize(("cell", "kind"), _cases("sagemaker-single"))
def test_sagemaker_single_model_endpoint(cell: Cell, kind: str, sagemaker, reference) -> None:
    name, base = _names(cell, "dedicated")
    runtime, endpoint, target = sagemaker.clients[base or name]
    assert target is None
    # The base's cells send no `model` (the endpoint's own model); an adapter's name it in the body.
    via_sagemaker(runtime, endpoint, kind, reference, model=name if base else None, base=base)


@pytest.mark.engine
@pytest.mark.parametrize(("cell", "kind"), _cases("sagemaker-mme"))
def test_sagemaker_multi_model_endpoint(cell: Cell, kind: str, sagemaker, reference) -> None:
    assert not cell.adapter  # refused: engines.adapter_hosting (a TargetModel cannot select an adapter per request)
    runtime, endpoint, target = sagemaker.clients[model_name(cell.task, ENGINE, "pool")]
    assert target is not None
    via_sagemaker(runtime, endpoint, kind, reference, target_model=target)


@pytest.mark.engine
@pytest.mark.parametrize(("cell", "kind"), _cases("local"))
@pytest.mark.parametrize("serving", ["dedicated", "pool"])
def test_cpu_inference_local(cell: Cell, kind: str, serving: str, local: str, reference) -> None:
    name, base = _names(cell, serving)
    via_openai(local, name, kind, reference, base=base)
