"""Copy a Hugging Face model file (or a vLLM model's safetensors snapshot) into S3, verified and never half-written
(plain boto3 + stdlib + urllib3).

Used by the ModelArtifact CodeBuild job (`python -m model_download`), by `cpu-inference download`, and by the
custom-resource handlers in `custom_resource`."""

from .copy import CopyRequest, CopyResult, copy_model, part_size_for, plan_parts, s3_client
from .credentials import read_token
from .errors import (
    ChecksumMismatchError,
    DownloadError,
    HubAuthError,
    HubError,
    HubNotFoundError,
    ImmutableKeyError,
    TokenError,
)
from .hub import FileInfo, FileRef, Hub, RetryPolicy
from .snapshot import MANIFEST_NAME, SnapshotRequest, SnapshotResult, copy_snapshot
from .snapshot_select import SnapshotError

__all__ = [
    "ChecksumMismatchError",
    "CopyRequest",
    "CopyResult",
    "DownloadError",
    "FileInfo",
    "FileRef",
    "Hub",
    "HubAuthError",
    "HubError",
    "HubNotFoundError",
    "ImmutableKeyError",
    "MANIFEST_NAME",
    "RetryPolicy",
    "SnapshotError",
    "SnapshotRequest",
    "SnapshotResult",
    "TokenError",
    "copy_model",
    "copy_snapshot",
    "part_size_for",
    "plan_parts",
    "read_token",
    "s3_client",
]
