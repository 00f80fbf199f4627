"""Every model of the shipped model-farm examples answers its task through the path it deploys to, started from the
example's own synthesized stack (tests/support/matrix_paths.py) — e.g. examples/model-farm-sagemaker.yaml's
bge-small-en, bge-base-en (embedding) and jina-reranker (rerank) through their multi-model endpoint's adapter with
boto3 `invoke_endpoint(TargetModel=...)`, which answered 400 to every request before (review F1).

The bytes each model serves are the stand-in for its task (all-MiniLM-L6-v2 for embedding models, the cross-encoder
stand-in for rerank models, SmolLM2 for generation): the example's own GGUFs are not on this machine, and the test is
about the path, whose every rendered setting is the example's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from cpu_inference.config import load
from tests.support.matrix_requests import Reference, via_openai, via_sagemaker
from tests.support.task_matrix import REQUESTS

pytestmark = pytest.mark.engine

ROOT = Path(__file__).resolve().parents[2]


def _files(example: Path) -> tuple[dict[str, str], Callable[[str], Path]]:
    """The example's model -> task, and model -> the stand-in GGUF `cpu-inference local --stand-ins` serves for it."""
    from cpu_inference.cli.local_plan import STAND_IN_FILES, stand_in_for

    tasks = {m.name: str(m.task) for m in load(example).models}
    return tasks, lambda model: STAND_IN_FILES[stand_in_for(tasks[model])]()


def test_every_model_of_the_sagemaker_farm_example_answers_its_task(
    tmp_path: Path, llama_server_bin, stand_in_files, reference: Reference
) -> None:
    from tests.support.matrix_paths import sagemaker_stack, synthesize

    example = ROOT / "examples" / "model-farm-sagemaker.yaml"
    tasks, files = _files(example)  # stand_in_files: the fixture that builds the encoder GGUFs these use
    assert {tasks[n] for n in ("bge-small-en", "bge-base-en", "jina-reranker")} == {"embedding", "rerank"}
    syn = synthesize(example.read_text(), tmp_path)
    with sagemaker_stack(syn, files, llama_server_bin, tmp_path) as paths:
        assert set(paths.clients) == set(tasks), "every model is reachable by boto3"
        for name, task in tasks.items():
            runtime, endpoint, target = paths.clients[name]
            for kind in REQUESTS[task]:
                if kind == "chat-stream" and target is not None:
                    continue  # InvokeEndpointWithResponseStream has no TargetModel (task_matrix.NOT_CARRIED)
                via_sagemaker(runtime, endpoint, kind, reference, target_model=target)


def test_every_model_of_the_eks_farm_example_answers_its_task_through_the_gateway(
    tmp_path: Path, llama_server_bin, stand_in_files, reference: Reference
) -> None:
    from tests.support.matrix_paths import eks_stack, synthesize

    example = ROOT / "examples" / "model-farm-eks.yaml"
    tasks, files = _files(example)  # stand_in_files: the fixture that builds the encoder GGUFs these use
    syn = synthesize(example.read_text(), tmp_path)
    with eks_stack(syn, files, llama_server_bin, tmp_path) as started:
        assert set(started.urls) == set(tasks)
        for name, task in tasks.items():
            for kind in REQUESTS[task]:
                via_openai(started.urls[name], name, kind, reference)
