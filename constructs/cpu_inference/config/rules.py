"""Checks that need more than one key: instance types, fit, pattern wiring, and the AWS decision framework
for CPU inference (warnings: where a GPU or an offline design is the better answer)."""

from __future__ import annotations

import difflib
import math

from cpu_inference import sizing
from cpu_inference.config.problems import Problem
from cpu_inference.config.schema import Config, FarmPool, Model
from cpu_inference.engines import DTYPE_BYTES, LLAMA_CPP
from cpu_inference.engines.adapter_hosting import adapter_hosting_problem, adapter_task_problem
from cpu_inference.engines.pool_preset import preload_problem
from cpu_inference.engines.tasks import GENERATION_TASKS
from cpu_inference.sizing import pools as pool_sizing
from cpu_inference.sizing.slm_context import RouterConfig, decision, slm_context_per_slot
from model_download.catalog import PEFT_WEIGHTS


def model_spec(m: Model, config: Config | None = None) -> sizing.ModelSpec:
    """What sizing needs of `m`; with its `config`, the router's SLM also gets the context its prompt needs."""
    shape = m.shape
    return sizing.ModelSpec(
        parameters_billions=m.parameters_billions,
        quantization=m.quantization,
        context_window=m.context_window,
        task=m.task,
        file_size_bytes=m.source.size_bytes,
        layers=shape.layers if shape else None,
        kv_heads=shape.kv_heads if shape else None,
        head_dim=shape.head_dim if shape else None,
        parallel_slots=m.parallel_slots,
        context_per_slot=m.context_per_slot,
        min_context_per_slot=slm_context_need(config) if config is not None and _is_router_slm(config, m) else None,
        engine=m.engine,
        dtype=m.weights_dtype,
        adapter_bytes=adapter_bytes(m),
    )


def adapter_bytes(m: Model) -> int:
    """The adapters' bytes counted in `m`'s memory (adapters[].size_mb)."""
    return sum(a.size_bytes for a in m.adapters)


def _is_router_slm(config: Config, m: Model) -> bool:
    return config.pattern == "slm-prefilter" and config.role_of(m) == "slm"


def router_decision_config(config: Config) -> RouterConfig:
    """The decision keys of the router config this config renders (the one builder the patterns use too)."""
    r = config.router
    return decision(
        labels=r.labels,
        slm_labels=r.slm_labels,
        confidence_threshold=r.confidence_threshold,
        few_shot=r.few_shot,
        instructions=r.instructions,
        classify_max_chars=r.classify_max_chars,
    )


def router_decision(config: Config) -> dict:
    """router_decision_config as its JSON object."""
    return router_decision_config(config).to_dict()


def slm_context_need(config: Config) -> int:
    """Tokens per slot the router's SLM needs: its classification prompt, and a request plus its answer."""
    return slm_context_per_slot(router_decision_config(config), config.router.answer_max_tokens)


def sagemaker_instance_of(config: Config, m: Model) -> str:
    return m.instance_type or config.sagemaker.instance_type


def pool_instance_of(config: Config, pool: FarmPool) -> str:
    """SageMaker: the instance type of the pool's multi-model endpoint."""
    return pool.instance_type or config.sagemaker.instance_type


def pool_budget(config: Config, pool: FarmPool) -> tuple[float, int]:
    """(vCPUs, memory bytes) of one pool replica: on EKS the pool's cpu and memory_gib (the pod's resources); on
    SageMaker the instance's vCPUs and usable memory (a multi-model endpoint owns its instance)."""
    if config.target == "sagemaker":
        it = sizing.instance(pool_instance_of(config, pool))
        return float(it.vcpus), sizing.usable_memory_bytes(it, target="sagemaker")
    return pool.cpu, int(pool.memory_gib * sizing.GIB)


