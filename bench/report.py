"""The printed table and the verdict on each target."""

from collections.abc import Callable
import math
from typing import Any

from custom_components.xiaozhi.voice.arbiter import ARBITRATION_WINDOW

type Getter = Callable[[dict[str, Any]], float | None]


def _largest_scale(results: dict[str, Any]) -> dict[str, Any] | None:
    runs = results.get("scale") or []
    return max(runs, key=lambda run: run["devices"]) if runs else None


def _scale_value(key: str, sub: str | None = None) -> Getter:
    def get(results: dict[str, Any]) -> float | None:
        run = _largest_scale(results)
        if run is None:
            return None
        value = run[key]
        return value[sub] if sub is not None else value

    return get


def _nested(bench: str, *keys: str) -> Getter:
    """Return a getter of ``results[bench][key]...`` (None when missing)."""

    def get(results: dict[str, Any]) -> float | None:
        value: Any = results.get(bench)
        for key in keys:
            if not isinstance(value, dict) or key not in value:
                return None
            value = value[key]
        return float(value)

    return get


def _voice(*keys: str) -> Getter:
    return _nested("voice", *keys)


def _arbitration(*keys: str) -> Getter:
    return _nested("arbitration", *keys)


def _wrong_picks(results: dict[str, Any]) -> float | None:
    data = results.get("arbitration")
    if not data:
        return None
    start, burst = data["start"], data["burst"]
    return float(
        start["arbitrated"]
        - start["nearest_answered"]
        + burst["groups"]
        - burst["nearest_answered"]
    )


def _not_idle(results: dict[str, Any]) -> float | None:
    data = results.get("arbitration")
    if not data:
        return None
    burst = data["burst"]
    expected = burst["boxes"] - burst["groups"]
    return float(expected - burst["idle_within_1s"])


def _winner_frames(key: str) -> Getter:
    def get(results: dict[str, Any]) -> float | None:
        data = results.get("arbitration")
        if not data:
            return None
        return float(data["start"]["frames"][key] + data["burst"]["frames"][key])

    return get


