"""Errors the copy job reports as one line each: what failed, for which model, and what to do about it."""

from __future__ import annotations

# Every one-line error the job prints starts with this; the custom resource finds it in the build log and quotes
# the rest as the deployment's failure reason (build_job.job_error_line).
ERROR_PREFIX = "model_download: error: "


class DownloadError(Exception):
    """A copy failed in a way the user can act on; str() is the one-line message."""


class HubAuthError(DownloadError):
    """401/403 from the Hub: missing, rejected or under-privileged token."""


class HubNotFoundError(DownloadError):
    """404 from the Hub: unknown repo, revision or file."""


class HubError(DownloadError):
    """Any other Hub failure (unexpected status, retries exhausted, server ignores Range)."""


class ChecksumMismatchError(DownloadError):
    """The bytes (or the Hub's own hash) do not match the expected sha256; nothing was written."""


class TokenError(DownloadError):
    """The Secrets Manager secret holding the Hugging Face token could not be read."""


class ImmutableKeyError(DownloadError):
    """The destination key already holds other bytes; model keys are never overwritten."""
