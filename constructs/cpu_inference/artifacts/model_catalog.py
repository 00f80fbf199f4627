"""ModelCatalog: every pooled model of a stack copied from the Hugging Face Hub into `farm/` of the ModelBucket,
OFF the deploy's critical path and fanned out over many CodeBuild builds — CloudFormation O(1) in the number of
models, and a deploy time that does not depend on it.

The catalog (model_download.catalog.Catalog: the one typed definition) travels as an S3 asset, with its work list
(catalog.items_json: a JSON array of the entries' names) as a second asset; the template carries only their
locations and the catalog's fingerprint, so 10 and 1,000 models synthesize to the same resources and the same
template size. One CodeBuild project runs `python -m model_download catalog` (the copy engine of ModelArtifact:
parallel ranged GETs into sha256-verified multipart uploads, never a partial object) over the entries its build is
given; a Step Functions state machine (catalog_fanout.CatalogFanout) reads the work list with a Distributed Map,
batches it and runs one build per batch, a bounded number at once, retrying a batch that failed or hit the
account's build quota, tolerating batches that still fail, and writing per-batch results under `farm/_runs/`. The
deploy only STARTS an execution (on Create and whenever the catalog changes) and never waits for it; each pooled
model becomes servable when its key lands, and a failed one has its failure marker
(`farm/<name>/<idhash>/copy-failed.json`, model_download.catalog.failure_key).

Keys are known at synth (identity hash of repo, file, revision, sha256) and never overwritten: a model whose key is
already there is skipped without asking the Hub, so a redeploy with one new model copies one model. Delete keeps the
objects (the bucket is retained). README.md beside this file: watching progress, re-running failed entries, and
why Step Functions + CodeBuild rather than one long job, Lambda, Fargate, Batch or S3 Batch Operations.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from cpu_inference.artifacts.catalog_fanout import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_MAX_CONCURRENCY,
    FAILED_BATCH_RETRY,
    MAX_BATCH_SIZE,
    MAX_MAX_CONCURRENCY,
    CatalogFanout,
)
from cpu_inference.artifacts.copy_job import acknowledge_copy_job, copy_job_project, copy_job_role
from cpu_inference.artifacts.copy_provider import ModelCopyProvider
from cpu_inference.artifacts.model_artifact import (
    check_token_secret,
    grant_token_secret,
    import_token_secret,
    project_description,
)
from cpu_inference.artifacts.model_bucket import MODELS_PREFIX, ModelBucket
from model_download.build_job import SERVICE_TIMEOUT_SECONDS
from model_download.buildspec import catalog_build_spec, catalog_environment
from model_download.catalog import (
    FARM_PREFIX,
    Catalog,
    CatalogEntry,
    CatalogError,
    failure_key,
    gguf_key,
    items_json,
    mme_key,
    mme_target_model,
)
from model_download.catalog_wait import RESOURCE_TYPE as READY_RESOURCE_TYPE
from model_download.hub import DEFAULT_ENDPOINT

# One build's timeout (CodeBuild timeoutInMinutes: 5..2160, botocore codebuild CreateProject/StartBuild). A build
# copies one batch; nothing of CloudFormation's waits for it.
MIN_BUILD_TIMEOUT_MINUTES = 5
MAX_BUILD_TIMEOUT_MINUTES = 2160
DEFAULT_BUILD_TIMEOUT_MINUTES = 240


@dataclass(frozen=True)
class ModelCatalogProps:
    """Every pooled model of a stack, copied into `model_bucket` under `farm/` after the deploy.

    entries: one CatalogEntry per model (name, hf_repo, file, revision, sha256, token_secret_name, engine_args).
    layouts: ⊆ ("gguf", "mme"): `gguf` writes `farm/<name>/<idhash>/<file>` (the EKS pools' Mountpoint volume),
    `mme` a `.tar.gz` of the GGUF + engine.json (a SageMaker multi-model endpoint's TargetModel).
    batch_size: entries per build (default 10, 1..50); max_concurrency: builds at once (default 4, inside the
    lowest default CodeBuild concurrent-build quota; raise it with the account's quota). parallel_models: models
    copied at once inside a build (default 4); concurrency: ranged GETs per model (default 4; memory ≈
    parallel_models × (concurrency + 2) × 16 MiB). copy_timeout_minutes: one build's (one batch's) timeout,
    5..2160 (default 240). compute_type / build_image / log_retention (the builds' and the state machine's logs) /
    hf_endpoint: as ModelArtifactProps. Entries name their token secret by name or complete ARN; token_secret_key:
    the customer-managed KMS key that encrypts those secrets, if any (kms:Decrypt through Secrets Manager only, as
    ModelArtifactProps). awaited: how many entries, from the first, the deploy waits for (a farm's dedicated
    models, which head the entries so the copy takes them first): ONE Custom::DedicatedModelsReady
    (model_download.catalog_wait) on the stack's ModelCopyProvider, complete when their `gguf` keys (else their
    `mme` keys) are in place, failing within the provider's bound; `ready` is that resource (None for 0)."""

    model_bucket: ModelBucket
    entries: tuple[CatalogEntry, ...]
    layouts: tuple[str, ...] = ("gguf",)
    hf_endpoint: str = DEFAULT_ENDPOINT
    batch_size: int = DEFAULT_BATCH_SIZE
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    parallel_models: int = 4
    concurrency: int = 4
    copy_timeout_minutes: int = DEFAULT_BUILD_TIMEOUT_MINUTES
    compute_type: codebuild.ComputeType = codebuild.ComputeType.LARGE
    build_image: codebuild.IBuildImage | None = None
    log_retention: logs.RetentionDays = logs.RetentionDays.THREE_MONTHS
    token_secret_key: kms.IKey | None = None
    awaited: int = 0
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
        for secret, where in self.catalog.token_secrets().items():
            check_token_secret(f"ModelCatalogProps.entries[{where}].token_secret_name", secret)
        if self.token_secret_key is not None and not self.catalog.token_secrets():
            raise ValueError("ModelCatalogProps.token_secret_key applies only when an entry names a token_secret_name")
        if not 0 <= self.awaited <= len(self.catalog.entries):
            raise ValueError(
                f"ModelCatalogProps.awaited must be 0..{len(self.catalog.entries)} (entries), got {self.awaited}"
            )
        if not 1 <= self.batch_size <= MAX_BATCH_SIZE:
            raise ValueError(f"ModelCatalogProps.batch_size must be 1..{MAX_BATCH_SIZE}, got {self.batch_size}")
        if not 1 <= self.max_concurrency <= MAX_MAX_CONCURRENCY:
            raise ValueError(
                f"ModelCatalogProps.max_concurrency must be 1..{MAX_MAX_CONCURRENCY} (keep it within the account's "
                f"CodeBuild concurrent-build quota), got {self.max_concurrency}"
            )
        if not 1 <= self.parallel_models <= 64:
            raise ValueError(f"ModelCatalogProps.parallel_models must be 1..64, got {self.parallel_models}")
        if not 1 <= self.concurrency <= 64:
            raise ValueError(f"ModelCatalogProps.concurrency must be 1..64, got {self.concurrency}")
        if not MIN_BUILD_TIMEOUT_MINUTES <= self.copy_timeout_minutes <= MAX_BUILD_TIMEOUT_MINUTES:
            raise ValueError(
                f"ModelCatalogProps.copy_timeout_minutes must be {MIN_BUILD_TIMEOUT_MINUTES}..{MAX_BUILD_TIMEOUT_MINUTES} "
                f"(one batch's build; CodeBuild's range), got {self.copy_timeout_minutes}"
            )


def _catalog_file(catalog: Catalog, name: str, text: str) -> Path:
    """A file of the catalog in a content-addressed directory: the asset's hash changes only with the catalog."""
    fingerprint = catalog.fingerprint()
    path = Path(tempfile.gettempdir()) / f"cpu-inference-catalog-{fingerprint[:32]}" / name
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{fingerprint[:8]}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return path


class ModelCatalog(Construct):
    """Attributes: props, catalog (Catalog), fingerprint, prefix (`farm/`), model_bucket, bucket (IBucket),
    resource (the StartExecution custom resource — complete once the copy has STARTED, not finished: a pool that
    depends on it starts while models are still landing), role (the builds'), project (the CodeBuild job),
    log_group (the builds'), catalog_asset, items_asset (the work list), token_secrets (name → ISecret), fanout
    (catalog_fanout.CatalogFanout: state_machine, its log_group, execution_arn).
    Keys (known at synth): gguf_key(name), mme_key(name), mme_target_model(name), failure_key(name);
    grant_read(grantee)."""

    def __init__(self, scope: Construct, id: str, *, props: ModelCatalogProps) -> None:
        super().__init__(scope, id)
        props.validate()
        self.props = props
        self.catalog = props.catalog
        self.fingerprint = self.catalog.fingerprint()
        self.prefix = FARM_PREFIX
        self.model_bucket = props.model_bucket
        self.bucket = props.model_bucket.bucket

        self.role = copy_job_role(self, f"Model catalog copy builds: write only {FARM_PREFIX} of the model bucket")
        props.model_bucket.grant_write(self.role, FARM_PREFIX)
        self.catalog_asset = s3_assets.Asset(
            self, "Catalog", path=str(_catalog_file(self.catalog, "catalog.json", self.catalog.to_json()))
        )
        self.items_asset = s3_assets.Asset(
            self, "Items", path=str(_catalog_file(self.catalog, "items.json", items_json(self.catalog)))
        )
        # The one catalog object, not the whole asset bucket (Asset.grant_read would add s3:List*/GetBucket*).
        self.role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject"],
                resources=[self.catalog_asset.bucket.arn_for_objects(self.catalog_asset.s3_object_key)],
            )
        )
        self.token_secrets: dict[str, secretsmanager.ISecret] = {}
        # Every secret the copy opens a Hub with: the entries' and their bundled adapters' (a gated adapter repo).
        for index, name in enumerate(self.catalog.token_secrets()):
            secret = import_token_secret(self, f"TokenSecret{index}", name)
            grant_token_secret(secret, props.token_secret_key, self.role)
            self.token_secrets[name] = secret

        self.log_group, self.project = copy_job_project(
            self,
            provider=None,
            role=self.role,
            description=project_description(
                # No model count: the template is byte-for-byte the same size whatever the catalog's.
                f"Copies a batch of the catalog's pooled models into {FARM_PREFIX} of the model bucket"
            ),
            build_spec=catalog_build_spec(self.catalog.entries),  # the PEFT converter's setup only when needed
            # Alone (`aws codebuild start-build`), a build copies the whole catalog of the last deploy.
            environment=catalog_environment(
                bucket=self.bucket.bucket_name,
                catalog_bucket=self.catalog_asset.s3_bucket_name,
                catalog_key=self.catalog_asset.s3_object_key,
                fingerprint=self.fingerprint,
                hf_endpoint=props.hf_endpoint,
                parallel_models=props.parallel_models,
                concurrency=props.concurrency,
            ),
            settings=props,
        )
        self.fanout = CatalogFanout(
            self,
            "Copy",
            project=self.project,
            model_bucket=props.model_bucket,
            catalog_asset=self.catalog_asset,
            items_asset=self.items_asset,
            fingerprint=self.fingerprint,
            batch_size=props.batch_size,
            max_concurrency=props.max_concurrency,
            log_retention=props.log_retention,
        )
        # The builds must find their permissions in place before the first one starts.
        self.fanout.start.node.add_dependency(self.role)
        # The start call's CloudFormation resource (AwsCustomResource's own child): what pools depend on, as they
        # depended on the Custom::ModelCatalog before (its default_child is the CfnResource).
        self.resource = self.fanout.start.node.find_child("Resource")
        self.ready = self._ready(props) if props.awaited else None
        acknowledge_copy_job(self.role, self.project, encrypted="the model objects are encrypted by the bucket's key")

    def _ready(self, props: ModelCatalogProps) -> cdk.CustomResource:
        """The deploy's one bounded wait: for the first `awaited` entries' keys (model_download.catalog_wait)."""
        provider = ModelCopyProvider.of(self)
        for fn in (provider.on_event, provider.is_complete):
            # The catalog object, the keys and their failure markers under farm/ (HEAD is s3:GetObject), and the
            # models/ prefix an earlier ModelArtifact copy of a dedicated model wrote (the migration check).
            fn.add_to_role_policy(
                iam.PolicyStatement(
                    actions=["s3:GetObject"],
                    resources=[self.catalog_asset.bucket.arn_for_objects(self.catalog_asset.s3_object_key)],
                )
            )
            props.model_bucket.grant_read(fn, FARM_PREFIX)
            props.model_bucket.grant_read(fn, MODELS_PREFIX)
        ready = cdk.CustomResource(
            self,
            "DedicatedReady",
            service_token=provider.service_token,
            resource_type=READY_RESOURCE_TYPE,
            properties={
                "Bucket": self.bucket.bucket_name,
                "CatalogBucket": self.catalog_asset.s3_bucket_name,
                "CatalogKey": self.catalog_asset.s3_object_key,
                "Fingerprint": self.fingerprint,
                "Dedicated": str(props.awaited),
                # The copy's own attempts (the first + the Map's retries of a failed batch) before the wait fails.
                "FailAfterAttempts": str(1 + int(FAILED_BATCH_RETRY["max_attempts"])),
                "LegacyPrefix": MODELS_PREFIX,
            },
            # CloudFormation's one hour (build_job.SERVICE_TIMEOUT_SECONDS); catalog_wait.WAIT_DEADLINE_SECONDS and
            # the provider's waiter give up before it.
            service_timeout=cdk.Duration.seconds(SERVICE_TIMEOUT_SECONDS),
        )
        ready.node.add_dependency(self.fanout.start)  # the copy has started (dedicated entries first)
        return ready

    # -- keys (literals, known at synth) ------------------------------------------------------------------

    def _entry(self, name: str, layout: str) -> CatalogEntry:
        try:
            entry = self.catalog.entry(name)
        except KeyError:
            raise KeyError(f"ModelCatalog {self.node.path}: no model {name!r} in the catalog") from None
        if layout not in self.catalog.layouts_of(entry):
            raise ValueError(
                f"ModelCatalog {self.node.path}: no {layout!r} layout is copied; add {layout!r} to "
                f"ModelCatalogProps.layouts (or to entry {name!r}'s layouts)"
            )
        return entry

    def gguf_key(self, name: str) -> str:
        """`farm/<name>/<idhash>/<file basename>`."""
        return gguf_key(self._entry(name, "gguf"))

    def mme_key(self, name: str) -> str:
        """`farm/<name>/<idhash>-<flags hash>.tar.gz`."""
        return mme_key(self._entry(name, "mme"))

    def mme_target_model(self, name: str) -> str:
        """InvokeEndpoint's TargetModel on a multi-model endpoint whose ModelDataUrl is `s3://<bucket>/farm/`."""
        return mme_target_model(self._entry(name, "mme"))

    def failure_key(self, name: str) -> str:
        """`farm/<name>/<idhash>/copy-failed.json`: where a failed copy of the model leaves its marker (any layout)."""
        try:
            return failure_key(self.catalog.entry(name))
        except KeyError:
            raise KeyError(f"ModelCatalog {self.node.path}: no model {name!r} in the catalog") from None

    def grant_read(self, grantee: iam.IGrantable) -> iam.Grant:
        """Read of `farm/` only (GetObject, ListBucket limited to the prefix, kms:Decrypt): one grant for every
        pooled model, whatever their number."""
        return self.model_bucket.grant_read(grantee, FARM_PREFIX)