def plan_pool(config: Config, pool: FarmPool) -> pool_sizing.PoolPlan | None:
    """The sizing of `pool` for the models it serves (None when it serves none)."""
    models = config.pool_models(pool.name)
    if not models:
        return None
    cpu, memory = pool_budget(config, pool)
    return pool_sizing.pool_plan(
        {m.name: model_spec(m, config) for m in models}, cpu=cpu, memory_bytes=memory, models_max=pool.models_max
    )


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
    return Problem(
        path,
        f"{name!r} is not a SageMaker hosting instance type (not in ProductionVariantInstanceType) — use {alt.sagemaker_name} ({alt.vcpus} vCPUs, {alt.memory_gib:g} GiB)",
    )


def _gib(n: int) -> str:
    return f"{n / sizing.GIB:.1f} GiB"


def _mib_ceil(n: int) -> int:
    return math.ceil(n / sizing.MIB) * sizing.MIB


def check(config: Config) -> list[Problem]:
    problems: list[Problem] = []
    problems += _check_instances(config)
    if any(p.severity == "error" for p in problems):
        return _collapse_defaults(problems)  # fit checks need valid instance types
    problems += _check_adapters(config)
    problems += _check_serving(config)
    if any(p.severity == "error" for p in problems):
        return _collapse_defaults(problems)  # pool fit needs every pooled model in an existing pool
    problems += _check_fit(config)
    problems += _check_pools(config)
    problems += _check_pattern(config)
    problems += _check_slm_context(config)
    problems += _decision_framework(config)
    return _collapse_defaults(problems)


def _collapse_defaults(problems: list[Problem]) -> list[Problem]:
    """A key a group's defaults set is wrong for each of its models: say it once at the defaults, with the count."""
    first: dict[tuple[str, str], int] = {}
    repeats: dict[tuple[str, str], int] = {}
    out: list[Problem] = []
    for p in problems:
        key = (p.path, p.severity)
        if ".defaults" not in p.path:
            out.append(p)
        elif key in first:
            repeats[key] = repeats.get(key, 0) + 1
        else:
            first[key] = len(out)
            out.append(p)
    for key, n in repeats.items():
        p = out[first[key]]
        out[first[key]] = Problem(
            p.path, f"{p.message} (and {n} more model{'s' if n > 1 else ''} of this group)", p.severity
        )
    return out


def _check_instances(config: Config) -> list[Problem]:
    out: list[Problem] = []
    sm_types = sizing.sagemaker_instance_types()
    if config.target == "sagemaker":
        if config.sagemaker.instance_type not in sm_types:
            out.append(_not_hosted("sagemaker.instance_type", config.sagemaker.instance_type, sm_types))
        for i, m in enumerate(config.models):
            if m.instance_type and m.instance_type not in sm_types:
                out.append(_not_hosted(config.key_path(i, "instance_type"), m.instance_type, sm_types))
        if config.pattern == "model-farm":
            for k, pool in enumerate(config.farm.pools):
                if pool.instance_type and pool.instance_type not in sm_types:
                    # A multi-model endpoint takes any CPU hosting type: "Multi-model endpoints support all of the CPU
                    # instance types" (docs.aws.amazon.com/sagemaker/latest/dg/multi-model-support.html).
                    out.append(_not_hosted(f"farm.pools[{k}].instance_type", pool.instance_type, sm_types))
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
            out.append(
                Problem(
                    f"eks.instance_types[{i}]",
                    f"{name} is {sizing.CATALOG[name].arch}, not in eks.architectures {eks.architectures} — add the architecture or drop the type",
                )
            )
    if eks.system_instance_type not in sizing.CATALOG:
        out.append(_unknown_instance("eks.system_instance_type", eks.system_instance_type, ec2))
    if config.target == "eks" and not out and not eks_candidates(config):
        out.append(
            Problem(
                "eks.instance_families",
                f"no instance type of these families has an architecture in {eks.architectures} — add a matching family",
            )
        )
    return out


