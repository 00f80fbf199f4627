"""Test helpers for synthesized stacks: the checks this project's own tests run on every rendered Kubernetes object,
for your snapshot tests too. Plain Python (no jsii): they read the objects (dicts) or a synthesized template (JSON).

- restricted_violations(obj): the Pod Security Standards "restricted" rules (pod_security.py); [] when the object
  passes. has_pod_spec(obj) tells which objects carry a pod template.
- template_objects(template): every object of every KubernetesManifest in a CloudFormation template (flatten:
  one CloudFormation string expression with its intrinsics replaced by "TOKEN");
  load_schemas(dirs) + validate(obj, schemas): an object against its CRD's structural schema and CEL rules
  (crd_validation.py, crd_cel.py; needs the `dev` extra's jsonschema and cel-expr-python). The same as a command:
  `python -m cpu_inference.testing --crds DIR --template cdk.out/Stack.template.json`.

    from cpu_inference.testing import restricted_violations, template_objects
    objs = template_objects(Template.from_stack(stack).to_json())
    assert [v for o in objs for v in restricted_violations(o)] == []

Nothing in the library imports this package but the `cpu-inference plan` command (tests/test_layering.py checks
it)."""

from cpu_inference.testing.crd_validation import flatten, load_schemas, template_objects, validate
from cpu_inference.testing.pod_security import has_pod_spec, restricted_violations

__all__ = ["flatten", "has_pod_spec", "load_schemas", "restricted_violations", "template_objects", "validate"]
