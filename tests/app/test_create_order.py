"""Every shipped config's first deploy, rehearsed (cpu_inference.testing.rehearsal): in every order CloudFormation may
pick, each Kubernetes object's Namespace, CRD, ServiceAccount, Pod Identity association and mounted ConfigMap/Secret
exist before the kubectl handler applies it. (Before review finding F1 was fixed, every EKS config had the
Namespace/NetworkPolicy race and the router's Deployment raced its ServiceAccount and ConfigMap.)"""

from __future__ import annotations

from cpu_inference.testing.rehearsal import assembly_from_templates, create_order, delete_order


def test_the_first_deploy_has_no_create_order_problem(synthesized, config_id: str) -> None:
    s = synthesized[config_id]
    asm = assembly_from_templates({s.stack.stack_name: s.template})
    assert create_order(asm) == [], "\n".join(map(str, create_order(asm)))
    if s.config.target == "eks":
        assert sum(len(st.manifests) for st in asm.stacks.values()) > 5  # the check saw the manifests


def test_a_stack_delete_removes_finalized_objects_before_their_controller(synthesized, config_id: str) -> None:
    """NodePools, EC2NodeClasses and ScaledObjects go before the Karpenter / KEDA charts whose controllers clear their
    finalizers (else `kubectl delete` hangs and Karpenter's nodes outlive the stack)."""
    s = synthesized[config_id]
    assert delete_order(assembly_from_templates({s.stack.stack_name: s.template})) == []
