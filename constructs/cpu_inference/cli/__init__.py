"""The `cpu-inference` command line."""