def _scenarios(results: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Return each measured scenario's slow-callback figures, by name."""
    found = []
    for name, value in results.items():
        runs = value if isinstance(value, list) else [value]
        for index, run in enumerate(runs):
            if isinstance(run, dict) and "slow_callbacks" in run:
                label = f"{name} {run.get('devices', index)}" if len(runs) > 1 else name
                found.append((label, run["slow_callbacks"]))
    return found


def _slow_callbacks(results: dict[str, Any]) -> float | None:
    scenarios = _scenarios(results)
    if not scenarios:
        return None
    return float(sum(slow["ours"] for _, slow in scenarios))


def _lost(results: dict[str, Any]) -> float | None:
    runs = results.get("scale")
    if not runs:
        return None
    return sum(run["lost_replies"] + run["devices"] - run["burst_ok"] for run in runs)


# Figures reported against what to expect, not gated: a few microseconds over
# a loopback socket are nothing next to a device's Wi-Fi round trip.
# (name, value, comparison, expected, unit)
REPORTED: list[tuple[str, Getter, str, float, str]] = [
    (
        "async_call_tool p50 / raw round trip p50",
        lambda r: r["toolcall"]["call_ratio_p50"] if "toolcall" in r else None,
        "<",
        1.5,
        "x",
    ),
    (
        "xiaozhi.call_tool p50 / (no-op action p50 + raw p50)",
        lambda r: r["toolcall"]["action_ratio_p50"] if "toolcall" in r else None,
        "<",
        1.5,
        "x",
    ),
]

# What a user can feel: gated. (name, value, comparison, limit, unit)
TARGETS: list[tuple[str, Getter, str, float, str]] = [
    (
        "firmware: event loop lag p99, devices updating at once",
        lambda r: r["update"]["lag_ms"]["p99"] if "update" in r else None,
        "<",
        50.0,
        " ms",
    ),
    (
        "media: event loop lag p99, 10 streams",
        lambda r: r["media"]["many"]["lag_ms"]["p99"] if "media" in r else None,
        "<",
        50.0,
        " ms",
    ),
    (
        "media: frames the devices ran dry, 10 streams",
        lambda r: r["media"]["many"]["underruns"] if "media" in r else None,
        "<=",
        0,
        "",
    ),
    (
        "media: memory growth over a long stream",
        lambda r: r["media"]["long"]["growth_mb"] if "media" in r else None,
        "<",
        5.0,
        " MB",
    ),
    (
        "soak: memory growth over the last half",
        lambda r: r["soak"]["growth_last_half_mb"] if "soak" in r else None,
        "<",
        5.0,
        " MB",
    ),
    (
        "soak: tasks left once every device has gone",
        lambda r: r["soak"]["tasks_left"] if "soak" in r else None,
        "<=",
        0,
        "",
    ),
    (
        "soak: file descriptors left once every device has gone",
        lambda r: r["soak"]["fds_left"] if "soak" in r else None,
        "<=",
        0,
        "",
    ),
    (
        "handshake to entities, net of device round trips, p50",
        lambda r: r["handshake"]["net_p50_ms"] if "handshake" in r else None,
        "<=",
        50.0,
        " ms",
    ),
    (
        "event loop lag p99, most devices",
        _scale_value("lag", "p99_ms"),
        "<",
        50.0,
        " ms",
    ),
    (
        "resident memory per device, most devices",
        _scale_value("rss_per_device_kb"),
        "<",
        200.0,
        " KB",
    ),
    ("lost replies and failed burst calls, all sizes", _lost, "==", 0.0, ""),
    (
        "MQTT endpoint: resident memory per idle connection",
        lambda r: r["mqtt"]["endpoint"]["rss_kb"] if "mqtt" in r else None,
        "<",
        20.0,
        " KiB",
    ),
    (
        "MQTT: event loop lag p99, idle devices with keep-alive",
        lambda r: r["mqtt"]["idle"]["lag"]["p99_ms"] if "mqtt" in r else None,
        "<",
        50.0,
        " ms",
    ),
    (
        "MQTT: lost replies",
        lambda r: r["mqtt"]["idle"]["lost_replies"] if "mqtt" in r else None,
        "==",
        0.0,
        "",
    ),
    (
        "voice: STT text to tts start on the wire, p50",
        _voice("latency", "text_to_tts_start_ms", "p50"),
        "<=",
        20.0,
        " ms",
    ),
    (
        "voice: first TTS bytes to first frame on the wire, p50",
        _voice("latency", "tts_bytes_to_first_frame_ms", "p50"),
        "<=",
        20.0,
        " ms",
    ),
    (
        "voice: event loop lag p99, conversations at once",
        _voice("many", "lag_ms", "p99"),
        "<",
        50.0,
        " ms",
    ),
    (
        "voice: frames the devices dropped, conversations at once",
        _voice("many", "dropped"),
        "==",
        0.0,
        "",
    ),
    (
        "voice over UDP: event loop lag p99, conversations at once",
        _voice("udp", "many", "lag_ms", "p99"),
        "<",
        50.0,
        " ms",
    ),
    (
        "voice over UDP: frames the devices dropped",
        _voice("udp", "many", "dropped"),
        "==",
        0.0,
        "",
    ),
    (
        "voice over UDP: STT text to tts start on the wire, p50",
        _voice("udp", "latency", "text_to_tts_start_ms", "p50"),
        "<=",
        20.0,
        " ms",
    ),
    (
        "arbitration: added to a wake word start, every box heard it, p50",
        _arbitration("start", "added_ms", "detect", "p50"),
        "<=",
        60.0,
        " ms",
    ),
    (
        "arbitration: added to a wake word start, one box silent, p50",
        _arbitration("start", "added_ms", "detect_one_silent", "p50"),
        "<=",
        ARBITRATION_WINDOW * 1000,
        " ms",
    ),
    (
        "arbitration: added to a start without detect, p50",
        _arbitration("start", "added_ms", "no_detect", "p50"),
        "<=",
        20.0,
        " ms",
    ),
    (
        "arbitration: rounds where another box than the nearest answered",
        _wrong_picks,
        "==",
        0.0,
        "",
    ),
    (
        "arbitration: stood-down boxes not idle within 1 s, areas at once",
        _not_idle,
        "==",
        0.0,
        "",
    ),
    (
        "arbitration: winners' frames lost before speech-to-text",
        _winner_frames("lost"),
        "==",
        0.0,
        "",
    ),
    (
        "arbitration: frames speech-to-text heard that were not said",
        _winner_frames("extra"),
        "==",
        0.0,
        "",
    ),
    (
        "arbitration: event loop lag p99, areas waking at once",
        _arbitration("burst", "lag_ms", "p99"),
        "<",
        50.0,
        " ms",
    ),
    (
        "slow callbacks of ours (> 20 ms on the loop), every scenario",
        _slow_callbacks,
        "==",
        0.0,
        "",
    ),
    (
        "voice: a conversation's CPU, share of one core",
        _voice("codec", "conversation"),
        "<",
        0.1,
        "",
    ),
]


def judge(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Return, per figure, the measured value and whether it is as expected.

    Targets are gated (``gated``); reported figures only say how they compare.
    """
    verdicts = []
    for (name, get, comparison, limit, unit), gated in [
        *((row, False) for row in REPORTED),
        *((row, True) for row in TARGETS),
    ]:
        value = get(results)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        met = {
            "<=": value <= limit,
            "<": value < limit,
            "==": value == limit,
        }[comparison]
        verdicts.append(
            {
                "target": name,
                "value": value,
                "limit": f"{comparison} {limit:g}{unit}",
                "met": met,
                "gated": gated,
            }
        )
    return verdicts


def _media(data: dict[str, Any]) -> list[str]:
    cpu, first, many, long = data["cpu"], data["first_page"], data["many"], data["long"]
    ours, plain = first["play_media_to_first_page_ms"], first["baseline_plain_fetch_ms"]
    return [
        "Media (idle MQTT + UDP device with notify)",
        (
            f"  CPU per stream, share of one core: transcode "
            f"{_num(cpu['transcode_share'] * 100, 2)} %, decoding alone "
            f"{_num(cpu['decode_only_share'] * 100, 2)} % "
            f"({_num(cpu['audio_s'])} s of MP3)"
        ),
        (
            f"  play_media -> first Ogg page, {first['plays']} plays: p50 "
            f"{_num(ours['p50'])} ms, p99 {_num(ours['p99'])} ms; baseline, "
            f"the device fetching a ready file: p50 {_num(plain['p50'])} ms"
        ),
        (
            f"  {many['streams']} streams at once: lag p99 "
            f"{_num(many['lag_ms']['p99'])} ms, underruns {many['underruns']}, "
            f"incomplete {many['incomplete']}, frames played "
            f"{many['played_frames']}, deepest device queue "
            f"{many['max_device_queue']}"
        ),
        (
            f"  {_num(long['stream_s'])} s stream: memory {_num(long['rss_start_mb'])}"
            f" -> {_num(long['rss_end_mb'])} MB (growth "
            f"{_num(long['growth_mb'], 2)} MB), underruns {long['underruns']}"
        ),
    ]


def _soak(data: dict[str, Any]) -> list[str]:
    rss = data["rss_mb"]
    return [
        (
            f"Soak: {data['turns']} conversations, {data['tool_calls']} tool calls, "
            f"{data['reconnects']} reconnects with {data['devices']} devices"
        ),
        (
            "  resident memory at the end of each phase, MB: "
            + ", ".join(f"{phase} {_num(value)}" for phase, value in rss.items())
        ),
        (
            "  Python blocks held per conversation at the voice phase's end "
            "(Home Assistant keeps TTS results and chat sessions five minutes): "
            f"{_num(data['blocks_per_turn'])}"
        ),
        (
            "  growth over the last half of the samples: "
            f"{_num(data['growth_last_half_mb'], 2)} MB; tasks left "
            f"{data['tasks_left']}, file descriptors left {data['fds_left']}"
        ),
        (
            "  samples (phase, done, MB): "
            + "; ".join(
                f"{row['phase']} {row['done']} {_num(row['rss_mb'])}"
                for row in data["samples"]
            )
        ),
    ]


def _num(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}f}"


def _toolcall(data: dict[str, Any]) -> list[str]:
    rows = [
        (
            f"Tool call: {data['iterations']} interleaved rounds after "
            f"{data['warmup']} warm-up, microseconds"
        ),
        f"  {'variant':<44}{'p50':>9}{'p90':>9}{'p99':>9}{'mean':>9}",
    ]
    labels = {
        "raw": "raw aiohttp round trip (baseline)",
        "dispatch": "raw + reader task dispatching by id",
        "call": "async_call_tool (set_volume)",
        "action": "xiaozhi.call_tool action",
        "noop": "no-op action, same shape (baseline)",
    }
    for key, label in labels.items():
        s = data[key]
        rows.append(
            f"  {label:<44}{_num(s['p50_us']):>9}{_num(s['p90_us']):>9}"
            f"{_num(s['p99_us']):>9}{_num(s['mean_us']):>9}"
        )
    rows.append(
        f"  async_call_tool / raw: p50 {_num(data['call_ratio_p50'], 2)}x, "
        f"p99 {_num(data['call_ratio_p99'], 2)}x; / raw with reader task: "
        f"p50 {_num(data['call_dispatch_ratio_p50'], 2)}x"
    )
    rows.append(
        f"  action / (no-op + raw): p50 {_num(data['action_ratio_p50'], 2)}x, "
        f"p99 {_num(data['action_ratio_p99'], 2)}x"
    )
    return rows


def _handshake(data: dict[str, Any]) -> list[str]:
    rows = [
        (
            f"Handshake: {data['iterations']} rounds; {data['tools']} tools in "
            f"{data['tools_list_pages']} tools/list page(s), "
            f"{data['entities_registered']} entities ({data['entities_enabled']} "
            f"enabled), {data['device_requests']} device requests; milliseconds "
            "from dialling"
        ),
        f"  {'phase':<44}{'p50':>9}{'p90':>9}{'p99':>9}",
    ]
    labels = {
        "raw_connect": "raw aiohttp connect + hello (baseline)",
        "hello": "connected, hello exchanged",
        "answered": "device sent its last reply",
        "entities": "all entities registered, with states",
        "net": "  the same, minus device round trips",
    }
    for key, label in labels.items():
        s = data[key]
        rows.append(
            f"  {label:<44}{_num(s['p50_us'] / 1000, 2):>9}"
            f"{_num(s['p90_us'] / 1000, 2):>9}{_num(s['p99_us'] / 1000, 2):>9}"
        )
    rows.append(
        f"  raw round trip used for the device's share: "
        f"{_num(data['raw_rtt']['p50_us'])} us x {data['device_requests']}"
    )
    return rows


SCALE_NOTES = (
    "lag: how late a 10 ms ticker wakes while keep-alives flow; gc max: longest",
    "garbage collection meanwhile; idle: the same loop, no device connected;",
    "RSS/dev: VmRSS growth over the first connection (entities created), per device;",
    "Py/dev: tracemalloc bytes of that step (separate, identical run);",
    "entry: VmRSS per paired, unconnected entry;",
    "conn/s: reconnect of all devices until every session is ready;",
    "raw/s: the same fleet dialling a bare aiohttp server; ratio: HA time / raw time;",
    "cold s: first connection of all devices, entities created;",
    "burst: one concurrent async_call_tool per device, all at once;",
    "sent: requests Home Assistant sent (keep-alives + burst); lost: unanswered",
    "requests + failed burst calls.",
)


def _scale_row(run: dict[str, Any]) -> str:
    return (
        f"  {run['devices']:>7} {_num(run['lag']['p50_ms'], 2):>8}"
        f" {_num(run['lag']['p99_ms'], 2):>8}"
        f" {_num(run['lag']['max_ms'], 1):>8}"
        f" {_num(run['gc_in_window']['max_ms'], 1):>7}"
        f" {_num(run['idle_lag']['p99_ms'], 2):>8}"
        f" {_num(run['rss_per_device_kb']):>8}"
        f" {_num(run['python_per_device_kb']):>7}"
        f" {_num(run['rss_per_entry_kb']):>7}"
        f" {_num(run['connects_per_s'], 0):>7}"
        f" {_num(run['raw_connects_per_s'], 0):>7}"
        f" {_num(run['connect_ratio'], 2):>6}"
        f" {_num(run['cold_connect_s'], 2):>7}"
        f" {_num(run['burst_s'] * 1000, 1):>8}"
        f" {run['requests']['sent']:>6}"
        f" {run['lost_replies'] + run['devices'] - run['burst_ok']:>5}"
    )


def _scale(runs: list[dict[str, Any]]) -> list[str]:
    first = runs[0]
    where = (
        "devices in a child process (Home Assistant's loop measured alone)"
        if first["devices_in"] == "process"
        else "devices on Home Assistant's loop (client and server share a CPU)"
    )
    rows = [
        (
            f"Scale: keep-alive every {first['keepalive_s']:g} s, "
            f"{first['window_s']:g} s window; {where}"
        ),
        (
            f"  {'devices':>7} {'lag p50':>8} {'lag p99':>8} {'lag max':>8}"
            f" {'gc max':>7} {'idle p99':>8}"
            f" {'RSS/dev':>8} {'Py/dev':>7} {'entry':>7} {'conn/s':>7} {'raw/s':>7}"
            f" {'ratio':>6} {'cold s':>7} {'burst':>8} {'sent':>6} {'lost':>5}"
        ),
        (
            f"  {'':>7} {'ms':>8} {'ms':>8} {'ms':>8} {'ms':>7} {'ms':>8}"
            f" {'KB':>8} {'KB':>7}"
            f" {'KB':>7} {'':>7} {'':>7} {'':>6} {'':>7} {'ms':>8} {'':>6} {'':>5}"
        ),
    ]
    rows.extend(_scale_row(run) for run in runs)
    largest = max(runs, key=lambda run: run["devices"])
    shares = ", ".join(
        f"{name} {size:g}" for name, size in largest["python_by_package_kb"].items()
    )
    rows += [f"  {line}" for line in SCALE_NOTES]
    rows.append(
        f"  Python KB per device by allocator, {largest['devices']} devices: {shares}"
    )
    return rows


def mqtt_rows(data: dict[str, Any]) -> list[str]:
    """Return the printed lines of the MQTT results."""
    endpoint, idle = data["endpoint"], data["idle"]
    traffic = idle["traffic_bytes_per_device_minute"]
    return [
        (
            f"MQTT + UDP: {idle['devices']} devices idle on Home Assistant; the "
            f"endpoint alone with {endpoint['connections']} connections"
        ),
        (
            f"  endpoint per idle connection: RSS {_num(endpoint['rss_kb'], 2)} KiB "
            f"(bare asyncio TCP server: {_num(endpoint['bare_rss_kb'], 2)}), Python "
            f"{_num(endpoint['python_kb'], 2)} KiB (bare: "
            f"{_num(endpoint['bare_python_kb'], 2)})"
        ),
        (
            f"  whole device on Home Assistant (entities included): RSS "
            f"{_num(idle['rss_per_device_kb'])} KB; all connected in "
            f"{_num(idle['connect_s'], 2)} s"
        ),
        (
            f"  keep-alive every {idle['keepalive_s']:g} s (status) and "
            f"{idle['mqtt_keepalive_s'] / 2:g} s (MQTT ping): lag p50 / p99 "
            f"{_num(idle['lag']['p50_ms'], 2)} / {_num(idle['lag']['p99_ms'], 2)} ms "
            f"(before connecting: {_num(idle['idle_lag']['p99_ms'], 2)} ms p99); "
            f"traffic per device {traffic['to_device']} B/min down, "
            f"{traffic['from_device']} B/min up; requests "
            f"{idle['requests']['sent']}, lost {idle['lost_replies']}"
        ),
    ]


def _udp_voice_row(data: dict[str, Any]) -> list[str]:
    udp = data.get("udp")
    if not udp:
        return []
    latency, many = udp["latency"], udp["many"]
    return [
        (
            f"  over MQTT + UDP: STT text -> tts start "
            f"{latency['text_to_tts_start_ms']['p50']:.2f} ms p50, first TTS bytes "
            f"-> first frame {latency['tts_bytes_to_first_frame_ms']['p50']:.2f} ms "
            f"p50; {many['conversations']} at once: lag p99 "
            f"{many['lag_ms']['p99']:.2f} ms, dropped {many['dropped']} of "
            f"{many['played_frames'] + many['dropped']}, lead p99 "
            f"{many['lead_ms']['p99']:.0f} ms"
        )
    ]


def voice_rows(data: dict[str, Any]) -> list[str]:
    """Return the printed lines of the voice results."""
    codec, latency, many = data["codec"], data["latency"], data["many"]
    return [
        (
            f"Voice: {latency['turns']} conversations one by one, then "
            f"{many['conversations']} at once ({many['reply_s']:g} s replies)"
        ),
        (
            f"  CPU per second of audio: microphone decode "
            f"{codec['uplink_decode'] * 100:.2f} %, reply resample + encode "
            f"{codec['downlink_resample_encode'] * 100:.2f} %, a live conversation "
            f"{codec['conversation'] * 100:.2f} % of one core"
        ),
        (
            f"  added latency, ms p50 / p99: STT text -> tts start "
            f"{latency['text_to_tts_start_ms']['p50']:.2f} / "
            f"{latency['text_to_tts_start_ms']['p99']:.2f}; first TTS bytes -> first "
            f"frame {latency['tts_bytes_to_first_frame_ms']['p50']:.2f} / "
            f"{latency['tts_bytes_to_first_frame_ms']['p99']:.2f}"
        ),
        (
            f"  {many['conversations']} at once: event-loop lag p99 "
            f"{many['lag_ms']['p99']:.2f} ms (max {many['lag_ms']['max']:.1f}); "
            f"frames dropped by the devices {many['dropped']} of "
            f"{many['played_frames'] + many['dropped']}; device queue at most "
            f"{many['max_device_queue']} of 40"
        ),
        (
            f"  downlink lead over playback, ms: p99 {many['lead_ms']['p99']:.0f}, "
            f"max {many['lead_ms']['max']:.0f} (the device holds 2400)"
        ),
        *_udp_voice_row(data),
    ]


def _frames_row(frames: dict[str, Any]) -> str:
    return (
        f"winners' frames after listen start: sent {frames['sent']}, heard "
        f"{frames['heard']}, lost {frames['lost']} ({frames['winners_losing']} "
        f"winners), not said {frames['extra']} ({frames['winners_with_extra']} "
        f"winners); tone heard whole {frames['tone_whole']} of {frames['winners']}"
    )


def arbitration_rows(data: dict[str, Any]) -> list[str]:
    """Return the printed lines of the wake word arbitration results."""
    start, burst = data["start"], data["burst"]
    delay, added = start["delay_ms"], start["added_ms"]
    frames, heard = start["frames"], burst["frames"]
    rows = [
        (
            f"Wake word arbitration (window {_num(data['window_ms'], 0)} ms): 3 boxes "
            f"of one area over WebSocket, the nearest woken "
            f"{_num(start['later_ms'], 0)} ms after the others (its listen start "
            f"{_num(start['nearest_after_first_ms']['p50'], 0)} ms after the "
            f"first), {start['rounds']} rounds; baseline: the same box alone in "
            "its area"
        ),
        (
            f"  {'listen start -> first audio at speech-to-text, ms':<52}"
            f"{'p50':>8}{'p99':>8}{'n':>4}"
        ),
    ]
    labels = {
        "detect": "wake word (detect), arbitrated",
        "detect_alone": "wake word (detect), alone (baseline)",
        "no_detect": "start without detect, arbitrated",
        "no_detect_alone": "start without detect, alone (baseline)",
    }
    for key, label in labels.items():
        s = delay[key]
        rows.append(f"  {label:<52}{_num(s['p50']):>8}{_num(s['p99']):>8}{s['n']:>4}")
    past = start["past_window_ms"]
    rows += [
        (
            f"  added, ms p50 / p99: wake word {_num(added['detect']['p50'])} / "
            f"{_num(added['detect']['p99'])} (first audio "
            f"{_num(past['p50'])} / {_num(past['p99'])} after the window closed), "
            f"without detect {_num(added['no_detect']['p50'])} / "
            f"{_num(added['no_detect']['p99'])}"
        ),
        (
            f"  nearest answered {start['nearest_answered']} of "
            f"{start['arbitrated']}; {_frames_row(frames)}"
        ),
        (
            f"  {burst['groups']} areas x 3 boxes at once over MQTT + UDP (listen "
            f"starts within {_num(burst['listen_starts_span_ms'], 0)} ms, an area's "
            f"within {_num(burst['group_spread_ms']['max'], 0)}): lag p50 / p99 "
            f"{_num(burst['lag_ms']['p50'], 2)} / {_num(burst['lag_ms']['p99'], 2)} "
            f"ms (max {_num(burst['lag_ms']['max'])})"
        ),
        (
            f"  nearest answered {burst['nearest_answered']} of {burst['groups']} "
            "(it wakes last in its area); UDP datagrams dropped by the kernel at "
            f"Home Assistant's socket (buffer full) "
            f"{_num(burst['udp_dropped_by_kernel'])}"
        ),
        (
            f"  stood down {burst['stood_down']}, idle within 1 s "
            f"{burst['idle_within_1s']} (p99 {_num(burst['idle_after_ms']['p99'], 0)}"
            f" ms); winner's listen start -> first audio p50 / p99 "
            f"{_num(burst['start_to_audio_ms']['p50'])} / "
            f"{_num(burst['start_to_audio_ms']['p99'])} ms (after the window "
            f"{_num(burst['past_window_ms']['p50'])} / "
            f"{_num(burst['past_window_ms']['p99'])})"
        ),
        f"  {_frames_row(heard)}",
    ]
    return rows


def _slow_rows(scenarios: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Return, per scenario, the callbacks that held the loop past 20 ms."""
    rows = [
        (
            "Slow callbacks (> 20 ms on the event loop): ours that ran long / ours "
            "that waited for a core / all (collections)"
        )
    ]
    for label, slow in scenarios:
        rows.append(
            f"  {label}: {slow['ours']} / {slow['ours_starved']} / {slow['slow']} "
            f"({slow['gc']}) of {slow['callbacks']} callbacks"
        )
        rows += [
            f"    ours{'' if named['ran_long'] else ', waited'}: {named['what']} "
            f"x{named['count']}, up to {named['max_ms']} ms "
            f"({named['its_cpu_ms']} ms of it on the CPU)"
            for named in slow["named"]
        ]
        rows += [
            f"    other: {other['what']} at {other['at']}, {other['ms']} ms"
            for other in slow["others"][:3]
        ]
    return rows


def format_report(results: dict[str, Any]) -> str:
    """Return the human-readable table of a run."""
    meta = results["meta"]
    rows = [
        (
            f"xiaozhi benchmarks ({meta['mode']}) {meta['date']}: Python "
            f"{meta['python']}, Home Assistant {meta['homeassistant']}, aiohttp "
            f"{meta['aiohttp']}, {meta['cpus']} CPUs, load {meta['load_before']} -> "
            f"{meta['load_after']}, {meta['duration_s']:g} s"
        ),
        "",
    ]
    if "toolcall" in results:
        rows += [*_toolcall(results["toolcall"]), ""]
    if "handshake" in results:
        rows += [*_handshake(results["handshake"]), ""]
    if results.get("scale"):
        rows += [*_scale(results["scale"]), ""]
    if "mqtt" in results:
        rows += [*mqtt_rows(results["mqtt"]), ""]
    if "voice" in results:
        rows += [*voice_rows(results["voice"]), ""]
    if "arbitration" in results:
        rows += [*arbitration_rows(results["arbitration"]), ""]
    if "update" in results:
        data = results["update"]
        rows += [
            (
                f"Firmware: {data['devices']} devices updating at once "
                f"({_num(data['image_mb'], 1)} MB image): flashed {data['flashed']}, "
                f"lag p99 {_num(data['lag_ms']['p99'])} ms, downloads "
                f"{_num(data['throughput_mb_s'], 1)} MB/s in all, install to "
                f"confirmed p50 {_num(data['install_to_confirmed_s']['p50'], 2)} s"
            ),
            "",
        ]
    if "media" in results:
        rows += [*_media(results["media"]), ""]
    if "soak" in results:
        rows += [*_soak(results["soak"]), ""]
    if scenarios := _scenarios(results):
        rows += [*_slow_rows(scenarios), ""]
    for title, gated, word in (
        ("Reported (not gated)", False, "expected"),
        ("Targets", True, "target"),
    ):
        verdicts = [v for v in results["targets"] if v["gated"] is gated]
        if not verdicts:
            continue
        rows.append(title)
        for verdict in verdicts:
            value = verdict["value"]
            shown = f"{value:g}" if isinstance(value, float) else str(value)
            mark = ("met " if verdict["met"] else "MISS") if gated else "    "
            rows.append(
                f"  {mark}  {verdict['target']:<56}"
                f"{shown:>10}  ({word} {verdict['limit']})"
            )
    return "\n".join(rows) + "\n"
