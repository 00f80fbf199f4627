"""LlamaCppImage: a multi-arch (arm64 + amd64) container image built natively in CodeBuild at deploy
time, published to ECR as one Docker manifest list (Docker v2 schema 2 media types only: SageMaker
refuses OCI manifests), and exposed by digest.

Flow: the build context directory → S3 asset → Step Functions runs one CodeBuild project per
architecture on that architecture's own hosts (no QEMU), then a manifest-list project → a custom
resource (Provider framework, isComplete polling) waits for the execution and returns the digest.
The custom resource's properties carry the context's asset hash, the engine pin and the build
recipe, so a changed Dockerfile, pin or buildspec rebuilds and anything else does not. A failed
build fails the deployment with the failing CodeBuild build, phase and log link in the reason.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from aws_cdk import custom_resources as cr
from constructs import Construct

from cpu_inference._internal.aws_names import VENDED_LOGS_PREFIX
from cpu_inference._internal.nag import acknowledge, acknowledge_wildcards
from cpu_inference._internal.resources import IMAGE_BUILD, runtime_dir
from cpu_inference.images.buildspecs import manifest_buildspec, platform_buildspec
from cpu_inference.images.props import PROVIDER_WAIT_MINUTES, LlamaCppImageProps
from cpu_inference.images.reviewed_wildcards import REVIEWED_WILDCARDS

__all__ = ["LlamaCppImage", "LlamaCppImageProps"]

_ECR_PUSH_ACTIONS = [
    "ecr:BatchCheckLayerAvailability",
    "ecr:BatchGetImage",
    "ecr:CompleteLayerUpload",
    "ecr:DescribeImages",
    "ecr:GetDownloadUrlForLayer",
    "ecr:InitiateLayerUpload",
    "ecr:PutImage",
    "ecr:UploadLayerPart",
]
# botocore logs CreateLogGroup logGroupName: max 512, pattern [\.\-_/#A-Za-z0-9]+.
_LOG_GROUP_NAME_MAX = 512
# The UUID in AWS::StackId (arn:...:stack/<stack name>/<uuid>), distinct for every stack ever created
# (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/pseudo-parameter-reference.html#cfn-pseudo-param-stackid).
_STACK_UUID_CHARS = 36
# Files that change on every local run and never belong in an image.
_DEFAULT_EXCLUDES = ("**/__pycache__", "**/*.pyc", ".git")


def _lambda_code_dir() -> Path:
    return runtime_dir(IMAGE_BUILD)


def _dockerignore(context: Path) -> list[str]:
    path = context / ".dockerignore"
    if not path.is_file():
        return []
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _build_context(props: LlamaCppImageProps) -> tuple[Path, str, list[str]]:
    """The directory shipped as the Docker build context, the Dockerfile's path in it and the asset's exclusions.

    Without shared directories: context_dir itself. With them (the library's images: containers/inference_runtime,
    props.shared_paths()): their common parent (containers/), holding only context_dir and the shared directories, so
    the asset hash covers exactly what the image copies; the Dockerfile then names its files from that root
    (`COPY llama-server/entrypoint.py ...`, `COPY inference_runtime/ ...`). Every sibling is listed by name, so the
    same file set (and hash) comes from a checkout and from a wheel's _bundled/containers."""
    context = props.context_path
    shared = props.shared_paths()
    if not shared:
        # The Dockerfile is always sent to the builder, whatever .dockerignore says.
        return context, props.dockerfile, [*_DEFAULT_EXCLUDES, *_dockerignore(context), f"!{props.dockerfile}"]
    root, name = context.parent, context.name
    keep = {name, *(p.name for p in shared)}
    others = sorted(p.name for p in root.iterdir() if p.name not in keep)
    ignored = [f"!{name}/{line[1:]}" if line.startswith("!") else f"{name}/{line}" for line in _dockerignore(context)]
    dockerfile = f"{name}/{props.dockerfile}"
    return root, dockerfile, [*_DEFAULT_EXCLUDES, *others, *ignored, f"!{dockerfile}"]


