"""The cdk8s charts: one served model (llama_server_chart), one multi-model pool (model_pool_chart), the router or
gateway (router_chart), the serving namespace (namespace_chart). They compose specs/ and workloads/."""