def _check_fit(config: Config) -> list[Problem]:
    """Dedicated models on their own endpoint / node (pooled ones: _check_pools)."""
    out: list[Problem] = []
    for i, m in enumerate(config.models):
        if config.serving_of(m) == "pool":
            continue
        spec = model_spec(m, config)
        if config.target == "sagemaker":
            if m.replicas.min < 1:
                out.append(
                    Problem(
                        config.key_path(i, "replicas") + ".min",
                        "0 is not possible on a SageMaker real-time endpoint — use 1 or more (or target: eks to scale to zero)",
                    )
                )
            s = size_model(config, m)
            assert s is not None
            if not s.fits:
                bigger = sizing.smallest_fitting(
                    spec, [it for it in sizing.CATALOG.values() if it.sagemaker], target="sagemaker"
                )
                fix = (
                    f"use a larger instance such as {bigger.instance.sagemaker_name}"
                    if bigger
                    else "use a smaller model or quantization"
                )
                out.append(
                    Problem(
                        config.model_path(i),
                        f"{m.name} ({m.parameters_billions:g}B {m.weights_label}) needs {_gib(s.memory_needed_bytes)} but {sagemaker_instance_of(config, m)} has {_gib(s.memory_available_bytes)} usable — {fix}",
                    )
                )
            continue
        candidates = eks_candidates(config)
        largest_cpu = max(sizing.usable_vcpus(it, target="eks") for it in candidates)
        if m.cpu is not None and m.cpu > largest_cpu:
            out.append(
                Problem(
                    config.key_path(i, "cpu"),
                    f"{m.cpu:g} vCPUs is more than the largest allowed node can give ({largest_cpu:.1f}) — lower cpu or allow larger instance types",
                )
            )
            continue
        if m.cpu is not None:
            out += _cpu_just_over_a_node(config.key_path(i, "cpu"), m.cpu, candidates)
        if size_model(config, m) is None:
            biggest = max(candidates, key=lambda it: (it.memory_gib, it.vcpus))
            s = sizing.size(spec, biggest, target="eks", cpu=m.cpu)
            if s.memory_needed_bytes <= s.memory_available_bytes:
                out.append(
                    Problem(
                        config.key_path(i, "cpu"),
                        f"{m.name} gets {s.cpu_request:g} vCPUs per replica but the largest allowed node gives {s.cpu_available:g} — set a lower cpu or allow larger instance types",
                    )
                )
            else:
                out.append(
                    Problem(
                        config.model_path(i),
                        f"{m.name} ({m.parameters_billions:g}B {m.weights_label}) needs {_gib(s.memory_needed_bytes)}, more than the largest allowed node ({biggest.name}, {_gib(s.memory_available_bytes)} allocatable) — allow r-family or larger instance types, or a smaller quantization",
                    )
                )
    return out


def _cpu_just_over_a_node(path: str, cpu: float, candidates: list[sizing.InstanceType]) -> list[Problem]:
    """A request equal to a node's vCPU count never fits that node (allocatable = vCPUs − kube-reserved −
    DaemonSets, sizing.usable_vcpus), so Karpenter launches the next size up and half of it idles."""
    near = [it for it in candidates if sizing.usable_vcpus(it, target="eks") < cpu <= it.vcpus]
    if not near:
        return []
    it = min(near, key=lambda x: (x.vcpus, x.memory_gib))
    usable = sizing.usable_vcpus(it, target="eks")
    return [
        Problem(
            path,
            f"{cpu:g} vCPUs does not fit a {it.vcpus}-vCPU node such as {it.name} ({usable:.2f} allocatable), so every replica takes a larger node — use cpu: {int(usable)} to fit it",
            severity="warning",
        )
    ]


