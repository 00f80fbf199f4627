"""Model artifacts: ModelBucket (the S3 model store) and ModelArtifact (one Hub file copied into it at deploy
time by a sha256-verified, never-half-written CodeBuild job) and ModelCatalog (every pooled model of a stack,
copied AFTER the deploy by batches of such builds that a Step Functions Distributed Map fans out, O(1) in
CloudFormation; one CatalogEntry per model). See README.md beside this file.

The stack's shared copy provider (copy_provider.ModelCopyProvider) is internal: the constructs above create it."""

from cpu_inference.artifacts.model_artifact import ModelArtifact, ModelArtifactProps
from cpu_inference.artifacts.model_bucket import ModelBucket, ModelBucketProps
from cpu_inference.artifacts.model_catalog import ModelCatalog, ModelCatalogProps
from model_download.catalog import CatalogEntry

__all__ = [
    "CatalogEntry",
    "ModelArtifact",
    "ModelArtifactProps",
    "ModelBucket",
    "ModelBucketProps",
    "ModelCatalog",
    "ModelCatalogProps",
]
