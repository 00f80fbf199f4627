"""A LoRA adapter is served over a generation model only (engines.adapter_hosting.adapter_task_problem): a library
user's ServedModel gets the same one line `cpu-inference validate` gives (the task matrix's embedding and rerank
adapter cells, tests/matrix/test_task_matrix.py, check the validator)."""

from __future__ import annotations

import pytest

from cpu_inference import sizing
from cpu_inference.engines.tasks import GENERATION_TASKS, POOLING_TASKS
from cpu_inference.patterns.served_model import ServedAdapter, ServedModel

ADAPTER = ServedAdapter(name="support-json", hf_repo="example/smollm2-json-lora-GGUF", file="smollm2-json-lora.gguf")


def _model(task: str) -> ServedModel:
    return ServedModel(
        name="base",
        hf_repo="example/base-GGUF",
        file="base.gguf",
        spec=sizing.ModelSpec(parameters_billions=0.135, task=task),
        adapters=(ADAPTER,),
    )


@pytest.mark.parametrize("task", POOLING_TASKS)
def test_a_pooling_models_adapters_are_refused_in_one_line_naming_the_fix(task: str) -> None:
    with pytest.raises(ValueError) as err:
        _model(task).validate()
    line = str(err.value)
    assert "\n" not in line and line.startswith(
        f"ServedModel base: adapters are served over a generation model; task {task}"
    )
    assert "remove adapters" in line and all(t in line for t in GENERATION_TASKS)


@pytest.mark.parametrize("task", GENERATION_TASKS)
def test_a_generation_models_adapters_are_accepted(task: str) -> None:
    _model(task).validate()
