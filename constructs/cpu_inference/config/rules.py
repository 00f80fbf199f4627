"""Checks that need more than one key: instance types, fit, pattern wiring, and the AWS decision framework
for CPU inference (warnings: where a GPU or an offline design is the better answer)."""

from __future__ import annotations

import difflib

from .. import sizing
from ..slm_context import decision_config, slm_context_per_slot
from .problems import Problem
from .schema import Config, Model


def model_spec(m: Model, config: Config | None = None) -> sizing.ModelSpec:
    """What sizing needs of `m`; with its `config`, the router's SLM also gets the context its prompt needs."""
    shape = m.shape
    return sizing.ModelSpec(
        parameters_billions=m.parameters_billions, quantization=m.quantization, context_window=m.context_window,
        task=m.task, file_size_bytes=m.source.size_bytes, layers=shape.layers if shape else None,
        kv_heads=shape.kv_heads if shape else None, head_dim=shape.head_dim if shape else None,
        parallel_slots=m.parallel_slots, context_per_slot=m.context_per_slot,
        min_context_per_slot=slm_context_need(config) if config is not None and _is_router_slm(config, m) else None,
    )


def _is_router_slm(config: Config, m: Model) -> bool:
    return config.pattern == "slm-prefilter" and config.role_of(m) == "slm"


def router_decision(config: Config) -> dict:
    """The decision keys of the router config this config renders (the one builder the patterns use too)."""
    r = config.router
    return decision_config(
        labels=r.labels, slm_labels=r.slm_labels, confidence_threshold=r.confidence_threshold, few_shot=r.few_shot,
        instructions=r.instructions, classify_max_chars=r.classify_max_chars,
    )


def slm_context_need(config: Config) -> int:
    """Tokens per slot the router's SLM needs: its classification prompt, and a request plus its answer."""
    return slm_context_per_slot(router_decision(config), config.router.answer_max_tokens)


def sagemaker_instance_of(config: Config, m: Model) -> str:
    return m.instance_type or config.sagemaker.instance_type


def eks_candidates(config: Config) -> list[sizing.InstanceType]:
    """Node types Karpenter may launch for inference pods under this config."""
    eks = config.eks
    if eks.instance_types:
        pool = [sizing.CATALOG[t] for t in eks.instance_types if t in sizing.CATALOG]
    else:
        pool = [it for it in sizing.CATALOG.values() if it.family in eks.instance_families]
    return [it for it in pool if it.arch in eks.architectures]


def size_model(config: Config, m: Model) -> sizing.Sizing | None:
    """The sizing the deployment will use: SageMaker on its instance; EKS on the smallest fitting node."""
    spec = model_spec(m, config)
    if config.target == "sagemaker":
        return sizing.size(spec, sizing.instance(sagemaker_instance_of(config, m)), target="sagemaker")
    return sizing.smallest_fitting(spec, eks_candidates(config), target="eks", cpu=m.cpu)


def _unknown_instance(path: str, name: str, choices: list[str]) -> Problem:
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.7)
    hint = f"did you mean {close[0]}?" if close else "run `cpu-inference size --list` for the catalog"
    return Problem(path, f"unknown instance type {name!r} — {hint}")


def _not_hosted(path: str, name: str, choices: list[str]) -> Problem:
    """A SageMaker instance type that is not a hosting type: a catalog EC2 type SageMaker lacks (ml.m7g.*,
    ml.r7g.*) gets its hosted equivalent, anything else the closest name."""
    alt = sizing.sagemaker_alternative(name)
    if alt is None:
        return _unknown_instance(path, name, choices)
    return Problem(path, f"{name!r} is not a SageMaker hosting instance type (not in ProductionVariantInstanceType) — use {alt.sagemaker_name} ({alt.vcpus} vCPUs, {alt.memory_gib:g} GiB)")


def _gib(n: int) -> str:
    return f"{n / sizing.GIB:.1f} GiB"


def check(config: Config) -> list[Problem]:
    problems: list[Problem] = []
    problems += _check_instances(config)
    if any(p.severity == "error" for p in problems):
        return problems  # fit checks need valid instance types
    problems += _check_fit(config)
    problems += _check_pattern(config)
    problems += _check_slm_context(config)
    problems += _decision_framework(config)
    return problems