def _check_pattern(config: Config) -> list[Problem]:
    out: list[Problem] = []
    roles = {m.name: config.role_of(m) for m in config.models}
    if config.pattern == "slm-prefilter":
        slms = [name for name, role in roles.items() if role == "slm"]
        if not slms:
            out.append(
                Problem(
                    "models",
                    "slm-prefilter needs a model with role: slm (the small model that answers and classifies) — add one",
                )
            )
        elif len(slms) > 1:
            out.append(
                Problem(
                    "models",
                    f"slm-prefilter classifies with one SLM, found {len(slms)} ({', '.join(slms)}) — keep one role: slm and set role: llm on the escalation model",
                )
            )
        if config.escalation is None:
            out.append(
                Problem(
                    "escalation",
                    "required for slm-prefilter — say where hard requests go (kind: openai | sagemaker | bedrock | model)",
                )
            )
        elif config.escalation.kind == "model":
            target = config.escalation.model
            if target not in roles:
                out.append(
                    Problem("escalation.model", f"{target!r} is not a model in models — use one of {', '.join(roles)}")
                )
            elif roles[target] != "llm":
                out.append(
                    Problem(
                        "escalation.model",
                        f"{target!r} has role {roles[target]}, not llm — set role: llm on that model",
                    )
                )
        for i, m in enumerate(config.models):
            if m.task not in GENERATION_TASKS and roles[m.name] in ("slm", "llm"):
                does = "classifies and answers" if roles[m.name] == "slm" else "answers the escalated"
                out.append(
                    Problem(
                        config.key_path(i, "task"),
                        f"{m.task}: the slm-prefilter's {roles[m.name]} {does} chat requests, which a model "
                        f"of task {m.task} cannot (it serves only its own route) — use a generation task "
                        f"({', '.join(GENERATION_TASKS)}), or serve it in a model-farm",
                    )
                )
        default_labels = sorted(config.router.labels) == ["complex", "simple"]
        if not default_labels and config.router.instructions is None:
            out.append(
                Problem(
                    "router.instructions",
                    "the router's default prompt is written for the labels simple/complex — write instructions for your labels ({labels} is replaced by them)",
                    "warning",
                )
            )
        for i, shot in enumerate(config.router.few_shot):
            if set(shot) != {"text", "label"}:
                out.append(Problem(f"router.few_shot[{i}]", "each example needs exactly the keys text and label"))
            elif shot["label"] not in config.router.labels:
                out.append(
                    Problem(
                        f"router.few_shot[{i}].label",
                        f"{shot['label']!r} is not in router.labels {config.router.labels} — use one of them",
                    )
                )
    else:
        for i, m in enumerate(config.models):
            if roles[m.name] != "farm":
                out.append(
                    Problem(
                        config.key_path(i, "role"),
                        f"{roles[m.name]} is for slm-prefilter — use role: farm (or leave it out) in a model farm",
                    )
                )
        if config.escalation is not None:
            out.append(
                Problem(
                    "escalation",
                    "only slm-prefilter escalates — remove escalation or use pattern: slm-prefilter",
                    "warning",
                )
            )
    return out


def _check_slm_context(config: Config) -> list[Problem]:
    """The router's SLM must hold the router's classification prompt (else long requests are refused with a 400
    and escalate: the pre-filter silently stops pre-filtering) and a simple request with its answer."""
    if config.pattern != "slm-prefilter":
        return []
    out: list[Problem] = []
    need = slm_context_need(config)
    chars = config.router.classify_max_chars
    why = (
        f"the router's SLM needs {need} tokens per slot for its classification prompt (instructions + few-shot + "
        f"router.classify_max_chars = {chars or 'the default 2000'} characters of request) and an answer (router.answer_max_tokens)"
    )
    for i, m in enumerate(config.models):
        if not _is_router_slm(config, m):
            continue
        if m.context_per_slot is not None and m.context_per_slot < need:
            out.append(
                Problem(
                    config.key_path(i, "context_per_slot"),
                    f"{m.context_per_slot} is too small: {why} — remove context_per_slot (sizing then uses {need}) or set it ≥ {need}",
                )
            )
        elif m.context_window < need:
            out.append(
                Problem(
                    config.key_path(i, "context_window"),
                    f"{m.context_window} is too small: {why} — raise context_window to ≥ {need} (within the model's trained context) or lower router.classify_max_chars",
                )
            )
    return out


