"""Copy a Hugging Face model file into S3, verified and never half-written (plain boto3 + stdlib + urllib3).

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
    "RetryPolicy",
    "TokenError",
    "copy_model",
    "part_size_for",
    "plan_parts",
    "read_token",
    "s3_client",
]