def _check_instances(config: Config) -> list[Problem]:
    out: list[Problem] = []
    sm_types = sizing.sagemaker_instance_types()
    if config.target == "sagemaker":
        if config.sagemaker.instance_type not in sm_types:
            out.append(_not_hosted("sagemaker.instance_type", config.sagemaker.instance_type, sm_types))
        for i, m in enumerate(config.models):
            if m.instance_type and m.instance_type not in sm_types:
                out.append(_not_hosted(f"models[{i}].instance_type", m.instance_type, sm_types))
    eks = config.eks
    for i, fam in enumerate(eks.instance_families):
        if fam not in sizing.FAMILIES:
            close = difflib.get_close_matches(fam, sizing.FAMILIES, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}?" if close else f"use one of {', '.join(sizing.FAMILIES)}"
            out.append(Problem(f"eks.instance_families[{i}]", f"unknown instance family {fam!r} — {hint}"))
    ec2 = list(sizing.CATALOG)
    for i, name in enumerate(eks.instance_types):
        if name not in sizing.CATALOG:
            out.append(_unknown_instance(f"eks.instance_types[{i}]", name, ec2))
        elif sizing.CATALOG[name].arch not in eks.architectures:
            out.append(Problem(f"eks.instance_types[{i}]", f"{name} is {sizing.CATALOG[name].arch}, not in eks.architectures {eks.architectures} — add the architecture or drop the type"))
    if eks.system_instance_type not in sizing.CATALOG:
        out.append(_unknown_instance("eks.system_instance_type", eks.system_instance_type, ec2))
    if config.target == "eks" and not out and not eks_candidates(config):
        out.append(Problem("eks.instance_families", f"no instance type of these families has an architecture in {eks.architectures} — add a matching family"))
    return out


def _check_fit(config: Config) -> list[Problem]:
    out: list[Problem] = []
    for i, m in enumerate(config.models):
        spec = model_spec(m, config)
        if config.target == "sagemaker":
            if m.replicas.min < 1:
                out.append(Problem(f"models[{i}].replicas.min", "0 is not possible on a SageMaker real-time endpoint — use 1 or more (or target: eks to scale to zero)"))
            s = size_model(config, m)
            assert s is not None
            if not s.fits:
                bigger = sizing.smallest_fitting(spec, [it for it in sizing.CATALOG.values() if it.sagemaker], target="sagemaker")
                fix = f"use a larger instance such as {bigger.instance.sagemaker_name}" if bigger else "use a smaller model or quantization"
                out.append(Problem(
                    f"models[{i}]",
                    f"{m.name} ({m.parameters_billions:g}B {m.quantization}) needs {_gib(s.memory_needed_bytes)} but {sagemaker_instance_of(config, m)} has {_gib(s.memory_available_bytes)} usable — {fix}",
                ))
            continue
        candidates = eks_candidates(config)
        largest_cpu = max(sizing.usable_vcpus(it, target="eks") for it in candidates)
        if m.cpu is not None and m.cpu > largest_cpu:
            out.append(Problem(f"models[{i}].cpu", f"{m.cpu:g} vCPUs is more than the largest allowed node can give ({largest_cpu:.1f}) — lower cpu or allow larger instance types"))
            continue
        if m.cpu is not None:
            out += _cpu_just_over_a_node(i, m.cpu, candidates)
        if size_model(config, m) is None:
            biggest = max(candidates, key=lambda it: (it.memory_gib, it.vcpus))
            s = sizing.size(spec, biggest, target="eks", cpu=m.cpu)
            if s.memory_needed_bytes <= s.memory_available_bytes:
                out.append(Problem(
                    f"models[{i}].cpu",
                    f"{m.name} gets {s.cpu_request:g} vCPUs per replica but the largest allowed node gives {s.cpu_available:g} — set a lower cpu or allow larger instance types",
                ))
            else:
                out.append(Problem(
                    f"models[{i}]",
                    f"{m.name} ({m.parameters_billions:g}B {m.quantization}) needs {_gib(s.memory_needed_bytes)}, more than the largest allowed node ({biggest.name}, {_gib(s.memory_available_bytes)} allocatable) — allow r-family or larger instance types, or a smaller quantization",
                ))
    return out


def _cpu_just_over_a_node(i: int, cpu: float, candidates: list[sizing.InstanceType]) -> list[Problem]:
    """A request equal to a node's vCPU count never fits that node (allocatable = vCPUs − kube-reserved −
    DaemonSets, sizing.usable_vcpus), so Karpenter launches the next size up and half of it idles."""
    near = [it for it in candidates if sizing.usable_vcpus(it, target="eks") < cpu <= it.vcpus]
    if not near:
        return []
    it = min(near, key=lambda x: (x.vcpus, x.memory_gib))
    usable = sizing.usable_vcpus(it, target="eks")
    return [Problem(
        f"models[{i}].cpu",
        f"{cpu:g} vCPUs does not fit a {it.vcpus}-vCPU node such as {it.name} ({usable:.2f} allocatable), so every replica takes a larger node — use cpu: {int(usable)} to fit it",
        severity="warning",
    )]


