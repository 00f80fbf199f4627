"""Container images: LlamaCppImage builds a context natively for arm64 and amd64 into ECR (by digest); VLLM_IMAGE
are its props for the vLLM CPU engine image (containers/vllm-cpu)."""

from cpu_inference.images.llama_cpp_image import LlamaCppImage
from cpu_inference.images.props import DEFAULT_CONTEXT_DIR, PLATFORMS, LlamaCppImageProps
from cpu_inference.images.vllm_image import VLLM_IMAGE

__all__ = ["DEFAULT_CONTEXT_DIR", "PLATFORMS", "VLLM_IMAGE", "LlamaCppImage", "LlamaCppImageProps"]