def _decision_framework(config: Config) -> list[Problem]:
    """AWS guidance for CPU inference: warnings where the design is likely wrong for a CPU."""
    out: list[Problem] = []
    for i, m in enumerate(config.models):
        p = config.model_path(i)
        b = m.parameters_billions
        if b >= 70 and m.task != "batch":
            out.append(
                Problem(
                    p,
                    f"{b:g}B on CPU serves ~1–5 tok/s and needs > 40 GB at Q4 — use CPU only offline (task: batch), or a GPU for online traffic",
                    "warning",
                )
            )
        elif 8 <= b < 70 and m.task not in ("batch",):
            out.append(
                Problem(
                    p,
                    f"{b:g}B on CPU suits batch/async use — for interactive p95 targets prefer ≤ 8B or a GPU",
                    "warning",
                )
            )
        if m.quantization in ("BF16", "F16", "F32") and b >= 7:
            out.append(
                Problem(
                    config.key_path(i, "quantization"),
                    f"{m.quantization} for a {b:g}B model is ~4–5× slower than Q4_K_M on CPU — use Q4_K_M (default), Q5_K_M or Q8_0",
                    "warning",
                )
            )
        if m.engine == "vllm":
            out += _vllm_advice(config, i, m)
    if config.slo.p95_latency_ms < 50:
        out.append(
            Problem(
                "slo.p95_latency_ms",
                f"{config.slo.p95_latency_ms} ms p95 is below what CPU inference reaches (100–500 ms) — consider a GPU",
                "warning",
            )
        )
    if config.slo.peak_requests_per_second > 100:
        out.append(
            Problem(
                "slo.peak_requests_per_second",
                f"{config.slo.peak_requests_per_second:g} req/s sustained per endpoint exceeds the CPU sweet spot (< 100) — consider a GPU or sharding",
                "warning",
            )
        )
    return out


def _vllm_advice(config: Config, i: int, m: Model) -> list[Problem]:
    """Where vLLM's CPU backend costs more than it gives (benchmarks/README.md#engines has the measurement): its
    scheduler's reserved CPU on a small pod, and BF16 weights on a model whose decode is bandwidth-bound."""
    out: list[Problem] = []
    cpus = m.cpu if m.cpu is not None else sizing.default_pod_cpu(model_spec(m))
    if config.target == "eks" and cpus < 4:
        out.append(
            Problem(
                config.key_path(i, "cpu"),
                f"engine vllm keeps one CPU for its scheduler, so {cpus:g} vCPUs leave {cpus - 1:g} "
                "for compute (on 2 vCPUs llama.cpp served the same model faster in far less memory: benchmarks/README.md#engines) — "
                "give cpu ≥ 4, or use engine llama.cpp for small pods",
                "warning",
            )
        )
    if m.parameters_billions >= 7:
        ratio = DTYPE_BYTES[m.weights_dtype] * 8 / sizing.BITS_PER_WEIGHT["Q4_K_M"]
        out.append(
            Problem(
                config.key_path(i, "engine"),
                f"{m.weights_dtype} weights of a {m.parameters_billions:g}B model are {ratio:.1f}× the bytes "
                "Q4_K_M reads per generated token, and CPU decode is memory-bandwidth bound — expect a fraction of llama.cpp "
                "Q4_K_M's tokens/s; keep vLLM where its scheduler or AMX/BF16 prefill matters",
                "warning",
            )
        )
    return out


