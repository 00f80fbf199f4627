"""Runtime code every image shares (plain Python: the standard library and the wheels in requirements.txt).

    http1              the HTTP/1.1 layer: the server skeleton of every front (h11 frames the requests), the
                       upstream client's response parsing and keep-alive pool
    sagemaker_adapter  SageMaker's `/ping` + `/invocations` contract in front of an engine on loopback; its settings
                       (adapter_settings) and SageMakerPlan, for both engines
    engine_flags       the llama-server command line from the engine env contract, and the engine's defaults
    llama_flags        one row per llama-server option (flags, variables, preset keys): the library renders from
                       the same rows (cpu_inference imports this module)
    env                numbers from the environment (env_int, env_float) and EngineConfigError, for every image
    privileges         `serve` started as root: check the model is readable, then drop to LLAMA_RUN_AS

One package, one import path (`inference_runtime.<module>`): the llama-server and vLLM images copy it beside their
entrypoint (/opt/llama/inference_runtime, /opt/vllm/app/inference_runtime), the router image onto its PYTHONPATH
(/opt/router/app/inference_runtime); each image's Docker build context is containers/ (its own directory plus this
one: cpu_inference.images.LlamaCppImageProps.shared_dirs). The library's wheel installs it as a package too
(slm_router imports it; the library imports llama_flags and engine_flags' defaults).
"""
