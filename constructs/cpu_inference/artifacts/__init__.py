"""Model artifacts: ModelBucket (the S3 model store) and ModelArtifact (one Hub file copied into it at deploy
time by a sha256-verified, never-half-written CodeBuild job) and ModelCatalog (every pooled model of a stack
copied by one such job, O(1) in CloudFormation; one CatalogEntry per model). See README.md beside this file.

The stack's shared copy provider (copy_provider.ModelCopyProvider) is internal: the constructs above create it."""

from model_download.catalog import CatalogEntry

from .model_artifact import ModelArtifact, ModelArtifactProps
from .model_bucket import ModelBucket, ModelBucketProps
from .model_catalog import ModelCatalog, ModelCatalogProps

__all__ = ["CatalogEntry", "ModelArtifact", "ModelArtifactProps", "ModelBucket", "ModelBucketProps", "ModelCatalog", "ModelCatalogProps"]