def _check_adapters(config: Config) -> list[Problem]:
    """adapters: where they can be served (a model-farm, a llama.cpp base, engines.adapter_hosting), GGUF or PEFT
    sources, and names unique across every model and adapter (clients send either as `model`; each is a catalog key
    prefix farm/<name>/)."""
    out: list[Problem] = []
    names = {m.name: config.model_path(i) for i, m in enumerate(config.models)}
    for i, m in enumerate(config.models):
        if not m.adapters:
            continue
        where = config.key_path(i, "adapters")
        if m.engine != LLAMA_CPP:
            out.append(
                Problem(
                    where,
                    f"adapters are GGUF LoRA adapters for engine llama.cpp; {m.name} runs engine {m.engine} — remove adapters, or use engine: llama.cpp",
                )
            )
            continue
        if problem := adapter_task_problem(m.task):
            out.append(Problem(where, f"{m.name}: {problem}"))
            continue
        if config.pattern != "model-farm":
            out.append(
                Problem(
                    where,
                    "adapters are served by a model-farm only so far (the slm-prefilter's router calls its models by their own names) — remove adapters, or use pattern: model-farm",
                )
            )
            continue
        problem = adapter_hosting_problem(
            config.target,
            pooled=config.serving_of(m) == "pool",
            hosting=config.farm.dedicated_hosting,
            copy=config.farm.dedicated_copy,
        )
        if problem:
            out.append(Problem(where, f"{m.name}: {problem}"))
            continue
        for j, a in enumerate(m.adapters):
            at = f"{where}[{j}]"
            if a.source.file is not None and a.source.file.startswith("/"):
                out.append(Problem(f"{at}.source.file", "must be a path inside the repo, without a leading '/'"))
            # A PEFT source is converted by the catalog copy on both targets: an adapter entry (EKS) or a member of
            # the base's `lora` bundle (SageMaker), by model_download.peft_convert.convert_peft.
            elif not a.source.peft and not a.source.catalog_file.endswith(".gguf"):
                out.append(
                    Problem(
                        f"{at}.source.file",
                        f"{a.source.file!r} is neither a GGUF adapter (<adapter>.gguf) nor a PEFT adapter's {PEFT_WEIGHTS} — name the .gguf, or leave source.file out for a PEFT repo (adapter_config.json + {PEFT_WEIGHTS}, converted by the catalog copy)",
                    )
                )
            if a.name in names:
                out.append(
                    Problem(
                        f"{at}.name",
                        f"{a.name!r} is already the name of {names[a.name]} — every model and adapter name must be unique (clients send it as `model`)",
                    )
                )
            names.setdefault(a.name, at)
    return out


