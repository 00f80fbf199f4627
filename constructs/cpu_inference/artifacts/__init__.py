"""Model artifacts: ModelBucket (the S3 model store) and ModelArtifact (one Hub file copied into it at deploy
time by a sha256-verified, never-half-written CodeBuild job). See README.md beside this file."""

from .copy_provider import ModelCopyProvider
from .model_artifact import ModelArtifact, ModelArtifactProps
from .model_bucket import ModelBucket, ModelBucketProps

__all__ = ["ModelArtifact", "ModelArtifactProps", "ModelBucket", "ModelBucketProps", "ModelCopyProvider"]
