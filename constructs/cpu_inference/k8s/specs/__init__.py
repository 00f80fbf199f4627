"""Typed specs of the custom resources we render (KEDA, Karpenter, Bottlerocket settings, the scrape contract):
frozen dataclasses rendered to dicts and validated against the upstream CRDs' rules. Plain Python, no cdk8s."""
