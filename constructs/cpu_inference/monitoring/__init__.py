"""What we watch and when we page: the Prometheus rule groups and Grafana dashboard of the EKS path (alerts.py)
and the thresholds the SageMaker alarms share with them. Plain Python; the CDK alarms live with their target."""

from cpu_inference.monitoring.alerts import ModelAlertSpec, dashboard, rule_groups, rule_groups_yaml

__all__ = ["ModelAlertSpec", "dashboard", "rule_groups", "rule_groups_yaml"]
