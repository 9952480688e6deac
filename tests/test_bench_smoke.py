"""The benchmarks still run: ``python -m bench --smoke`` at tiny sizes.

Nothing here is timed and no figure is compared with a limit: the test only
checks that every benchmark produces its figures.
"""

import json
import math
from pathlib import Path
import subprocess
import sys
from typing import Any

import pytest

ROOT = Path(__file__).parent.parent


def _is_number(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
    )


@pytest.mark.slow
@pytest.mark.timeout(450)
def test_bench_smoke(tmp_path: Path) -> None:
    """Every benchmark runs end to end and reports its figures."""
    output = tmp_path / "results.json"
    # Its own process: the benchmarks run their own Home Assistant, event
    # loop, HTTP server and device processes on loopback sockets.
    completed = subprocess.run(  # noqa: S603 - fixed command line
        [
            sys.executable,
            "-m",
            "bench",
            "--smoke",
            "--only",
            "toolcall,handshake,scale,mqtt,voice,arbitration,soak",
            "--output",
            str(output),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert completed.returncode == 0, (
        completed.stdout[-2000:] + completed.stderr[-4000:]
    )
    assert "Targets" in completed.stdout
    results = json.loads(output.read_text(encoding="utf-8"))

    assert results["meta"]["mode"] == "smoke"
    toolcall = results["toolcall"]
    for variant in ("raw", "dispatch", "call", "action", "noop"):
        assert toolcall[variant]["n"] == results_iterations(toolcall)
        assert _is_number(toolcall[variant]["p50_us"])
        assert _is_number(toolcall[variant]["p99_us"])
    for key in ("call_ratio_p50", "action_ratio_p50"):
        assert _is_number(toolcall[key])
    assert toolcall["device_requests"] > 0

    handshake = results["handshake"]
    assert handshake["entities_registered"] > 0
    assert handshake["device_requests"] > 0
    for key in ("net_p50_ms", "gross_p50_ms"):
        assert _is_number(handshake[key])

    (run,) = results["scale"]
    assert run["devices"] == 3
    for key in (
        "rss_per_device_kb",
        "python_per_device_kb",
        "connects_per_s",
        "raw_connects_per_s",
        "burst_s",
    ):
        assert _is_number(run[key])
    assert _is_number(run["lag"]["p99_ms"])
    assert run["requests"]["sent"] > 0
    assert isinstance(run["lost_replies"], int)
    assert isinstance(run["burst_ok"], int)

    # Every scenario on Home Assistant's loop says which callbacks held it.
    for scenario in ("voice", "arbitration", "soak", "scale"):
        measured = results[scenario]
        for run in measured if isinstance(measured, list) else [measured]:
            slow = run["slow_callbacks"]
            assert slow["callbacks"] > 0
            assert isinstance(slow["ours"], int)
    assert "Slow callbacks" in completed.stdout

    voice = results["voice"]
    assert voice["latency"]["turns"] == 2
    assert _is_number(voice["latency"]["text_to_tts_start_ms"]["p50"])
    assert _is_number(voice["latency"]["tts_bytes_to_first_frame_ms"]["p50"])
    assert voice["many"]["conversations"] == 2
    assert voice["many"]["played_frames"] > 0
    assert _is_number(voice["codec"]["conversation"])
    assert voice["udp"]["many"]["played_frames"] > 0
    assert _is_number(voice["udp"]["latency"]["text_to_tts_start_ms"]["p50"])

    arbitration = results["arbitration"]
    start = arbitration["start"]
    assert start["rounds"] == 1
    for variant in (
        "detect",
        "detect_alone",
        "detect_one_silent",
        "no_detect",
        "no_detect_alone",
    ):
        assert start["delay_ms"][variant]["n"] == 1
        assert _is_number(start["delay_ms"][variant]["p50"])
    for variant in ("detect", "detect_one_silent", "no_detect"):
        assert _is_number(start["added_ms"][variant]["p50"])
    assert start["arbitrated"] == 3
    assert start["frames"]["sent"] > 0
    burst = arbitration["burst"]
    assert burst["groups"] == 2
    assert burst["boxes"] == 6
    assert _is_number(burst["lag_ms"]["p99"])
    assert isinstance(burst["nearest_answered"], int)
    assert burst["stood_down"] + burst["answered"] == 6
    assert burst["frames"]["sent"] > 0
    assert isinstance(burst["frames"]["lost"], int)

    mqtt = results["mqtt"]
    assert _is_number(mqtt["endpoint"]["rss_kb"])
    assert mqtt["idle"]["endpoint_connections"] == 3
    assert mqtt["idle"]["requests"]["sent"] > 0
    assert isinstance(mqtt["idle"]["lost_replies"], int)

    soak = results["soak"]
    assert soak["turns"] > 0
    assert soak["tool_calls"] > 0
    assert soak["reconnects"] > 0
    assert _is_number(soak["growth_last_half_mb"])
    assert isinstance(soak["tasks_left"], int)
    assert isinstance(soak["fds_left"], int)

    assert {verdict["target"] for verdict in results["targets"]}
    assert all(isinstance(verdict["met"], bool) for verdict in results["targets"])


def results_iterations(toolcall: dict[str, Any]) -> int:
    """Return how many samples each tool call variant must have."""
    iterations: int = toolcall["iterations"]
    return iterations
