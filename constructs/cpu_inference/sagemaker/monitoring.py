"""EndpointMonitoring: CloudWatch alarms and a dashboard for one SageMaker endpoint variant.

Metrics: AWS/SageMaker (ModelLatency in microseconds, Invocations, Invocation4XXErrors/5XXErrors,
ConcurrentRequestsPerModel) and /aws/sagemaker/Endpoints (CPUUtilization summed over cores: 0..100 x vCPUs;
MemoryUtilization 0..100), both by EndpointName + VariantName. The endpoint name is a synth-time string,
so nothing here waits on the endpoint resource.

ModelLatency is the container's whole answer (AWS: "the time taken to complete the inference in the container"),
i.e. the whole generation, not the time to the first token: the latency alarm's threshold is a generation budget
(`latency_alarm`, for an engine endpoint the SLO plus its output tokens' decode budget), never the request SLO alone,
which every normal chat answer would exceed. The rule is monitoring/latency.py's; the props compute the threshold.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_sns as sns
from constructs import Construct

from cpu_inference.monitoring import latency

SAGEMAKER = "AWS/SageMaker"
INSTANCE = "/aws/sagemaker/Endpoints"
# The statistics SageMaker documents for the AWS/SageMaker metrics this library reads ("Valid statistics", AWS docs
# "Amazon SageMaker AI metrics in Amazon CloudWatch",
# docs.aws.amazon.com/sagemaker/latest/dg/monitoring-cloudwatch.html: endpoint invocation metrics and multi-model
# endpoint model loading metrics). Percentiles are listed for ModelLatency
# only: an alarm on a statistic CloudWatch does not publish stays in OK forever (treat_missing_data NOT_BREACHING).
_MIN_MAX_AVG_SUM_COUNT = frozenset({"Average", "Sum", "Minimum", "Maximum", "SampleCount"})
PERCENTILES = "percentiles"
VALID_STATISTICS: dict[str, frozenset[str]] = {
    "ModelLatency": _MIN_MAX_AVG_SUM_COUNT | {PERCENTILES},
    "OverheadLatency": _MIN_MAX_AVG_SUM_COUNT,
    "Invocations": frozenset({"Sum"}),
    "Invocation4XXErrors": frozenset({"Average", "Sum"}),
    "Invocation5XXErrors": frozenset({"Average", "Sum"}),
    "ModelLoadingWaitTime": _MIN_MAX_AVG_SUM_COUNT,
    "ModelUnloadingTime": _MIN_MAX_AVG_SUM_COUNT,
    "ModelDownloadingTime": _MIN_MAX_AVG_SUM_COUNT,
    "ModelLoadingTime": _MIN_MAX_AVG_SUM_COUNT,
    "ModelCacheHit": frozenset({"Average", "Sum", "SampleCount"}),
}
_PERCENTILE = re.compile(r"^p\d{1,2}(\.\d+)?$", re.IGNORECASE)


def check_statistic(metric: str, statistic: str) -> None:
    """Refuse a statistic SageMaker does not document for `metric` (metrics not in VALID_STATISTICS pass)."""
    valid = VALID_STATISTICS.get(metric)
    if valid is None:
        return
    kind = PERCENTILES if _PERCENTILE.match(statistic) else statistic
    if kind not in valid:
        raise ValueError(
            f"{metric} has no {statistic} statistic in CloudWatch (SageMaker publishes {', '.join(sorted(valid))})"
        )


ONE_MINUTE = cdk.Duration.minutes(1)
FIVE_MINUTES = cdk.Duration.minutes(5)


def notify(alarms: Iterable[cw.Alarm], topic: sns.ITopic | None) -> None:
    """Send `alarms`' ALARM and OK transitions to `topic` (nothing without one): every endpoint's alarms alike."""
    if topic is None:
        return
    action = cw_actions.SnsAction(topic)
    for alarm in alarms:
        alarm.add_alarm_action(action)
        alarm.add_ok_action(action)


@dataclass(frozen=True)
class MonitoringSettings:
    endpoint_name: str
    variant_name: str
    vcpus: int
    latency_slo: cdk.Duration
    target_concurrency: float | None  # the autoscaling target (None: no autoscaling)
    max_in_flight: int  # slots + queue per instance: beyond it the adapter answers 429
    error_rate_4xx_percent: float = 5.0
    error_rate_5xx_percent: float = 1.0
    utilization_percent: float = 85.0
    alarm_topic: sns.ITopic | None = None
    dashboard: bool = True
    latency_alarm: cdk.Duration | None = None  # p95 ModelLatency the alarm allows (default: latency_slo)
    latency_alarm_basis: str = ""  # how latency_alarm was derived, for the alarm description

    @property
    def latency_alarm_ms(self) -> float:
        if self.latency_alarm is not None:
            return self.latency_alarm.to_milliseconds()
        return latency.latency_alarm(self.latency_slo.to_milliseconds()).threshold_ms


class EndpointMonitoring(Construct):
    """Attributes: settings, alarms (name → Alarm: latency_p95, errors_4xx, errors_5xx, cpu, memory),
    dashboard (Dashboard | None), and the metric helpers below."""

    def __init__(self, scope: Construct, id: str, *, settings: MonitoringSettings) -> None:
        super().__init__(scope, id)
        self.settings = s = settings
        where = f"endpoint {s.endpoint_name} variant {s.variant_name}"
        budget_ms = s.latency_alarm_ms
        basis = f" ({s.latency_alarm_basis})" if s.latency_alarm_basis else ""
        self.alarms: dict[str, cw.Alarm] = {
            "latency_p95": self.metric("ModelLatency", "p95").create_alarm(
                self,
                "LatencyP95",
                alarm_description=f"p95 ModelLatency above {budget_ms:g} ms{basis} on {where}: more capacity (max_capacity) or a smaller model/quantization",
                threshold=budget_ms * 1000,  # ModelLatency is in microseconds
                comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                evaluation_periods=5,
                datapoints_to_alarm=3,
                treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            ),
            "errors_4xx": self.error_rate("4XX").create_alarm(
                self,
                "Errors4xx",
                alarm_description=(
                    f"4xx above {s.error_rate_4xx_percent:g}% of invocations on {where}: 429s mean every instance is "
                    f"full ({s.max_in_flight} in flight) — raise max_capacity; else clients send bad requests"
                ),
                threshold=s.error_rate_4xx_percent,
                comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                evaluation_periods=5,
                datapoints_to_alarm=3,
                treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            ),
            "errors_5xx": self.error_rate("5XX").create_alarm(
                self,
                "Errors5xx",
                alarm_description=f"5xx above {s.error_rate_5xx_percent:g}% of invocations on {where}: engine errors or restarts; see the container log group",
                threshold=s.error_rate_5xx_percent,
                comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                evaluation_periods=5,
                datapoints_to_alarm=3,
                treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            ),
            # CPU inference runs every core flat out while it generates, so only a sustained 15 minutes counts.
            "cpu": self.cpu_percent().create_alarm(
                self,
                "CpuUtilization",
                alarm_description=f"CPU above {s.utilization_percent:g}% of {s.vcpus} vCPUs for 15 minutes on {where}: saturated — raise max_capacity or the target",
                threshold=s.utilization_percent,
                comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                evaluation_periods=3,
                datapoints_to_alarm=3,
                treat_missing_data=cw.TreatMissingData.MISSING,
            ),
            "memory": self.instance_metric("MemoryUtilization").create_alarm(
                self,
                "MemoryUtilization",
                alarm_description=f"Memory above {s.utilization_percent:g}% on {where}: the engine is near OOM — fewer slots, less context or a larger instance",
                threshold=s.utilization_percent,
                comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                evaluation_periods=3,
                datapoints_to_alarm=2,
                treat_missing_data=cw.TreatMissingData.MISSING,
            ),
        }
        notify(self.alarms.values(), s.alarm_topic)
        self.dashboard: cw.Dashboard | None = self._dashboard() if s.dashboard else None

    # -- metrics ----------------------------------------------------------------------------------

    def _dims(self) -> dict[str, str]:
        return {"EndpointName": self.settings.endpoint_name, "VariantName": self.settings.variant_name}

    def metric(self, name: str, statistic: str = "Sum", period: cdk.Duration = ONE_MINUTE, **kw) -> cw.Metric:
        check_statistic(name, statistic)
        return cw.Metric(
            namespace=SAGEMAKER, metric_name=name, dimensions_map=self._dims(), statistic=statistic, period=period, **kw
        )

    def instance_metric(self, name: str, period: cdk.Duration = FIVE_MINUTES) -> cw.Metric:
        return cw.Metric(
            namespace=INSTANCE, metric_name=name, dimensions_map=self._dims(), statistic="Average", period=period
        )

    def model_latency(self, statistic: str = "p95") -> cw.Metric:
        return self.metric("ModelLatency", statistic, label=f"ModelLatency {statistic} (µs)")

    def model_latency_ms(self, statistic: str = "p95") -> cw.MathExpression:
        key = "lat" + statistic.lower().replace(".", "_")
        return cw.MathExpression(
            expression=f"{key} / 1000",
            using_metrics={key: self.model_latency(statistic)},
            label=f"{statistic} (ms)",
            period=ONE_MINUTE,
        )

    def error_rate(self, kind: str) -> cw.MathExpression:
        """Invocation<kind>Errors as a percentage of Invocations (0 while there is no traffic)."""
        return cw.MathExpression(
            expression="IF(FILL(inv, 0) > 0, 100 * FILL(err, 0) / FILL(inv, 0), 0)",
            using_metrics={"err": self.metric(f"Invocation{kind}Errors"), "inv": self.metric("Invocations")},
            label=f"{kind.lower()} % of invocations",
            period=ONE_MINUTE,
        )

    def cpu_percent(self) -> cw.MathExpression:
        """CPUUtilization is summed over cores (0..100 x vCPUs): divided by the vCPUs, 0..100."""
        return cw.MathExpression(
            expression=f"cpu / {self.settings.vcpus}",
            using_metrics={"cpu": self.instance_metric("CPUUtilization")},
            label=f"CPU % of {self.settings.vcpus} vCPUs",
            period=FIVE_MINUTES,
        )

    def concurrency(self, statistic: str = "Average") -> cw.Metric:
        """ConcurrentRequestsPerModel (high resolution): in-flight requests per instance — the scaling signal."""
        return self.metric(
            "ConcurrentRequestsPerModel", statistic, label=f"in flight per instance ({statistic.lower()})"
        )

    # -- dashboard --------------------------------------------------------------------------------

    def _dashboard(self) -> cw.Dashboard:
        s = self.settings
        pct = cw.YAxisProps(min=0, max=100, label="%", show_units=False)
        concurrency_marks = [
            cw.HorizontalAnnotation(
                value=s.max_in_flight, label=f"429 above {s.max_in_flight} (slots + queue)", color=cw.Color.RED
            )
        ]
        if s.target_concurrency is not None:
            concurrency_marks.insert(
                0, cw.HorizontalAnnotation(value=s.target_concurrency, label=f"scaling target {s.target_concurrency:g}")
            )
        dashboard = cw.Dashboard(self, "Dashboard", default_interval=cdk.Duration.hours(3))
        dashboard.add_widgets(
            cw.GraphWidget(
                title="Model latency (ms)",
                width=12,
                left=[self.model_latency_ms("p50"), self.model_latency_ms("p95"), self.model_latency_ms("p99")],
                left_annotations=[
                    cw.HorizontalAnnotation(
                        value=s.latency_alarm_ms, label=f"p95 alarm {s.latency_alarm_ms:g} ms", color=cw.Color.RED
                    )
                ],
                left_y_axis=cw.YAxisProps(min=0, label="ms", show_units=False),
            ),
            cw.GraphWidget(
                title="Invocations and errors (per minute)",
                width=12,
                left=[self.metric("Invocations", label="invocations")],
                right=[
                    self.metric("Invocation4XXErrors", label="4xx (429: full)"),
                    self.metric("Invocation5XXErrors", label="5xx"),
                ],
            ),
        )
        dashboard.add_widgets(
            cw.GraphWidget(
                title="In-flight requests per instance",
                width=12,
                left=[self.concurrency("Average"), self.concurrency("Maximum")],
                left_annotations=concurrency_marks,
                left_y_axis=cw.YAxisProps(min=0, show_units=False),
            ),
            cw.GraphWidget(
                title="CPU and memory (% of instance)",
                width=12,
                left=[self.cpu_percent(), self.instance_metric("MemoryUtilization")],
                left_annotations=[
                    cw.HorizontalAnnotation(
                        value=s.utilization_percent, label=f"alarm {s.utilization_percent:g}%", color=cw.Color.RED
                    )
                ],
                left_y_axis=pct,
            ),
        )
        dashboard.add_widgets(cw.AlarmStatusWidget(title="Alarms", alarms=list(self.alarms.values()), width=24))
        return dashboard
