"""ModelCatalog: every pooled model of a stack copied from the Hugging Face Hub into `farm/` of the ModelBucket by
ONE CodeBuild job — CloudFormation O(1) in the number of models.

The catalog (model_download.catalog.Catalog: the one typed definition) travels as an S3 asset; the template
carries only its location and fingerprint, so 10 and 1,000 models synthesize to the same resources and the same
template size. One CodeBuild project runs `python -m model_download catalog` (the copy engine of ModelArtifact:
parallel ranged GETs into sha256-verified multipart uploads, never a partial object; a bounded number of models at
once), one role writes only `farm/` (and reads the catalog object and the token secrets the entries name), one log
group, and one custom resource (`Custom::ModelCatalog`) on the stack's ModelCopyProvider whose isComplete waiter
fails the deployment naming every failed model.

Keys are known at synth (identity hash of repo, file, revision, sha256) and never overwritten: a model whose key
is already there is skipped without asking the Hub, so a redeploy with one new model copies one model. A changed
catalog has a new fingerprint, which re-runs the job. Delete keeps the objects (the bucket is retained).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from cpu_inference.artifacts.copy_job import acknowledge_copy_job, copy_job_project, copy_job_resource, copy_job_role
from cpu_inference.artifacts.copy_provider import ModelCopyProvider
from cpu_inference.artifacts.model_artifact import (
    check_token_secret,
    grant_token_secret,
    import_token_secret,
    project_description,
)
from cpu_inference.artifacts.model_bucket import ModelBucket
from model_download.build_job import MAX_COPY_TIMEOUT_MINUTES
from model_download.buildspec import CATALOG_BUILD_SPEC
from model_download.catalog import (
    FARM_PREFIX,
    Catalog,
    CatalogEntry,
    CatalogError,
    gguf_key,
    mme_key,
    mme_target_model,
    receipt_key,
)
from model_download.catalog_resource import IDENTITY_PROPERTIES, build_environment
from model_download.hub import DEFAULT_ENDPOINT

RESOURCE_TYPE = "Custom::ModelCatalog"


@dataclass(frozen=True)
class ModelCatalogProps:
    """Every pooled model of a stack, copied into `model_bucket` under `farm/`.

    entries: one CatalogEntry per model (name, hf_repo, file, revision, sha256, token_secret_name, engine_args).
    layouts: ⊆ ("gguf", "mme"): `gguf` writes `farm/<name>/<idhash>/<file>` (the EKS pools' Mountpoint volume),
    `mme` a `.tar.gz` of the GGUF + engine.json (a SageMaker multi-model endpoint's TargetModel).
    parallel_models: models copied at once (default 4); concurrency: ranged GETs per model (default 4; memory ≈
    parallel_models × (concurrency + 2) × 16 MiB). copy_timeout_minutes: 5..55 (default 55, inside CloudFormation's
    one hour for a custom resource): a first copy of a very large farm that needs longer is seeded by the project
    itself after `cdk deploy --no-rollback` (`aws codebuild start-build --timeout-in-minutes-override …`; README, "A
    copy longer than the hour") — a re-run skips every model already in place. compute_type / build_image /
    log_retention / hf_endpoint: as ModelArtifactProps. Entries name their token secret by name or complete ARN;
    token_secret_key: the customer-managed KMS key that encrypts those secrets, if any (kms:Decrypt through Secrets
    Manager only, as ModelArtifactProps)."""

    model_bucket: ModelBucket
    entries: tuple[CatalogEntry, ...]
    layouts: tuple[str, ...] = ("gguf",)
    hf_endpoint: str = DEFAULT_ENDPOINT
    parallel_models: int = 4
    concurrency: int = 4
    copy_timeout_minutes: int = 55
    compute_type: codebuild.ComputeType = codebuild.ComputeType.LARGE
    build_image: codebuild.IBuildImage | None = None
    log_retention: logs.RetentionDays = logs.RetentionDays.THREE_MONTHS
    token_secret_key: kms.IKey | None = None
    catalog: Catalog = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "catalog", Catalog(tuple(self.entries), tuple(self.layouts)))

    def validate(self) -> None:
        try:
            self.catalog.validate()
        except CatalogError as exc:
            raise ValueError(f"ModelCatalogProps: {exc}") from None
        if not self.hf_endpoint.startswith(("https://", "http://")):
            raise ValueError(f"ModelCatalogProps.hf_endpoint must be an http(s) URL, got {self.hf_endpoint!r}")
        for entry in self.catalog.entries:
            check_token_secret(f"ModelCatalogProps.entries[{entry.name}].token_secret_name", entry.token_secret_name)
        if self.token_secret_key is not None and not any(e.token_secret_name for e in self.catalog.entries):
            raise ValueError("ModelCatalogProps.token_secret_key applies only when an entry names a token_secret_name")
        if not 1 <= self.parallel_models <= 64:
            raise ValueError(f"ModelCatalogProps.parallel_models must be 1..64, got {self.parallel_models}")
        if not 1 <= self.concurrency <= 64:
            raise ValueError(f"ModelCatalogProps.concurrency must be 1..64, got {self.concurrency}")
        if not 5 <= self.copy_timeout_minutes <= MAX_COPY_TIMEOUT_MINUTES:
            raise ValueError(
                f"ModelCatalogProps.copy_timeout_minutes must be 5..{MAX_COPY_TIMEOUT_MINUTES} (CloudFormation waits at most one hour "
                f"for a custom resource and the deployment stops the job before that; seed a larger first copy by starting the project by hand), got {self.copy_timeout_minutes}"
            )


def _catalog_file(catalog: Catalog) -> Path:
    """The catalog JSON in a content-addressed directory: the asset's hash changes only with the catalog."""
    fingerprint = catalog.fingerprint()
    path = Path(tempfile.gettempdir()) / f"cpu-inference-catalog-{fingerprint[:32]}" / "catalog.json"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{fingerprint[:8]}.tmp")
        tmp.write_text(catalog.to_json())
        tmp.replace(path)
    return path


class ModelCatalog(Construct):
    """Attributes: props, catalog (Catalog), fingerprint, receipt_key (`farm/_receipts/<fingerprint>.json`), prefix
    (`farm/`), model_bucket, bucket (IBucket), resource (the custom resource — depend on it to start serving only
    after every model is in place), role (the job's), project (the CodeBuild job), log_group, catalog_asset,
    token_secrets (name → ISecret), provider (the stack's ModelCopyProvider).
    Keys (known at synth): gguf_key(name), mme_key(name), mme_target_model(name); grant_read(grantee)."""

    def __init__(self, scope: Construct, id: str, *, props: ModelCatalogProps) -> None:
        super().__init__(scope, id)
        props.validate()
        self.props = props
        self.catalog = props.catalog
        self.fingerprint = self.catalog.fingerprint()
        self.receipt_key = receipt_key(self.fingerprint)
        self.prefix = FARM_PREFIX
        self.model_bucket = props.model_bucket
        self.bucket = props.model_bucket.bucket
        self.provider = ModelCopyProvider.of(self)

        self.role = copy_job_role(self, f"Model catalog copy job: writes only {FARM_PREFIX} of the model bucket")
        props.model_bucket.grant_write(self.role, FARM_PREFIX)
        self.catalog_asset = s3_assets.Asset(self, "Catalog", path=str(_catalog_file(self.catalog)))
        # The one catalog object, not the whole asset bucket (Asset.grant_read would add s3:List*/GetBucket*).
        self.role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject"],
                resources=[self.catalog_asset.bucket.arn_for_objects(self.catalog_asset.s3_object_key)],
            )
        )
        self.token_secrets: dict[str, secretsmanager.ISecret] = {}
        names = sorted({e.token_secret_name for e in self.catalog.entries if e.token_secret_name})
        for index, name in enumerate(names):
            secret = import_token_secret(self, f"TokenSecret{index}", name)
            grant_token_secret(secret, props.token_secret_key, self.role)
            self.token_secrets[name] = secret

        properties = {
            "Bucket": self.bucket.bucket_name,
            "CatalogBucket": self.catalog_asset.s3_bucket_name,
            "CatalogKey": self.catalog_asset.s3_object_key,
            "Fingerprint": self.fingerprint,
            "Layouts": list(self.catalog.layouts),
            "HfEndpoint": props.hf_endpoint,
            "ParallelModels": str(props.parallel_models),
            "Concurrency": str(props.concurrency),
        }
        self.log_group, self.project = copy_job_project(
            self,
            provider=self.provider,
            role=self.role,
            description=project_description(
                f"Copies the {len(self.catalog.entries)} pooled models of the catalog into {FARM_PREFIX} of the model bucket"
            ),
            build_spec=CATALOG_BUILD_SPEC,
            environment=build_environment(properties),
            settings=props,
        )

        # O(1) in the number of models: where the catalog is and what it is (its fingerprint); how the job copies
        # (endpoint, parallelism) is only the project's environment and re-runs nothing.
        self.resource = copy_job_resource(
            self,
            provider=self.provider,
            project=self.project,
            role=self.role,
            resource_type=RESOURCE_TYPE,
            properties=properties,
            identity=IDENTITY_PROPERTIES,
        )
        acknowledge_copy_job(self.role, self.project, encrypted="the model objects are encrypted by the bucket's key")

    # -- keys (literals, known at synth) ------------------------------------------------------------------

    def _entry(self, name: str, layout: str) -> CatalogEntry:
        if layout not in self.catalog.layouts:
            raise ValueError(
                f"ModelCatalog {self.node.path}: no {layout!r} layout is copied; add {layout!r} to ModelCatalogProps.layouts"
            )
        try:
            return self.catalog.entry(name)
        except KeyError:
            raise KeyError(f"ModelCatalog {self.node.path}: no model {name!r} in the catalog") from None

    def gguf_key(self, name: str) -> str:
        """`farm/<name>/<idhash>/<file basename>`."""
        return gguf_key(self._entry(name, "gguf"))

    def mme_key(self, name: str) -> str:
        """`farm/<name>/<idhash>-<flags hash>.tar.gz`."""
        return mme_key(self._entry(name, "mme"))

    def mme_target_model(self, name: str) -> str:
        """InvokeEndpoint's TargetModel on a multi-model endpoint whose ModelDataUrl is `s3://<bucket>/farm/`."""
        return mme_target_model(self._entry(name, "mme"))

    def grant_read(self, grantee: iam.IGrantable) -> iam.Grant:
        """Read of `farm/` only (GetObject, ListBucket limited to the prefix, kms:Decrypt): one grant for every
        pooled model, whatever their number."""
        return self.model_bucket.grant_read(grantee, FARM_PREFIX)
