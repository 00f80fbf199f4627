"""Where a base model's LoRA adapters can be served: one rule that config validation (config/rules.py) and the
model farm's props (patterns/model_farm.py) both apply, so `validate` and a library user get the same one line; and
over which bases at all (adapter_task_problem: config/rules.py and patterns/served_model.ServedModel.validate).

- EKS: a pooled base (its section in the pool's preset loads them) and a dedicated one (its pod fetches them and
  passes --lora) alike; the gateway applies one per request.
- SageMaker: only a base on its own real-time endpoint. A multi-model endpoint hands the container one TargetModel
  per model artifact (botocore sagemaker InvokeEndpoint.TargetModel: "the model to request for inference when
  invoking a multi-model endpoint"), so a pooled base cannot select an adapter per request; an inference component's
  adapters are their own components (InferenceComponentSpecification.BaseInferenceComponentName) whose loading
  contract for a bring-your-own container is not documented, so that hosting is refused rather than guessed.
"""

from __future__ import annotations

from cpu_inference.engines.tasks import GENERATION_TASKS


def adapter_task_problem(task: str) -> str | None:
    """Why a model of `task` cannot carry LoRA adapters (one line ending in the fix), or None for a generator.

    The adapters served here are LoRA deltas of a generator's weights, applied per request to a chat/completion
    (llama-server's `lora` request field); an embedding or rerank model pools an encoder's hidden states
    (engines.tasks.POOLING_TASKS) — its stand-ins are BERT-family encoders, and no LoRA over one is built or proven
    here, so such a base is refused rather than served untested."""
    if task in GENERATION_TASKS:
        return None
    return (
        f"adapters are served over a generation model; task {task} pools an encoder's output, and no LoRA over it "
        f"is served — remove adapters, or put them on a model whose task is one of {', '.join(GENERATION_TASKS)}"
    )


def adapter_hosting_problem(target: str, *, pooled: bool, hosting: str, copy: str) -> str | None:
    """Why a base with adapters cannot be served this way (one line ending in the fix), or None.

    target: eks | sagemaker. pooled: the base is a pool member (else dedicated). hosting: the farm's
    dedicated_hosting (endpoints | inference_components), which matters for a dedicated base on SageMaker only.
    copy: the farm's dedicated_copy (catalog | artifact): a dedicated base reads its adapters from the farm's catalog
    (EKS: its pod fetches their keys under farm/; SageMaker: its endpoint reads the catalog's `lora` bundle), which a
    base copied as its own ModelArtifact is outside of."""
    if not pooled and copy != "catalog":
        return (
            f"a dedicated base reads its adapters from the farm's catalog — set farm.dedicated_copy: catalog (it is "
            f"{copy!r}), or serve the base from a pool"
        )
    if target != "sagemaker":
        return None
    if pooled:
        return (
            "on target sagemaker a base with adapters is served by its own endpoint (a multi-model endpoint cannot "
            "apply an adapter per request) — serve it dedicated (serving: dedicated), or use target: eks"
        )
    if hosting == "inference_components":
        return (
            "farm.dedicated_hosting: inference_components does not serve adapters — use dedicated_hosting: endpoints "
            "for a farm whose models have adapters, or use target: eks"
        )
    return None