def _check_serving(config: Config) -> list[Problem]:
    """serving: and pool: of each model, and the pools' own keys (names, replication, SageMaker's instance floor)."""
    out: list[Problem] = []
    farm = config.pattern == "model-farm"
    pools = config.farm.pools
    names = [p.name for p in pools]
    if not farm:
        if "farm" in config.model_fields_set:
            out.append(
                Problem("farm", "only pattern model-farm has pools — remove farm or use pattern: model-farm", "warning")
            )
    else:
        seen: set[str] = set()
        for k, pool in enumerate(pools):
            if pool.name in seen:
                out.append(
                    Problem(
                        f"farm.pools[{k}].name", f"pool name {pool.name!r} appears twice — pool names must be unique"
                    )
                )
            seen.add(pool.name)
            if (
                config.target == "eks" and pool.replication > pool.replicas.max
            ):  # SageMaker routes an MME's invocations itself
                out.append(
                    Problem(
                        f"farm.pools[{k}].replication",
                        f"{pool.replication} is more than the pool's replicas.max ({pool.replicas.max}): each model is routed to `replication` distinct replicas — lower replication or raise replicas.max",
                    )
                )
            if config.target == "sagemaker" and pool.replicas.min < 1:
                # botocore sagemaker ProductionVariant.InitialInstanceCount (shape InitialTaskCount): min 1.
                out.append(
                    Problem(
                        f"farm.pools[{k}].replicas.min",
                        "0 is not possible on a SageMaker multi-model endpoint (InitialInstanceCount ≥ 1) — use 1 or more",
                    )
                )
            elif pool.replicas.min < 1:
                # k8s/charts/model_pool_chart.py: the gateway routes to the pool's stable replica names, so a pool
                # keeps ≥ 1.
                out.append(
                    Problem(
                        f"farm.pools[{k}].replicas.min",
                        "0 is not possible for a pool: a pool keeps at least one replica for the gateway to load its models on — use 1 or more (a model that should scale to zero: serving: dedicated with replicas.min 0)",
                    )
                )
            if config.target == "eks" and pool.instance_type:
                out.append(
                    Problem(
                        f"farm.pools[{k}].instance_type",
                        "only used on SageMaker (on EKS a pool replica is a pod of cpu and memory_gib) — remove it or use target: sagemaker",
                        "warning",
                    )
                )
    for i, m in enumerate(config.models):
        serving = config.serving_of(m)
        if m.serving == "pool" and not (farm and config.role_of(m) == "farm"):
            why = "pattern is slm-prefilter" if not farm else f"its role is {config.role_of(m)}"
            out.append(
                Problem(
                    config.key_path(i, "serving"),
                    f"pool serving is only for farm models of pattern model-farm ({why}) — remove serving (the model gets its own replicas) or use pattern: model-farm",
                )
            )
            continue
        if m.pool is not None and serving != "pool":
            out.append(
                Problem(
                    config.key_path(i, "pool"),
                    f"{m.name} is served dedicated, so pool {m.pool!r} is not used — remove pool, or set serving: pool (model-farm only)",
                )
            )
            continue
        if serving != "pool":
            continue
        if m.pool is not None and m.pool not in names:
            close = difflib.get_close_matches(m.pool, names, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else f"use one of {', '.join(names)} or add it to farm.pools"
            out.append(Problem(config.key_path(i, "pool"), f"{m.pool!r} is not a pool in farm.pools — {hint}"))
            continue
        own = config.pool_of(m)
        assert own is not None
        k = names.index(own.name)
        if config.target == "sagemaker" and m.instance_type:
            out.append(
                Problem(
                    config.key_path(i, "instance_type"),
                    f"{m.name} is served by pool {own.name!r}, one multi-model endpoint on {pool_instance_of(config, own)} (farm.pools[{k}].instance_type) — remove instance_type from the model, set it on the pool, or set serving: dedicated for an endpoint of its own",
                )
            )
        for key, what in (
            ("replicas", "its pool's replicas scale"),
            ("cpu", "its pool's cpu is shared by the loaded models"),
        ):
            if key in m.model_fields_set:
                out.append(
                    Problem(
                        config.key_path(i, key),
                        f"not used for a pooled model ({what}: farm.pools[].{key}) — remove it, or set serving: dedicated to give the model replicas of its own",
                        "warning",
                    )
                )
    return out


def _check_pools(config: Config) -> list[Problem]:
    """Each pool replica fits a node (EKS), and each pooled model fits its pool's memory on its own."""
    if config.pattern != "model-farm":
        return []
    out: list[Problem] = []
    index = {m.name: i for i, m in enumerate(config.models)}
    for k, pool in enumerate(config.farm.pools):
        if config.target == "eks":
            out += _pool_fits_a_node(config, k, pool)
        plan = plan_pool(config, pool)
        out += _check_preload(config, k, pool, plan)
        if plan is None:
            if "farm" in config.model_fields_set:
                out.append(
                    Problem(
                        f"farm.pools[{k}]",
                        f"pool {pool.name!r} serves no model — remove it or set pool: {pool.name} on models",
                        "warning",
                    )
                )
            continue
        room = plan.memory_bytes - pool_sizing.ROUTER_RSS_BYTES
        for name, slots in plan.per_model.items():
            if slots.memory_bytes > room:
                out.append(_pooled_model_too_big(config, index[name], k, pool, slots, room))
        if (
            pool.models_max is not None
            and plan.models_max_fit >= 1
            and min(pool.models_max, len(plan.per_model)) > plan.models_max_fit
        ):
            out.append(
                Problem(
                    f"farm.pools[{k}].models_max",
                    f"{pool.models_max} models at once need up to {_gib(plan.memory_request_bytes)} but a replica has {_gib(plan.memory_bytes)}, room for {plan.models_max_fit} of its largest ({plan.largest_model}) — remove models_max (sizing then uses {plan.models_max_fit}) or give the pool more memory",
                    "warning",
                )
            )
    return out


def _check_preload(config: Config, k: int, pool: FarmPool, plan: pool_sizing.PoolPlan | None) -> list[Problem]:
    """farm.pools[k].preload: EKS only (a SageMaker multi-model endpoint loads what SageMaker decides), the pool's
    own models, at most its models_max (more crash the engine at start: engines/pool_preset.py LOAD_ON_STARTUP)."""
    if not pool.preload:
        return []
    key = f"farm.pools[{k}].preload"
    if config.target == "sagemaker":
        return [
            Problem(
                key,
                "a SageMaker multi-model endpoint loads models on their first invocation, as SageMaker decides — remove preload (it is for target eks)",
            )
        ]
    members = list(plan.per_model) if plan is not None else []
    problem = preload_problem(pool.preload, members, plan.models_max if plan is not None else 0, pool=pool.name)
    return [Problem(key, problem)] if problem else []


def _pool_fits_a_node(config: Config, k: int, pool: FarmPool) -> list[Problem]:
    candidates = eks_candidates(config)
    largest_cpu = max(sizing.usable_vcpus(it, target="eks") for it in candidates)
    biggest = max(candidates, key=lambda it: (it.memory_gib, it.vcpus))
    largest_memory = sizing.usable_memory_bytes(biggest, target="eks")
    out: list[Problem] = []
    if pool.cpu > largest_cpu:
        out.append(
            Problem(
                f"farm.pools[{k}].cpu",
                f"{pool.cpu:g} vCPUs per pool replica is more than the largest allowed node can give ({largest_cpu:.1f}) — lower cpu or allow larger instance types",
            )
        )
    # The replica's pod asks memory_gib's plan + the node's Mountpoint pod allowance (request = limit, whole MiB:
    # ModelPoolChart), and a pod lands only where its requests fit the node's allocatable ("the sum of the resource
    # requests of the scheduled containers is less than the capacity of the node": kubernetes.io/docs/concepts/
    # configuration/manage-resources-containers/, "How Pods with resource requests are scheduled").
    if _mib_ceil(pool_sizing.replica_memory_bytes(int(pool.memory_gib * sizing.GIB))) > largest_memory:
        most = (
            math.floor(
                (largest_memory - pool_sizing.MOUNTPOINT_MEMORY_BYTES) // sizing.MIB * sizing.MIB / sizing.GIB * 10
            )
            / 10
        )
        out.append(
            Problem(
                f"farm.pools[{k}].memory_gib",
                f"{pool.memory_gib:g} GiB per pool replica + {_gib(pool_sizing.MOUNTPOINT_MEMORY_BYTES)} it reserves for the node's Mountpoint pod is more than the largest allowed node "
                f"({biggest.name}, {_gib(largest_memory)} allocatable) — "
                + (f"set farm.pools[{k}].memory_gib to {most:g} or less, or " if most > 0 else "")
                + "allow larger (r-family) instance types",
            )
        )
    return out


def _pooled_model_too_big(
    config: Config, i: int, k: int, pool: FarmPool, slots: pool_sizing.ModelSlots, room: int
) -> Problem:
    m = config.models[i]
    need = f"{m.name} needs {_gib(slots.memory_bytes)} loaded ({slots.parallel} slot(s) of {slots.ctx_per_slot} tokens)"
    others = [p.name for p in config.farm.pools if p.name != pool.name]
    elsewhere = f"move it to another pool (pool: {others[0]}), " if others else ""
    if config.target == "sagemaker":
        fits = [
            it
            for it in sizing.CATALOG.values()
            if it.sagemaker
            and sizing.usable_memory_bytes(it, target="sagemaker") - pool_sizing.ROUTER_RSS_BYTES >= slots.memory_bytes
        ]
        bigger = min(fits, key=lambda it: (it.memory_gib, it.vcpus), default=None)
        raise_it = (
            f"set farm.pools[{k}].instance_type to {bigger.sagemaker_name}" if bigger else "use a smaller quantization"
        )
        return Problem(
            config.model_path(i),
            f"{need} but pool {pool.name!r} runs on {pool_instance_of(config, pool)} with {_gib(room)} for models — {raise_it}, {elsewhere}or set serving: dedicated",
        )
    gib = math.ceil((slots.memory_bytes + pool_sizing.ROUTER_RSS_BYTES) / sizing.GIB)
    return Problem(
        config.model_path(i),
        f"{need} but pool {pool.name!r} has {_gib(room)} for models per replica — raise farm.pools[{k}].memory_gib to {gib} or more, {elsewhere}or set serving: dedicated",
    )