def _check_pattern(config: Config) -> list[Problem]:
    out: list[Problem] = []
    roles = {m.name: config.role_of(m) for m in config.models}
    if config.pattern == "slm-prefilter":
        slms = [name for name, role in roles.items() if role == "slm"]
        if not slms:
            out.append(Problem("models", "slm-prefilter needs a model with role: slm (the small model that answers and classifies) — add one"))
        elif len(slms) > 1:
            out.append(Problem("models", f"slm-prefilter classifies with one SLM, found {len(slms)} ({', '.join(slms)}) — keep one role: slm and set role: llm on the escalation model"))
        if config.escalation is None:
            out.append(Problem("escalation", "required for slm-prefilter — say where hard requests go (kind: openai | sagemaker | bedrock | model)"))
        elif config.escalation.kind == "model":
            target = config.escalation.model
            if target not in roles:
                out.append(Problem("escalation.model", f"{target!r} is not a model in models — use one of {', '.join(roles)}"))
            elif roles[target] != "llm":
                out.append(Problem("escalation.model", f"{target!r} has role {roles[target]}, not llm — set role: llm on that model"))
        default_labels = sorted(config.router.labels) == ["complex", "simple"]
        if not default_labels and config.router.instructions is None:
            out.append(Problem("router.instructions", "the router's default prompt is written for the labels simple/complex — write instructions for your labels ({labels} is replaced by them)", "warning"))
        for i, shot in enumerate(config.router.few_shot):
            if set(shot) != {"text", "label"}:
                out.append(Problem(f"router.few_shot[{i}]", "each example needs exactly the keys text and label"))
            elif shot["label"] not in config.router.labels:
                out.append(Problem(f"router.few_shot[{i}].label", f"{shot['label']!r} is not in router.labels {config.router.labels} — use one of them"))
    else:
        for i, m in enumerate(config.models):
            if roles[m.name] != "farm":
                out.append(Problem(f"models[{i}].role", f"{roles[m.name]} is for slm-prefilter — use role: farm (or leave it out) in a model farm"))
        if config.escalation is not None:
            out.append(Problem("escalation", "only slm-prefilter escalates — remove escalation or use pattern: slm-prefilter", "warning"))
    return out


def _check_slm_context(config: Config) -> list[Problem]:
    """The router's SLM must hold the router's classification prompt (else long requests are refused with a 400
    and escalate: the pre-filter silently stops pre-filtering) and a simple request with its answer."""
    if config.pattern != "slm-prefilter":
        return []
    out: list[Problem] = []
    need = slm_context_need(config)
    chars = config.router.classify_max_chars
    why = (f"the router's SLM needs {need} tokens per slot for its classification prompt (instructions + few-shot + "
           f"router.classify_max_chars = {chars or 'the default 2000'} characters of request) and an answer (router.answer_max_tokens)")
    for i, m in enumerate(config.models):
        if not _is_router_slm(config, m):
            continue
        if m.context_per_slot is not None and m.context_per_slot < need:
            out.append(Problem(f"models[{i}].context_per_slot", f"{m.context_per_slot} is too small: {why} — remove context_per_slot (sizing then uses {need}) or set it ≥ {need}"))
        elif m.context_window < need:
            out.append(Problem(f"models[{i}].context_window", f"{m.context_window} is too small: {why} — raise context_window to ≥ {need} (within the model's trained context) or lower router.classify_max_chars"))
    return out


def _decision_framework(config: Config) -> list[Problem]:
    """AWS guidance for CPU inference: warnings where the design is likely wrong for a CPU."""
    out: list[Problem] = []
    for i, m in enumerate(config.models):
        p = f"models[{i}]"
        b = m.parameters_billions
        if b >= 70 and m.task != "batch":
            out.append(Problem(p, f"{b:g}B on CPU serves ~1–5 tok/s and needs > 40 GB at Q4 — use CPU only offline (task: batch), or a GPU for online traffic", "warning"))
        elif 8 <= b < 70 and m.task not in ("batch",):
            out.append(Problem(p, f"{b:g}B on CPU suits batch/async use — for interactive p95 targets prefer ≤ 8B or a GPU", "warning"))
        if m.quantization in ("BF16", "F16", "F32") and b >= 7:
            out.append(Problem(f"{p}.quantization", f"{m.quantization} for a {b:g}B model is ~4–5× slower than Q4_K_M on CPU — use Q4_K_M (default), Q5_K_M or Q8_0", "warning"))
    if config.slo.p95_latency_ms < 50:
        out.append(Problem("slo.p95_latency_ms", f"{config.slo.p95_latency_ms} ms p95 is below what CPU inference reaches (100–500 ms) — consider a GPU", "warning"))
    if config.slo.peak_requests_per_second > 100:
        out.append(Problem("slo.peak_requests_per_second", f"{config.slo.peak_requests_per_second:g} req/s sustained per endpoint exceeds the CPU sweet spot (< 100) — consider a GPU or sharding", "warning"))
    return out
