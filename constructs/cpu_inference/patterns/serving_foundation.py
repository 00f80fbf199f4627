"""What every deployment needs before anything serves: the model store, one copied artifact per model, and the
engine image (plus the router image when a pattern runs one)."""

from __future__ import annotations

from dataclasses import dataclass

from constructs import Construct

from cpu_inference._internal.resources import ROUTER, runtime_dir
from cpu_inference.artifacts import ModelArtifact, ModelArtifactProps, ModelBucket, ModelBucketProps
from cpu_inference.engines import is_vllm
from cpu_inference.images import VLLM_IMAGE, LlamaCppImage, LlamaCppImageProps
from cpu_inference.patterns.served_model import ServedModel

# The router/gateway image is built by the same native multi-arch pipeline; it carries no engine pin.
ROUTER_IMAGE = LlamaCppImageProps(context_dir=runtime_dir(ROUTER), name="router", pin_file=None)


@dataclass(frozen=True)
class ServingFoundationProps:
    """models: what to copy from Hugging Face (one ModelArtifact each, under `models/<name>/`; may be empty when
    a ModelCatalog copies every model, as for a farm of pooled models).
    bucket / engine_image: props of the ModelBucket and the llama-server LlamaCppImage (bring `existing_bucket`
    or `existing_repository` there). router_image: props of the router/gateway image, or None for no router.
    vllm_image: props of the vLLM CPU image, built only when a model has engine vllm (its artifact is then the
    repo's safetensors snapshot instead of one GGUF file)."""

    models: tuple[ServedModel, ...]
    bucket: ModelBucketProps = ModelBucketProps()
    engine_image: LlamaCppImageProps = LlamaCppImageProps()
    router_image: LlamaCppImageProps | None = None
    vllm_image: LlamaCppImageProps = VLLM_IMAGE

    def validate(self) -> None:
        names = [m.name for m in self.models]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"ServingFoundationProps.models: names must be unique, repeated: {dupes}")
        for m in self.models:
            m.validate()


def _construct_id(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("-"))


class ServingFoundation(Construct):
    """Attributes: model_bucket, artifacts (name → ModelArtifact), engine_image, router_image (or None), vllm_image
    (or None: no model of engine vllm); image_for(model) is the image that serves a model."""

    def __init__(self, scope: Construct, id: str, *, props: ServingFoundationProps) -> None:
        super().__init__(scope, id)
        props.validate()
        self.props = props
        self.model_bucket = ModelBucket(self, "ModelBucket", props=props.bucket)
        self.artifacts: dict[str, ModelArtifact] = {
            m.name: ModelArtifact(
                self,
                f"Model{_construct_id(m.name)}",
                props=ModelArtifactProps(
                    model_bucket=self.model_bucket,
                    name=m.name,
                    hf_repo=m.hf_repo,
                    file=m.file,
                    snapshot=is_vllm(m.engine),
                    revision=m.revision,
                    sha256=m.sha256,
                    token_secret_name=m.token_secret_name,
                ),
            )
            for m in props.models
        }
        self.engine_image = LlamaCppImage(self, "EngineImage", props=props.engine_image)
        self.router_image = LlamaCppImage(self, "RouterImage", props=props.router_image) if props.router_image else None
        vllm = any(is_vllm(m.engine) for m in props.models)
        self.vllm_image = LlamaCppImage(self, "VllmImage", props=props.vllm_image) if vllm else None

    def image_for(self, model: ServedModel) -> LlamaCppImage:
        """The engine image that serves `model`: vLLM's for engine vllm, llama-server's otherwise."""
        if is_vllm(model.engine):
            assert self.vllm_image is not None  # built whenever a model has engine vllm
            return self.vllm_image
        return self.engine_image
