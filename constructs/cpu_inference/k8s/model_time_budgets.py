"""How long one served model may take to arrive, and how much disk it needs: the download (init container),
the load (startup probe), the node launch (progress deadline) and the emptyDir size — all from the file size."""

from __future__ import annotations

import math

from .. import sizing

# Start-up budget: llama-server pages the weights in from the node's data volume (gp3, 500 MiB/s per node,
# shared) and warms up; 100 MiB/s leaves room for neighbours loading at the same time.
LOAD_BYTES_PER_SECOND = 100 * sizing.MIB
LOAD_FLOOR_SECONDS = 30
# Download budget (init container, before the startup probe runs): a conservative per-pod S3 rate.
DOWNLOAD_BYTES_PER_SECOND = 50 * sizing.MIB
DOWNLOAD_FLOOR_SECONDS = 60
NODE_LAUNCH_SECONDS = 300  # Karpenter node + image pull, counted in the progress deadline


def startup_budget_seconds(weights_bytes: int) -> int:
    """Seconds the startup probe allows for loading the model (after the download)."""
    return LOAD_FLOOR_SECONDS + math.ceil(weights_bytes / LOAD_BYTES_PER_SECOND)


def download_budget_seconds(weights_bytes: int) -> int:
    return DOWNLOAD_FLOOR_SECONDS + math.ceil(weights_bytes / DOWNLOAD_BYTES_PER_SECOND)


def disk_bytes(weights_bytes: int) -> int:
    """emptyDir size for the model: the file (+20% for an estimate that undershoots) + 512 MiB."""
    return int(weights_bytes * 1.2) + 512 * sizing.MIB
