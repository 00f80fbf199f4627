"""Container images: LlamaCppImage builds a context natively for arm64 and amd64 into ECR (by digest)."""

from .llama_cpp_image import LlamaCppImage
from .props import DEFAULT_CONTEXT_DIR, PLATFORMS, LlamaCppImageProps

__all__ = ["DEFAULT_CONTEXT_DIR", "PLATFORMS", "LlamaCppImage", "LlamaCppImageProps"]
