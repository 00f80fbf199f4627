"""Builders of the pieces every workload is made of: the engine container, the model-fetch init container, the
metrics sidecar, pod hardening, NetworkPolicies, and one model's placement, time budgets and scaling."""
