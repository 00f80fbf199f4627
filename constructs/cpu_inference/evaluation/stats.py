"""Latency/throughput statistics per concurrency level and the p95 search (pure functions)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from cpu_inference.evaluation.client import ChatResult

LATENCY_METRICS = ("e2e", "ttft")


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolation percentile (numpy's default method); None for no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside 0..100")
    data = sorted(values)
    if not data:
        return None
    pos = (len(data) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000, 2)


@dataclass(frozen=True)
class LevelStats:
    concurrency: int
    requests: int
    ok: int
    errors: int
    wall_s: float
    e2e_p50_ms: float | None
    e2e_p95_ms: float | None
    e2e_p99_ms: float | None
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None
    tpot_p95_ms: float | None
    output_tokens: int
    prompt_tokens: int
    qps: float  # successful requests per second, closed loop
    output_tok_s: float
    first_errors: tuple[str, ...] = ()
    rejected: int = 0  # refused for lack of capacity (429/503, SageMaker ModelError 429): overload, not errors

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 1.0

    @property
    def rejected_rate(self) -> float:
        return self.rejected / self.requests if self.requests else 0.0

    def p95_ms(self, metric: str) -> float | None:
        return {"e2e": self.e2e_p95_ms, "ttft": self.ttft_p95_ms}[metric]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["first_errors"] = list(self.first_errors)
        d["error_rate"] = round(self.error_rate, 4)
        d["rejected_rate"] = round(self.rejected_rate, 4)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> LevelStats:
        fields = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        fields["first_errors"] = tuple(fields.get("first_errors", ()))
        return cls(**fields)


def summarize(concurrency: int, results: Iterable[ChatResult]) -> LevelStats:
    results = list(results)
    good = [r for r in results if r.ok]
    if results:
        # Closed-loop wall time: first send to last completion.
        wall = max(r.started + r.e2e_s for r in results) - min(r.started for r in results)
    else:
        wall = 0.0
    e2e = [r.e2e_s for r in good]
    ttft = [r.ttft_s for r in good if r.ttft_s is not None]
    tpot = [t for r in good if (t := r.tpot_s) is not None]
    out_tokens = sum(r.output_tokens or 0 for r in good)
    prompt_tokens = sum(r.prompt_tokens or 0 for r in good)
    errors = [r.error or "unknown error" for r in results if not r.ok and not r.rejected]
    rejected = sum(1 for r in results if not r.ok and r.rejected)
    return LevelStats(
        concurrency=concurrency,
        requests=len(results),
        ok=len(good),
        errors=len(errors),
        wall_s=round(wall, 4),
        e2e_p50_ms=_ms(percentile(e2e, 50)),
        e2e_p95_ms=_ms(percentile(e2e, 95)),
        e2e_p99_ms=_ms(percentile(e2e, 99)),
        ttft_p50_ms=_ms(percentile(ttft, 50)),
        ttft_p95_ms=_ms(percentile(ttft, 95)),
        ttft_p99_ms=_ms(percentile(ttft, 99)),
        tpot_p50_ms=_ms(percentile(tpot, 50)),
        tpot_p95_ms=_ms(percentile(tpot, 95)),
        output_tokens=out_tokens,
        prompt_tokens=prompt_tokens,
        qps=round(len(good) / wall, 4) if wall > 0 else 0.0,
        output_tok_s=round(out_tokens / wall, 3) if wall > 0 else 0.0,
        first_errors=tuple(dict.fromkeys(errors))[:3],
        rejected=rejected,
    )


def meets_target(level: LevelStats, p95_ms: float, *, metric: str = "e2e", max_error_rate: float = 0.0) -> bool:
    """p95 within the target and the unanswered share (errors + overload rejections) within max_error_rate: a
    level the endpoint refuses requests at is beyond its capacity even if what it answered was fast."""
    p95 = level.p95_ms(metric)
    unanswered = level.error_rate + level.rejected_rate
    return level.ok > 0 and p95 is not None and p95 <= p95_ms and unanswered <= max_error_rate


def pick_concurrency(
    levels: Sequence[LevelStats], p95_ms: float, *, metric: str = "e2e", max_error_rate: float = 0.0
) -> LevelStats | None:
    """The highest concurrency whose p95 (of `metric`) meets the target with an acceptable error rate.

    Levels are judged independently: a noisy miss at a low level does not veto a higher level that met
    the target, since each level's p95 is its own measurement."""
    if metric not in LATENCY_METRICS:
        raise ValueError(f"latency metric {metric!r}: expected one of {', '.join(LATENCY_METRICS)}")
    passing = [lv for lv in levels if meets_target(lv, p95_ms, metric=metric, max_error_rate=max_error_rate)]
    return max(passing, key=lambda lv: lv.concurrency, default=None)