class LlamaCppImage(Construct):
    """Builds `props.context_dir` natively for each platform into ECR, by digest, at deploy time.

    Attributes: props, key, repository, context_asset, pin, build_args, content_hash, tag,
    build_log_group, workflow_log_group, handler_log_group, platform_projects (arch → Project),
    manifest_project, state_machine, on_event_function, is_complete_function, provider,
    build (the custom resource), image_digest, image_uri (`<repository uri>@sha256:...` of the manifest list: what
    EKS pulls); `image_uri_for(arch)` / `image_digest_for(arch)`: one architecture's own image (what SageMaker gets).
    """

    def __init__(self, scope: Construct, id: str, *, props: LlamaCppImageProps | None = None) -> None:
        super().__init__(scope, id)
        props = props or LlamaCppImageProps()
        props.validate()
        self.props = props
        self.pin = props.pin()
        self.build_args = props.all_build_args()
        stack = cdk.Stack.of(self)

        self.key: kms.IKey = props.existing_key or self._create_key(stack)
        self.repository: ecr.IRepository = props.existing_repository or self._create_repository()

        root, dockerfile, exclude = _build_context(props)
        self.context_asset = s3_assets.Asset(
            self,
            "Context",
            path=str(root),
            ignore_mode=cdk.IgnoreMode.DOCKER,
            # A user's context may hold symlinks: the asset carries the files they point to (the builder gets no link).
            follow_symlinks=cdk.SymlinkFollowMode.ALWAYS,
            exclude=exclude,
        )

        specs = {
            arch: platform_buildspec(dockerfile=dockerfile, build_args=self.build_args) for arch in props.platforms
        }
        manifest_spec = manifest_buildspec(platforms=props.platforms)
        images = {"arm64": props.arm64_build_image, "amd64": props.amd64_build_image}
        recipe = {
            "platforms": {arch: {"buildspec": specs[arch], "image": images[arch].image_id} for arch in props.platforms},
            "manifest": manifest_spec,
            "computeType": str(props.compute_type.value),
        }
        self.content_hash = hashlib.sha256(
            json.dumps(
                {"context": self.context_asset.asset_hash, "pin": self.pin, "recipe": recipe}, sort_keys=True
            ).encode()
        ).hexdigest()
        self.tag = f"{props.name}-{self.content_hash[:16]}"

        self.build_log_group = self._log_group("BuildLogs")
        self.workflow_log_group = self._log_group("WorkflowLogs", name=self._workflow_log_group_name(stack))
        self.handler_log_group = self._log_group("HandlerLogs")

        self.platform_projects: dict[str, codebuild.Project] = {
            arch: self._project(
                f"Build{arch.capitalize()}",
                description=f"{props.name}: native linux/{arch} image build",
                image=images[arch],
                compute=props.compute_type,
                spec=specs[arch],
                arch=arch,
                timeout=props.build_timeout_minutes,
                needs_context=True,
            )
            for arch in props.platforms
        }
        self.manifest_project = self._project(
            "Manifest",
            description=f"{props.name}: multi-arch Docker manifest list",
            image=images[props.platforms[0]],
            compute=codebuild.ComputeType.SMALL,
            spec=manifest_spec,
            arch=props.platforms[0],
            timeout=props.manifest_timeout_minutes,
            needs_context=False,
        )

        self.state_machine = self._state_machine()
        self._custom_resource()
        self._acknowledge()

    # -- resources -------------------------------------------------------------------------------

    def _create_key(self, stack: cdk.Stack) -> kms.Key:
        key = kms.Key(
            self,
            "Key",
            description=f"{self.props.name} image: ECR repository, CodeBuild projects, build logs",
            enable_key_rotation=True,
            removal_policy=self.props.removal_policy,
        )
        # CloudWatch Logs encrypts the log groups with this key, only for this account's log groups.
        key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchLogsOfThisAccount",
                principals=[iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")],
                actions=["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
                resources=["*"],
                conditions={
                    "ArnLike": {
                        "kms:EncryptionContext:aws:logs:arn": f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:log-group:*"
                    }
                },
            )
        )
        return key

    def _create_repository(self) -> ecr.Repository:
        p = self.props
        return ecr.Repository(
            self,
            "Repository",
            repository_name=p.repository_name,
            image_scan_on_push=True,
            image_tag_mutability=ecr.TagMutability.IMMUTABLE,
            encryption=ecr.RepositoryEncryption.KMS,
            encryption_key=self.key,
            removal_policy=p.removal_policy,
            lifecycle_rules=[
                ecr.LifecycleRule(
                    rule_priority=1,
                    description=f"expire untagged images after {p.untagged_expiry_days} days",
                    tag_status=ecr.TagStatus.UNTAGGED,
                    max_image_age=cdk.Duration.days(p.untagged_expiry_days),
                ),
                ecr.LifecycleRule(
                    rule_priority=2,
                    description=f"keep the images of the last {p.keep_builds} {p.name} builds",
                    tag_status=ecr.TagStatus.TAGGED,
                    tag_prefix_list=[f"{p.name}-"],
                    max_image_count=p.keep_builds * p.tags_per_build(),
                ),
            ],
        )

    def _workflow_log_group_name(self, stack: cdk.Stack) -> str:
        """`/aws/vendedlogs/states/<construct path>-<construct address>-<stack UUID>`.

        Both state machines (the workflow and the Provider's waiter) log here: under VENDED_LOGS_PREFIX Step Functions
        adds nothing to the account's 5,120-character CloudWatch Logs resource policy. The construct path (it starts
        with the stack's id) and address keep two images apart; the stack's UUID keeps a group that `removal_policy`
        RETAINs (also after a failed first create) from blocking the next stack of the same name, as a named
        AWS::Logs::LogGroup that already exists fails the create
        (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-properties-name.html)."""
        stack_uuid = cdk.Fn.select(2, cdk.Fn.split("/", stack.stack_id))
        # The construct path, made of the characters botocore's logGroupName pattern allows, and the construct's
        # address (a hash of that path: unique even when the path reads empty or is cut to fit).
        room = _LOG_GROUP_NAME_MAX - len(VENDED_LOGS_PREFIX) - len("-") - _STACK_UUID_CHARS - len("-") - 8
        path = re.sub(r"[^A-Za-z0-9_-]+", "-", self.node.path).strip("-")[:room]
        readable = f"{path}-{self.node.addr[:8]}" if path else self.node.addr[:8]
        return cdk.Fn.join("", [VENDED_LOGS_PREFIX, readable, "-", stack_uuid])

    def _log_group(self, id: str, *, name: str | None = None) -> logs.LogGroup:
        return logs.LogGroup(
            self,
            id,
            log_group_name=name,
            retention=self.props.log_retention,
            encryption_key=self.key,
            removal_policy=self.props.removal_policy,
        )

    def _project(
        self,
        id: str,
        *,
        description: str,
        image: codebuild.IBuildImage,
        compute: codebuild.ComputeType,
        spec: dict,
        arch: str,
        timeout: int,
        needs_context: bool,
    ) -> codebuild.Project:
        env = codebuild.BuildEnvironmentVariable
        variables = {
            "REPOSITORY_URI": env(value=self.repository.repository_uri),
            "REPOSITORY_NAME": env(value=self.repository.repository_name),
            "ARCH": env(value=arch),
            # The workflow passes the tag too; this default lets a console re-run build the same one.
            "IMAGE_TAG": env(value=self.tag),
        }
        if needs_context:
            variables["CONTEXT_BUCKET"] = env(value=self.context_asset.s3_bucket_name)
            variables["CONTEXT_KEY"] = env(value=self.context_asset.s3_object_key)
        project = codebuild.Project(
            self,
            id,
            description=description,
            # No CodeBuild source: the buildspec fetches the context object itself, so the role reads
            # exactly that object (an S3 source would also grant listing the whole asset bucket).
            environment=codebuild.BuildEnvironment(build_image=image, compute_type=compute, privileged=True),
            environment_variables=variables,
            build_spec=codebuild.BuildSpec.from_object_to_yaml(spec),
            encryption_key=self.key,
            logging=codebuild.LoggingOptions(
                cloud_watch=codebuild.CloudWatchLoggingOptions(log_group=self.build_log_group, prefix=id.lower())
            ),
            cache=codebuild.Cache.local(codebuild.LocalCacheMode.DOCKER_LAYER),
            timeout=cdk.Duration.minutes(timeout),
        )
        if needs_context:
            project.add_to_role_policy(
                iam.PolicyStatement(
                    sid="ReadThisContextOnly",
                    actions=["s3:GetObject"],
                    resources=[self.context_asset.bucket.arn_for_objects(self.context_asset.s3_object_key)],
                )
            )
        project.add_to_role_policy(
            iam.PolicyStatement(
                sid="PushThisRepositoryOnly", actions=_ECR_PUSH_ACTIONS, resources=[self.repository.repository_arn]
            )
        )
        project.add_to_role_policy(
            iam.PolicyStatement(sid="EcrLogin", actions=["ecr:GetAuthorizationToken"], resources=["*"])
        )
        return project

    def _start(self, id: str, project: codebuild.Project, result_path: str | None) -> tasks.CodeBuildStartBuild:
        return tasks.CodeBuildStartBuild(
            self,
            id,
            project=project,
            integration_pattern=sfn.IntegrationPattern.RUN_JOB,
            environment_variables_override={
                "IMAGE_TAG": codebuild.BuildEnvironmentVariable(value=sfn.JsonPath.string_at("$.tag"))
            },
            # Only what the handler reads: the build id and the digests the buildspec exported.
            result_selector={
                "BuildId.$": "$.Build.Id",
                "ExportedEnvironmentVariables.$": "$.Build.ExportedEnvironmentVariables",
            },
            result_path=result_path,
        )

    def _state_machine(self) -> sfn.StateMachine:
        p = self.props
        native = sfn.Parallel(self, "Native builds", result_path="$.platformBuilds")
        for arch, project in self.platform_projects.items():
            native.branch(self._start(f"Build {arch}", project, None))
        manifest = self._start("Manifest list", self.manifest_project, "$.manifestBuild")
        return sfn.StateMachine(
            self,
            "Workflow",
            definition_body=sfn.DefinitionBody.from_chainable(native.next(manifest)),
            timeout=cdk.Duration.minutes(p.build_timeout_minutes + p.manifest_timeout_minutes),
            logs=sfn.LogOptions(destination=self.workflow_log_group, level=sfn.LogLevel.ALL),
            tracing_enabled=True,
        )

    def _handler(self, id: str, handler: str, role: iam.IRole) -> lambda_.Function:
        return lambda_.Function(
            self,
            id,
            runtime=lambda_.Runtime.PYTHON_3_14,
            architecture=lambda_.Architecture.ARM_64,
            handler=handler,
            code=lambda_.Code.from_asset(str(_lambda_code_dir()), exclude=["__pycache__", "*.pyc"]),
            timeout=cdk.Duration.seconds(30),
            memory_size=256,
            role=role,
            log_group=self.handler_log_group,
        )

    def _custom_resource(self) -> None:
        stack = cdk.Stack.of(self)
        handler_role = iam.Role(
            self,
            "HandlerRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"{self.props.name} image build handlers: start and watch this workflow only",
        )
        self.handler_log_group.grant_write(handler_role)
        handler_role.add_to_policy(
            iam.PolicyStatement(
                sid="StartThisWorkflow",
                actions=["states:StartExecution"],
                resources=[self.state_machine.state_machine_arn],
            )
        )
        handler_role.add_to_policy(
            iam.PolicyStatement(
                sid="WatchThisWorkflow",
                actions=["states:DescribeExecution"],
                resources=[
                    stack.format_arn(
                        service="states",
                        resource="execution",
                        resource_name=f"{self.state_machine.state_machine_name}:*",
                        arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
                    )
                ],
            )
        )
        self.on_event_function = self._handler("OnEvent", "handler.on_event", handler_role)
        self.is_complete_function = self._handler("IsComplete", "handler.is_complete", handler_role)

        # Two framework roles: one shared role would make a dependency cycle through the waiter state
        # machine (onEvent starts it; it invokes isComplete).
        framework_roles = {}
        for part in ("OnEvent", "IsComplete"):
            role = iam.Role(
                self,
                f"Provider{part}Role",
                assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
                description=f"{self.props.name} image build: CDK Provider framework {part} function",
            )
            self.handler_log_group.grant_write(role)
            framework_roles[part] = role
        self.provider = cr.Provider(
            self,
            "Provider",
            on_event_handler=self.on_event_function,
            is_complete_handler=self.is_complete_function,
            query_interval=cdk.Duration.seconds(30),
            total_timeout=cdk.Duration.minutes(PROVIDER_WAIT_MINUTES),
            framework_on_event_role=framework_roles["OnEvent"],
            framework_complete_and_timeout_role=framework_roles["IsComplete"],
            log_group=self.handler_log_group,
            disable_waiter_state_machine_logging=False,
            waiter_state_machine_log_options=cr.LogOptions(
                destination=self.workflow_log_group, level=sfn.LogLevel.ALL, include_execution_data=False
            ),
        )
        self.build = cdk.CustomResource(
            self,
            "Build",
            service_token=self.provider.service_token,
            resource_type="Custom::ContainerImageBuild",
            properties={
                "StateMachineArn": self.state_machine.state_machine_arn,
                "RepositoryName": self.repository.repository_name,
                "RepositoryUri": self.repository.repository_uri,
                "Tag": self.tag,
                "ContentHash": self.content_hash,
                "ContextAssetHash": self.context_asset.asset_hash,
                "EnginePin": ";".join(f"{k}={v}" for k, v in self.pin.items()),
            },
        )
        # The builds need their roles' policies (ECR push) before the first one starts.
        self.build.node.add_dependency(*self.platform_projects.values(), self.manifest_project)
        self.image_digest: str = self.build.get_att_string("ImageDigest")
        self.image_uri: str = self.repository.repository_uri_for_digest(self.image_digest)

    # -- public API ------------------------------------------------------------------------------

    def image_digest_for(self, arch: str) -> str:
        """The digest of the single-architecture image (a Docker v2 schema 2 manifest) of `arch`, which the
        manifest list points to: the build returns it as `Digest-<arch>` (lambda/image_build/handler.py)."""
        if arch not in self.props.platforms:
            raise ValueError(
                f"LlamaCppImage {self.props.name}: no {arch} build (platforms: {', '.join(self.props.platforms)})"
            )
        return self.build.get_att_string(f"Digest-{arch}")

    def image_uri_for(self, arch: str) -> str:
        """`<repository uri>@<digest of the arch's own image>`. For SageMaker: no source says CreateModel takes a
        manifest list, and at CreateModel there is no instance type to choose a platform by — the single-arch
        manifest is what it is documented to take (Docker v2 schema 2; OCI refused: aws/amazon-sagemaker-feedback#180).
        EKS pods take `image_uri` (the list): containerd picks the node's platform."""
        return self.repository.repository_uri_for_digest(self.image_digest_for(arch))

    def grant_pull(self, grantee: iam.IGrantable) -> iam.Grant:
        """Pull rights on this repository (plus ecr:GetAuthorizationToken, which has no resource)."""
        return self.repository.grant_pull(grantee)

    # -- cdk-nag ---------------------------------------------------------------------------------

    def _acknowledge(self) -> None:
        for project in [*self.platform_projects.values(), self.manifest_project]:
            acknowledge(
                project,
                "AwsSolutions-CB3",
                "Privileged mode runs Docker inside the build to build and push the image "
                "natively; the project runs only this construct's buildspec on the asset it was given.",
            )
        acknowledge_wildcards(self, REVIEWED_WILDCARDS)
        acknowledge(
            self.provider,
            "AwsSolutions-SF2",
            "The CDK Provider framework's waiter state machine only retries isComplete and offers no X-Ray option; "
            "the build workflow itself has tracing on.",
        )
