"""Private internals: small helpers with no domain of their own (jsii's Node, where the runtime files are, names
AWS gives a meaning to, a Kubernetes object's identity, CDK tokens in text, cdk-nag acknowledgments). Not API:
import each from its module; each is its own unit in tests/test_layering.py."""
