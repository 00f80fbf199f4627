"""Container images: LlamaCppImage builds a context natively for arm64 and amd64 into ECR (by digest)."""

from .buildspecs import SOCI_0_14_1, SociRelease
from .llama_cpp_image import LlamaCppImage
from .props import DEFAULT_CONTEXT_DIR, PLATFORMS, LlamaCppImageProps

__all__ = ["DEFAULT_CONTEXT_DIR", "PLATFORMS", "SOCI_0_14_1", "LlamaCppImage", "LlamaCppImageProps", "SociRelease"]
