"""Percentiles and summaries of timing samples."""

from collections.abc import Sequence
import math
from typing import Any

NS_PER_US = 1_000
NS_PER_MS = 1_000_000


def percentile(samples: Sequence[float], fraction: float) -> float:
    """Return the nearest-rank percentile (``fraction`` in 0..1) of samples."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def summary_us(samples_ns: Sequence[int]) -> dict[str, Any]:
    """Summarise nanosecond samples in microseconds: p50, p90, p99, mean."""
    if not samples_ns:
        return {"n": 0, "p50_us": math.nan, "p99_us": math.nan}
    return {
        "n": len(samples_ns),
        "p50_us": round(percentile(samples_ns, 0.50) / NS_PER_US, 1),
        "p90_us": round(percentile(samples_ns, 0.90) / NS_PER_US, 1),
        "p99_us": round(percentile(samples_ns, 0.99) / NS_PER_US, 1),
        "mean_us": round(sum(samples_ns) / len(samples_ns) / NS_PER_US, 1),
    }


def summary_ms(samples_s: Sequence[float]) -> dict[str, Any]:
    """Summarise second samples in milliseconds: p50, p99, max."""
    if not samples_s:
        return {"n": 0, "p50_ms": math.nan, "p99_ms": math.nan, "max_ms": math.nan}
    return {
        "n": len(samples_s),
        "p50_ms": round(percentile(samples_s, 0.50) * 1000, 3),
        "p99_ms": round(percentile(samples_s, 0.99) * 1000, 3),
        "max_ms": round(max(samples_s) * 1000, 3),
    }


def ratio(numerator: float, denominator: float) -> float:
    """Return numerator / denominator rounded for a table (nan when undefined)."""
    if denominator <= 0 or math.isnan(numerator) or math.isnan(denominator):
        return math.nan
    return round(numerator / denominator, 3)
