"""Command line: ``python -m bench [--smoke] [--only ...] [--profile]``."""

import argparse
import asyncio
from collections.abc import Callable, Coroutine
import cProfile
from dataclasses import dataclass, replace
from datetime import UTC, datetime
import io
import json
import math
import os
from pathlib import Path
import platform
import pstats
import sys
import time
from typing import Any

import aiohttp
from homeassistant import const as ha_const

from . import (
    arbitration,
    handshake,
    harness,
    media,
    mqtt,
    scale,
    soak,
    toolcall,
    update,
    voice,
)
from .device import DeviceScript, build_script
from .report import format_report, judge

RESULTS = Path(__file__).parent / "results.json"
BENCHMARKS = (
    "toolcall",
    "handshake",
    "scale",
    "mqtt",
    "voice",
    "arbitration",
    "update",
    "media",
    "soak",
)
# The soak and media (a 10-minute stream) take minutes: run them with --only.
DEFAULT = (
    "toolcall",
    "handshake",
    "scale",
    "mqtt",
    "voice",
    "arbitration",
    "update",
)


@dataclass(frozen=True, slots=True)
class Sizes:
    """How big each benchmark runs."""

    toolcall_iterations: int
    toolcall_warmup: int
    handshake_iterations: int
    handshake_warmup: int
    scale_sizes: tuple[int, ...]
    keepalive: float
    window: float
    idle_window: float
    voice_codec_seconds: float
    voice_turns: int
    voice_conversations: int
    mqtt_devices: int
    soak_devices: int = 10
    soak_turns: int = 1000
    soak_calls: int = 10_000
    soak_cycles: int = 500
    media_cpu_seconds: float = 60.0
    media_plays: int = 20
    media_streams: int = 10
    media_song_s: float = 10.0
    media_stream_s: float = 600.0
    update_devices: int = 10
    arbitration_rounds: int = 8
    arbitration_groups: int = 20


FULL = Sizes(
    toolcall_iterations=5000,
    toolcall_warmup=500,
    handshake_iterations=100,
    handshake_warmup=5,
    scale_sizes=(10, 100, 500),
    keepalive=1.0,
    window=10.0,
    idle_window=5.0,
    voice_codec_seconds=30.0,
    voice_turns=20,
    voice_conversations=20,
    mqtt_devices=500,
)
SMOKE = Sizes(
    toolcall_iterations=100,
    toolcall_warmup=10,
    handshake_iterations=3,
    handshake_warmup=1,
    scale_sizes=(3,),
    keepalive=0.2,
    window=0.5,
    idle_window=0.2,
    voice_codec_seconds=1.0,
    voice_turns=2,
    voice_conversations=2,
    mqtt_devices=3,
    soak_devices=2,
    soak_turns=20,
    soak_calls=100,
    soak_cycles=20,
    media_cpu_seconds=1.0,
    media_plays=2,
    media_streams=2,
    media_song_s=1.0,
    media_stream_s=2.0,
    update_devices=2,
    arbitration_rounds=1,
    arbitration_groups=2,
)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description="Benchmark the xiaozhi integration."
    )
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes: check that it all runs"
    )
    parser.add_argument(
        "--only",
        default=",".join(DEFAULT),
        help=(
            f"comma-separated benchmarks to run (default: {','.join(DEFAULT)}; "
            "also: media, soak)"
        ),
    )
    parser.add_argument(
        "--sizes", help="comma-separated device counts for scale (default 10,100,500)"
    )
    parser.add_argument(
        "--iterations", type=int, help="rounds of the tool call benchmark"
    )
    parser.add_argument(
        "--devices",
        choices=("process", "inline"),
        default="process",
        help="run scale's devices in a child process (default) or on HA's loop",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="run tool call and handshake under cProfile and print the top entries",
    )
    parser.add_argument(
        "--output", type=Path, default=RESULTS, help=f"results file ({RESULTS})"
    )
    args = parser.parse_args(argv)
    unknown = set(args.only.split(",")) - set(BENCHMARKS)
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    return args


def _profiled[T](
    enabled: bool, label: str, factory: Callable[[], Coroutine[Any, Any, T]]
) -> Callable[[], Coroutine[Any, Any, T]]:
    """Wrap a measurement so that it runs under cProfile when ``enabled``."""
    if not enabled:
        return factory

    async def run() -> T:
        profiler = cProfile.Profile()
        profiler.enable()
        try:
            return await factory()
        finally:
            profiler.disable()
            out = io.StringIO()
            stats = pstats.Stats(profiler, stream=out)
            stats.sort_stats("cumulative").print_stats(40)
            sys.stderr.write(f"\n=== cProfile: {label} (cumulative) ===\n")
            sys.stderr.write(out.getvalue())

    return run


async def _in_process(
    names: set[str], sizes: Sizes, script: DeviceScript, profile: bool
) -> dict[str, Any]:
    """Run the benchmarks that share one Home Assistant in this process."""
    results: dict[str, Any] = {}
    async with harness.home_assistant() as home:
        if "toolcall" in names:
            results["toolcall"] = await _profiled(
                profile,
                "tool call",
                lambda: toolcall.measure(
                    home,
                    script,
                    iterations=sizes.toolcall_iterations,
                    warmup=sizes.toolcall_warmup,
                ),
            )()
        if "handshake" in names:
            results["handshake"] = await _profiled(
                profile,
                "handshake",
                lambda: handshake.measure(
                    home,
                    script,
                    iterations=sizes.handshake_iterations,
                    warmup=sizes.handshake_warmup,
                ),
            )()
    return results


def _meta(args: argparse.Namespace, script: DeviceScript) -> dict[str, Any]:
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "mode": "smoke" if args.smoke else "full",
        "python": platform.python_version(),
        "homeassistant": ha_const.__version__,
        "aiohttp": aiohttp.__version__,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "devices_in": args.devices,
        "device_tools": len(script.tool_names),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the chosen benchmarks, print the table, write the results file."""
    args = _parse_args(argv)
    names = set(args.only.split(","))
    sizes = SMOKE if args.smoke else FULL
    if args.iterations:
        sizes = replace(sizes, toolcall_iterations=args.iterations)
    if args.sizes:
        scale_sizes = tuple(int(part) for part in args.sizes.split(","))
        sizes = replace(sizes, scale_sizes=scale_sizes)
    started = time.perf_counter()
    script = asyncio.run(build_script())
    results: dict[str, Any] = {"meta": _meta(args, script)}
    if names & {"toolcall", "handshake"}:
        results |= harness.run(lambda: _in_process(names, sizes, script, args.profile))
    if "scale" in names:
        params = scale.ScaleParams(
            keepalive=sizes.keepalive,
            window=sizes.window,
            idle_window=sizes.idle_window,
            devices=args.devices,
            separate_tracemalloc=not args.smoke,
        )
        results["scale"] = [
            scale.run_size(n, params, script) for n in sizes.scale_sizes
        ]
    if "mqtt" in names:
        results["mqtt"] = mqtt.measure(
            sizes.mqtt_devices,
            mqtt.IdleParams(
                keepalive=sizes.keepalive,
                window=sizes.window,
                idle_window=sizes.idle_window,
            ),
            script,
        )
    if "voice" in names:
        results["voice"] = harness.run(
            lambda: voice.measure(
                codec_seconds=sizes.voice_codec_seconds,
                turns=sizes.voice_turns,
                conversations=sizes.voice_conversations,
            )
        )
    if "arbitration" in names:
        results["arbitration"] = harness.run(
            lambda: arbitration.measure(
                rounds=sizes.arbitration_rounds, groups=sizes.arbitration_groups
            )
        )
    if "update" in names:
        results["update"] = harness.run(lambda: update.run(sizes.update_devices))
    if "media" in names:
        results["media"] = harness.run(
            lambda: media.measure(
                cpu_seconds=sizes.media_cpu_seconds,
                plays=sizes.media_plays,
                streams=sizes.media_streams,
                song_s=sizes.media_song_s,
                stream_s=sizes.media_stream_s,
            )
        )
    if "soak" in names:
        results["soak"] = harness.run(
            lambda: soak.measure(
                devices=sizes.soak_devices,
                turns=sizes.soak_turns,
                calls=sizes.soak_calls,
                cycles=sizes.soak_cycles,
            )
        )
    results["meta"]["load_after"] = [round(x, 2) for x in os.getloadavg()]
    results["meta"]["duration_s"] = round(time.perf_counter() - started, 1)
    results["targets"] = judge(results)
    args.output.write_text(
        json.dumps(_without_nan(results), indent=2, allow_nan=False) + "\n",
        encoding="utf-8",
    )
    sys.stdout.write(format_report(results))
    sys.stdout.write(f"\nResults written to {args.output}\n")
    return 0


def _without_nan(value: Any) -> Any:
    """Return ``value`` with NaN (no sample) replaced by null, for strict JSON."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: _without_nan(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_without_nan(item) for item in value]
    return value


if __name__ == "__main__":
    sys.exit(main())
