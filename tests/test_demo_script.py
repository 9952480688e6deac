"""Tests for the pure helpers of the demo package (no Home Assistant is started)."""

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from datetime import UTC, datetime
import io
import json
from pathlib import Path
import re
from types import SimpleNamespace
from typing import Any
import wave

import aiohttp
from homeassistant.bootstrap import CORE_INTEGRATIONS, DEFAULT_INTEGRATIONS
import homeassistant.components
from homeassistant.components import conversation, stt
from homeassistant.components.assist_pipeline.pipeline import PIPELINE_FIELDS
from homeassistant.components.http.config import (
    HTTP_STORAGE_SCHEMA,
    STORAGE_MINOR_VERSION,
    STORAGE_VERSION,
)
from homeassistant.core import Context, HomeAssistant
from homeassistant.util.yaml import load_yaml_dict
from packaging.requirements import Requirement
import pytest
import voluptuous as vol

import demo
from demo import DemoError, client, devices, files, main, media, voice
import demo.voice_engines as engines
from demo.voice_engines import (
    conversation as engines_conversation,
    stt as engines_stt,
    tts as engines_tts,
)
from simulator import DeviceConnectionError, SimulatedDevice
from simulator.voice import loudness_at, silence, tone, write_wav

ROOT = Path(__file__).resolve().parent.parent
COMPONENTS = Path(homeassistant.components.__file__).parent
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
MAC_1 = "02:00:5a:48:00:01"


@pytest.fixture(autouse=True)
def auto_enable_custom_integrations() -> None:
    """Override the suite's fixture: these tests need no Home Assistant."""


# ------------------------------------------------------------ command line


def test_parse_args_defaults() -> None:
    args = main.parse_args([])
    assert args.port == 8123
    assert args.once is False
    assert args.reset is False
    assert args.timeout == demo.DEFAULT_TIMEOUT
    assert args.extra_devices == 0


def test_parse_args_options() -> None:
    args = main.parse_args(["--port", "8124", "--once", "--reset", "--timeout", "30"])
    assert (args.port, args.once, args.reset, args.timeout) == (8124, True, True, 30)
    assert main.parse_args(["--extra-devices", "4"]).extra_devices == 4


@pytest.mark.parametrize(
    "argv",
    [
        ["--port", "0"],
        ["--port", "65536"],
        ["--port", "web"],
        ["--timeout", "0"],
        ["--extra-devices", "5"],
        ["--extra-devices", "-1"],
        ["--extra-devices", "many"],
    ],
)
def test_parse_args_rejects(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main.parse_args(argv)
    assert "error" in capsys.readouterr().err


def test_urls() -> None:
    assert demo.base_url(8124) == "http://127.0.0.1:8124"
    assert demo.ota_url(8124) == "http://127.0.0.1:8124/api/xiaozhi/v1/ota/"


# ------------------------------------------------------------ HTTP settings


def test_http_store_is_what_home_assistant_reads() -> None:
    store = files.http_store(8124, NOW.isoformat())
    assert store["key"] == "http"
    assert (store["version"], store["minor_version"]) == (
        STORAGE_VERSION,
        STORAGE_MINOR_VERSION,
    )
    data = store["data"]
    assert data["pending"] is None
    assert data["yaml_migration_done"] is True
    stable = dict(data["stable"])
    meta = {key: stable.pop(key) for key in demo.HTTP_STORE_META_KEYS}
    assert meta == {"created_at": NOW.isoformat(), "error": None, "error_message": None}
    # Complete and normalised: the schema has nothing to add or change.
    assert HTTP_STORAGE_SCHEMA(stable) == stable
    assert stable["server_host"] == ["127.0.0.1"]
    assert stable["server_port"] == 8124


def test_write_http_store(tmp_path: Path) -> None:
    path = tmp_path / ".storage" / "http"
    assert files.write_http_store(tmp_path, 8124, NOW) is True
    assert path.stat().st_mode & 0o777 == 0o600
    first = json.loads(path.read_text())
    assert first == files.http_store(8124, NOW.isoformat())

    # Same settings later: left alone (Home Assistant's created_at stays).
    later = datetime(2026, 5, 5, tzinfo=UTC)
    assert files.write_http_store(tmp_path, 8124, later) is False
    assert json.loads(path.read_text()) == first

    # Another port: rewritten.
    assert files.write_http_store(tmp_path, 8125, later) is True
    assert json.loads(path.read_text())["data"]["stable"]["server_port"] == 8125


def test_write_http_store_replaces_pending_and_junk(tmp_path: Path) -> None:
    path = tmp_path / ".storage" / "http"
    store = files.http_store(8124, NOW.isoformat())
    store["data"]["pending"] = dict(store["data"]["stable"], server_port=9999)
    path.parent.mkdir()
    path.write_text(json.dumps(store))
    assert files.write_http_store(tmp_path, 8124, NOW) is True
    assert json.loads(path.read_text())["data"]["pending"] is None

    path.write_text("not json")
    assert files.write_http_store(tmp_path, 8124, NOW) is True
    assert files.http_store_is_current(json.loads(path.read_text()), store)


def test_http_store_of_home_assistant_2026_11(tmp_path: Path) -> None:
    """Store 3.1 names the SSL profile after its guideline (the schema's default)."""
    assert files.write_http_store(tmp_path, 8124, NOW, installed=(3, 1)) is True
    store = json.loads((tmp_path / ".storage" / "http").read_text())
    assert store == files.http_store(8124, NOW.isoformat(), (3, 1))
    assert (store["version"], store["minor_version"]) == (3, 1)
    assert store["data"]["stable"]["ssl_profile"] == "intermediate_v6"
    # Only the version and the profile differ from the store of 2026.10.
    older = files.http_store(8124, NOW.isoformat())
    older["data"]["stable"]["ssl_profile"] = "intermediate_v6"
    assert {**older, "version": 3, "minor_version": 1} == store
    # The same settings in the other layout are not current: rewritten.
    assert files.write_http_store(tmp_path, 8124, NOW, installed=(2, 2)) is True


@pytest.mark.parametrize(
    "current",
    [None, [], {"version": 1}, {"version": 2, "minor_version": 2, "data": []}],
)
def test_http_store_is_current_rejects(current: object) -> None:
    assert not files.http_store_is_current(current, files.http_store(1, ""))


# ------------------------------------------------------------ config dir


def test_prepare_config_dir(tmp_path: Path) -> None:
    (tmp_path / "custom_components" / "xiaozhi").mkdir(parents=True)
    (tmp_path / "demo" / "voice_engines").mkdir(parents=True)
    paths = files.DemoPaths(tmp_path)
    files.prepare_config_dir(paths, 8124, NOW)

    config = paths.config
    assert config == tmp_path / ".demo" / "config"
    link = config / "custom_components" / "xiaozhi"
    assert link.readlink() == Path("../../../custom_components/xiaozhi")
    assert link.resolve() == (tmp_path / "custom_components" / "xiaozhi").resolve()
    engines = config / "custom_components" / "xiaozhi_demo_voice"
    assert engines.resolve() == (tmp_path / "demo" / "voice_engines").resolve()
    assert (config / ".storage" / "http").exists()

    loaded = load_yaml_dict(config / "configuration.yaml")
    for domain in (
        "frontend",
        "config",
        "api",
        "recorder",
        "history",
        "logbook",
        "xiaozhi_demo_voice",
    ):
        assert domain in loaded
    assert loaded["automation"] == []
    assert loaded["scene"] == []
    assert "http" not in loaded  # the HTTP settings live in .storage/http
    assert "default_config" not in loaded

    # A second start keeps what the web interface wrote.
    (config / "automations.yaml").write_text("- id: '1'\n")
    files.prepare_config_dir(paths, 8124, NOW)
    assert (config / "automations.yaml").read_text() == "- id: '1'\n"
    assert link.is_symlink()


def test_prepare_config_dir_relinks_and_refuses(tmp_path: Path) -> None:
    paths = files.DemoPaths(tmp_path)
    paths.config.mkdir(parents=True)
    folder = paths.config / "custom_components"
    folder.symlink_to("/nowhere")  # an earlier demo linked the whole folder
    files.link_custom_components(paths.config, tmp_path)
    assert not folder.is_symlink()
    link = folder / "xiaozhi"
    assert link.readlink() == Path("../../../custom_components/xiaozhi")

    link.unlink()
    link.symlink_to("/elsewhere")
    files.link_custom_components(paths.config, tmp_path)
    assert link.readlink() == Path("../../../custom_components/xiaozhi")

    link.unlink()
    link.mkdir()
    with pytest.raises(demo.DemoError):
        files.link_custom_components(paths.config, tmp_path)


def test_demo_paths() -> None:
    paths = files.DemoPaths(Path("/repo"))
    assert paths.token == Path("/repo/.demo/token")
    assert paths.log == Path("/repo/.demo/home-assistant.log")
    assert paths.devices_log == Path("/repo/.demo/devices.log")


def test_write_private(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "token"
    files.write_private(path, "secret\n")
    files.write_private(path, "other\n")
    assert path.read_text() == "other\n"
    assert path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["token"]


def test_tail(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_text("".join(f"line {n}\n" for n in range(30)))
    assert files.tail(path, 2) == "line 28\nline 29"
    assert files.tail(tmp_path / "missing") == ""


# ------------------------------------------------------------ devices


def test_device_configs() -> None:
    plain, rich = devices.device_configs(8124)
    assert plain.mac != rich.mac
    for config in (plain, rich):
        assert config.ota_url == "http://127.0.0.1:8124/api/xiaozhi/v1/ota/"
        assert config.ws_url is None
        assert config.token is None
        assert config.reconnect_delay is not None
        assert config.activation_poll_interval <= 1
    assert plain.board == "bread-compact-wifi"
    assert plain.screen
    assert not plain.camera
    assert rich.board == "esp32-s3-camera-box"
    assert rich.camera
    assert rich.battery
    names = {tool.name for tool in rich.extra_tools}
    assert {"self.light.set_rgb", "self.dog.forward", "self.led.set_enabled"} <= names
    assert len(rich.extra_tools) == 43
    # The same identity on every run.
    assert devices.device_configs(8125)[0].client_id == plain.client_id


def test_extra_devices_fill_the_room() -> None:
    configs = devices.device_configs(8124, 3)
    assert len(configs) == 5
    assert [config.mac for config in configs[2:]] == [
        "02:00:5a:48:00:03",
        "02:00:5a:48:00:04",
        "02:00:5a:48:00:05",
    ]
    assert len({config.client_id for config in configs}) == 5
    for config in configs[2:]:
        assert config.board == "esp-box-3"
        assert config.wake_preroll  # S3 boxes: a pre-roll with each wake word
        assert config.ota_url == configs[0].ota_url
    with pytest.raises(ValueError, match="extra devices"):
        devices.device_configs(8124, devices.MAX_EXTRA_DEVICES + 1)


# ------------------------------------------------------------ answers


def test_find_pairing_flow() -> None:
    flows = [
        {"flow_id": "a", "handler": "other", "context": {"unique_id": MAC_1}},
        {
            "flow_id": "b",
            "handler": "xiaozhi",
            "step_id": "pair",
            "context": {"source": "integration_discovery", "unique_id": MAC_1},
        },
    ]
    assert client.find_pairing_flow(flows, MAC_1) == "b"
    assert client.find_pairing_flow(flows, MAC_1.upper()) == "b"
    assert client.find_pairing_flow(flows, "02:00:5a:48:00:02") is None
    assert client.find_pairing_flow([], MAC_1) is None


def test_find_pairing_flow_skips_other_steps() -> None:
    flows = [
        {"flow_id": "u", "handler": "xiaozhi", "step_id": "user", "context": {}},
        {
            "flow_id": "w",
            "handler": "xiaozhi",
            "step_id": "wait_for_device",
            "context": {"unique_id": MAC_1},
        },
        {"flow_id": "n", "handler": "xiaozhi", "context": {"unique_id": MAC_1}},
    ]
    assert client.find_pairing_flow(flows, MAC_1) == "n"


def test_onboarding_done_steps() -> None:
    status = [
        {"step": "user", "done": True},
        {"step": "core_config", "done": False},
        {"step": "analytics", "done": True},
    ]
    assert client.onboarding_done_steps(status) == {"user", "analytics"}
    # Served no more once onboarding is complete.
    assert client.onboarding_done_steps({"message": "Not Found"}) == set(
        demo.ONBOARDING_STEPS
    )
    assert client.onboarding_done_steps("404: Not Found") == set(demo.ONBOARDING_STEPS)
    with pytest.raises(demo.DemoError):
        client.onboarding_done_steps(42)


def test_connected_entity_and_titles() -> None:
    entities = [
        {
            "platform": "xiaozhi",
            "unique_id": f"{MAC_1}-volume",
            "entity_id": "number.box_volume",
        },
        {
            "platform": "xiaozhi",
            "unique_id": f"{MAC_1}-connected",
            "entity_id": "binary_sensor.box_connectivity",
            "config_entry_id": "e1",
        },
    ]
    entity = client.connected_entity(entities, MAC_1.upper())
    assert entity is not None
    assert entity["entity_id"] == "binary_sensor.box_connectivity"
    assert client.connected_entity(entities, "02:00:5a:48:00:09") is None
    titles = client.entry_titles([{"entry_id": "e1", "title": "Box"}, {"title": "x"}])
    assert titles == {"e1": "Box"}


@pytest.mark.parametrize(
    ("environ", "country"),
    [
        ({"LANG": "zh_CN.UTF-8"}, "CN"),
        ({"LC_ALL": "de_DE", "LANG": "zh_CN.UTF-8"}, "DE"),
        ({"LANG": "C.UTF-8"}, "US"),
        ({"LANG": "en"}, "US"),
        ({}, "US"),
    ],
)
def test_country_from_locale(environ: dict[str, str], country: str) -> None:
    assert devices.country_from_locale(environ) == country


def test_summary_lines() -> None:
    paths = files.DemoPaths(Path("/repo"))
    reports = [
        devices.DeviceReport(
            mac=MAC_1, board="b", title="XiaoZhi b 00:01", paired_now=True
        ),
        devices.DeviceReport(mac="02:00:5a:48:00:02", board="c"),
    ]
    text = "\n".join(
        devices.summary_lines("http://127.0.0.1:8124", paths, reports, once=False)
    )
    assert "http://127.0.0.1:8124" in text
    assert "demo / demo" in text
    assert "/repo/.demo/token" in text
    assert f"XiaoZhi b 00:01 ({MAC_1}): paired now, connected" in text
    assert "c (02:00:5a:48:00:02): connected" in text
    assert "Living" not in text
    assert text.endswith("Press Ctrl-C to stop.")
    reports[1].area = "Living Room"
    text = "\n".join(
        devices.summary_lines("http://127.0.0.1:8124", paths, reports, once=False)
    )
    assert "c (02:00:5a:48:00:02): connected, in Living Room" in text
    once = devices.summary_lines("u", paths, reports, once=True)
    assert once[-1] == "Stopping (--once)."


# ------------------------------------------------------------ requirements


def _manifest(domain: str) -> dict[str, Any]:
    path = COMPONENTS / domain / "manifest.json"
    if not path.exists():
        path = ROOT / files.CUSTOM_COMPONENTS[domain] / "manifest.json"
    return json.loads(path.read_text())


def _demo_pins() -> dict[str, str]:
    pins = {}
    for raw in (ROOT / "requirements_demo.txt").read_text().splitlines():
        if line := raw.split("#", 1)[0].strip():
            name, _, version = line.partition("==")
            assert version, f"{line} is not pinned"
            pins[name.lower()] = version
    return pins


def _requirements(domains: set[str]) -> dict[str, str]:
    """Return name -> version of what these integrations and their deps need."""
    seen: set[str] = set()
    todo = list(domains)
    while todo:
        domain = todo.pop()
        if domain not in seen:
            seen.add(domain)
            todo.extend(_manifest(domain).get("dependencies", []))
    constraints = _constraints()
    needed = {}
    for domain in seen:
        for line in _manifest(domain).get("requirements", []):
            requirement = Requirement(line)
            name = requirement.name.lower()
            pinned = [
                spec.version for spec in requirement.specifier if spec.operator == "=="
            ]
            # A range (the custom integration's) installs what Home Assistant
            # pins; one it does not pin comes with the test stack's own pin.
            version = pinned[0] if pinned else constraints.get(name)
            if version is None:
                version = _test_pins()[name]
                assert requirement.specifier.contains(version), line
                continue
            assert requirement.specifier.contains(version), line
            needed[name] = version
    return needed


def _test_pins() -> dict[str, str]:
    """Return the versions requirements_test.txt pins (the demo's venv has them)."""
    text = (Path(__file__).parent.parent / "requirements_test.txt").read_text()
    return {
        name.strip().lower(): version.strip()
        for raw in text.splitlines()
        for name, sep, version in [raw.split("#", 1)[0].partition("==")]
        if sep
    }


def _constraints() -> dict[str, str]:
    """Return the versions Home Assistant pins (package_constraints.txt)."""
    text = (COMPONENTS.parent / "package_constraints.txt").read_text()
    pins = {}
    for raw in text.splitlines():
        name, sep, version = raw.split("#", 1)[0].strip().partition("==")
        if sep:
            pins[name.lower()] = version
    return pins


def test_frontend_pin_matches_home_assistant() -> None:
    (requirement,) = _manifest("frontend")["requirements"]
    name, _, version = requirement.partition("==")
    assert _demo_pins()[name] == version


def test_demo_pins_cover_what_home_assistant_loads() -> None:
    configured = set(re.findall(r"^(\w+):", files.CONFIGURATION_YAML, re.MULTILINE))
    loaded = set(DEFAULT_INTEGRATIONS) | set(CORE_INTEGRATIONS) | configured
    # The integration itself, and the entry onboarding adds that works offline.
    loaded |= {"xiaozhi", "google_translate"}
    needed = _requirements(loaded)
    pins = _demo_pins()
    # The simulated devices' MQTT client: paho-mqtt at Home Assistant's pin.
    simulator = {name: pins.pop(name) for name in ("aiomqtt", "paho-mqtt")}
    assert simulator["paho-mqtt"] == _constraints()["paho-mqtt"]
    assert {
        name: needed[name] for name in needed if pins.get(name) != needed[name]
    } == {}
    # Nothing pinned that Home Assistant does not ask for, at another version.
    assert {name: pins[name] for name in pins if needed.get(name) != pins[name]} == {}


def test_http_store_writer_fails_loudly_on_another_version(tmp_path: Path) -> None:
    """A Home Assistant that reads another layout is told about, not fed."""
    with pytest.raises(
        demo.DemoError, match=r"version 4\.1, the demo writes 2\.2 or 3\.1"
    ):
        files.write_http_store(tmp_path, 8124, NOW, installed=(4, 1))
    assert not (tmp_path / ".storage" / "http").exists()
    # The installed Home Assistant's own version is read when not given.
    assert files.write_http_store(tmp_path, 8124, NOW) is True


# ------------------------------------------------------------------ console


@pytest.mark.parametrize(
    ("line", "command"),
    [
        ("", devices.Command("")),
        ("help\n", devices.Command("help")),
        ("DEVICES", devices.Command("devices")),
        ("wake 1", devices.Command("wake", 1)),
        ("wake 2 Hey Jarvis\n", devices.Command("wake", 2, "Hey Jarvis")),
        ("listen 1", devices.Command("listen", 1)),
        ("stop 2", devices.Command("stop", 2)),
        ("abort 1", devices.Command("abort", 1)),
        ("play 2 song.mp3", devices.Command("play", 2, "song.mp3")),
        (
            "play 1 http://radio.example/live.mp3",
            devices.Command("play", 1, "http://radio.example/live.mp3"),
        ),
        ("stop-media 2", devices.Command("stop-media", 2)),
        ("wake all", devices.Command("wake", whole_room=True)),
        ("WAKE All Hey Jarvis", devices.Command("wake", None, "Hey Jarvis", True)),
        ("place 1 2.5", devices.Command("place", 1, "2.5")),
        ("place 2 3m", devices.Command("place", 2, "3")),
        ("place 2 0.40 m", devices.Command("place", 2, "0.4")),
    ],
)
def test_parse_command(line: str, command: devices.Command) -> None:
    assert devices.parse_command(line, 2) == command


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("dance 1", "unknown command 'dance'"),
        ("wake", "wake needs a device number"),
        ("wake one", "wake needs a device number"),
        ("listen 3", "no device 3; there are 2"),
        ("stop 0", "no device 0"),
        ("play 1", "play needs a file or URL"),
        ("listen all", "listen needs a device number"),
        ("place all 2", "place needs a device number"),
        ("place 1", "place needs a distance in metres"),
        ("place 1 far", "place needs a distance in metres"),
        ("place 1 0", "place needs a distance from 0 to 30 m"),
        ("place 1 31", "place needs a distance from 0 to 30 m"),
    ],
)
def test_parse_command_refuses(line: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        devices.parse_command(line, 2)


async def test_console_lists_devices_and_help() -> None:
    configs = devices.device_configs(8124)
    simulated = [SimulatedDevice(config) for config in configs]
    listing = await devices.execute(devices.Command("devices"), simulated)
    assert listing.splitlines() == [
        f"  {n}  {c.board} ({c.mac}) not connected, idle"
        for n, c in enumerate(configs, 1)
    ]
    help_text = await devices.execute(devices.Command("help"), simulated)
    assert "wake N [PHRASE]" in help_text
    assert "wake all [PHRASE]" in help_text
    assert "place N METRES" in help_text
    room = devices.Room()
    room.place(1, 3.5)
    listing = await devices.execute(devices.Command("devices"), simulated, room=room)
    assert [line.rsplit(", ", 1)[1] for line in listing.splitlines()] == [
        "3.5 m away",
        "1 m away",
    ]


# ------------------------------------------------------------ the room


class FakeBox:
    """What the room needs of a device: it hears wake words and answers or not."""

    def __init__(self, mac: str, board: str, *, answers: bool = False) -> None:
        self.config = SimpleNamespace(mac=mac, board=board)
        self.state = SimpleNamespace(activity="idle")
        self.connected = True
        self.uses_mqtt = False
        self.answers = answers
        self.heard: list[tuple[str, float]] = []
        self.failure: Exception | None = None

    async def wake(self, phrase: str, *, loudness: float) -> None:
        if self.failure is not None:
            raise self.failure
        self.heard.append((phrase, loudness))
        self.state.activity = "listening" if self.answers else "idle"


def test_room_distances() -> None:
    room = devices.Room()
    assert room.name == "Living room"
    assert [room.distance(n) for n in (1, 2, 3)] == [2.5, 1.0, 4.0]
    room.place(1, 0.5)
    assert room.distance(1) == 0.5
    assert room.distance(7) == room.distance(1 + len(devices.DEFAULT_DISTANCES))
    with pytest.raises(ValueError, match="distance"):
        room.place(2, 0)


def test_detection_delay() -> None:
    delays = [devices.detection_delay(3.43, MAC_1, wake) for wake in range(20)]
    assert all(0.01 <= delay <= 0.01 + devices.MAX_DETECTION_JITTER for delay in delays)
    assert len(set(delays)) == 20  # another wake word, another delay
    assert devices.detection_delay(3.43, MAC_1, 4) == delays[4]  # reproducible
    other = devices.detection_delay(3.43, "02:00:5a:48:00:02", 4)
    assert other != delays[4]
    # Far away: later by the time the sound takes.
    assert devices.detection_delay(10.29, MAC_1, 4) - delays[4] == pytest.approx(0.02)


def test_nearest_is_not_always_first() -> None:
    room = devices.Room()
    boxes = [FakeBox(f"02:00:5a:48:00:0{n}", f"box{n}") for n in (1, 2, 3)]
    first = set()
    for _ in range(12):
        room.wakes += 1
        heard = devices.hearings(boxes, room)  # type: ignore[arg-type]
        assert [h.delay for h in heard] == sorted(h.delay for h in heard)
        first.add(heard[0].number)
        for hearing in heard:
            assert hearing.loudness == loudness_at(room.distance(hearing.number))
    assert len(first) > 1


async def test_wake_all_every_device_hears_one_wake_word() -> None:
    room = devices.Room()
    room.place(3, 2.0)
    near = FakeBox("02:00:5a:48:00:02", "near", answers=True)
    boxes = [FakeBox(MAC_1, "far"), near, FakeBox("02:00:5a:48:00:03", "mid")]
    report = await devices.wake_room(boxes, room, settle=0)  # type: ignore[arg-type]
    assert room.wakes == 1
    assert [box.heard for box in boxes] == [
        [("你好小智", pytest.approx(-27.96, abs=0.01))],
        [("你好小智", -20.0)],
        [("你好小智", pytest.approx(-26.02, abs=0.01))],
    ]
    lines = report.splitlines()
    assert len(lines) == 4
    assert "  2  near at 1 m heard '你好小智' at -20 dBFS after " in report
    assert "  1  far at 2.5 m heard '你好小智' at -28 dBFS" in report
    assert lines[0].endswith("now idle") or lines[0].endswith("now listening")
    assert lines[-1] == "near (2) answered"

    for box in boxes:
        box.answers = True
    boxes[0].failure = DeviceConnectionError("refused")
    report = await devices.execute(
        devices.Command("wake", text="Hey Jarvis", whole_room=True),
        boxes,  # type: ignore[arg-type]
        room=room,
    )
    assert room.wakes == 2
    assert "far at 2.5 m heard 'Hey Jarvis' at -28 dBFS" in report
    assert "could not send it (refused)" in report
    assert report.splitlines()[-1].startswith("2 devices answered: ")


def test_outcome_when_nobody_answers() -> None:
    box = FakeBox(MAC_1, "box")
    hearing = devices.Hearing(1, box, 2.0, -26.0, 0.05)  # type: ignore[arg-type]
    assert devices.outcome_lines([hearing], "hi") == (
        "  1  box at 2 m heard 'hi' at -26 dBFS after 50 ms: now idle\n"
        "No device answered"
    )


async def test_place_and_wake_one_device() -> None:
    room = devices.Room()
    box = FakeBox(MAC_1, "box")
    answer = await devices.execute(
        devices.Command("place", 1, "4"),
        [box],  # type: ignore[list-item]
        room=room,
    )
    assert answer == (
        "box stands 4 m from the person speaking: it hears a wake word at -32 dBFS"
    )
    assert room.distance(1) == 4.0
    answer = await devices.execute(
        devices.Command("wake", 1, "Hi ESP"),
        [box],  # type: ignore[list-item]
        room=room,
    )
    assert answer == "box heard 'Hi ESP' and listens"
    assert box.heard == [("Hi ESP", pytest.approx(-32.04, abs=0.01))]


def test_areas_and_device_entries() -> None:
    areas = [
        {"area_id": "kitchen", "name": "Kitchen"},
        {"area_id": "living_room", "name": "Living Room"},
    ]
    assert client.find_area(areas, "Living room") == "living_room"
    assert client.find_area(areas, "livingroom") == "living_room"
    assert client.find_area(areas, "Garage") is None
    registry = [
        {"id": "d0", "identifiers": [["other", MAC_1]]},
        {"id": "d1", "identifiers": [["xiaozhi", MAC_1]], "area_id": None},
    ]
    entry = client.device_entry(registry, MAC_1.upper())
    assert entry is not None
    assert entry["id"] == "d1"
    assert client.device_entry(registry, "02:00:5a:48:00:02") is None


class FakeRegistries:
    """Home Assistant's area and device registries, over the WebSocket API."""

    def __init__(self, areas: list[dict[str, Any]]) -> None:
        self.areas = areas
        self.devices = [
            {"id": "d1", "identifiers": [["xiaozhi", MAC_1]], "area_id": None},
            {
                "id": "d2",
                "identifiers": [["xiaozhi", "02:00:5a:48:00:02"]],
                "area_id": "office",
            },
        ]
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def ws(self, command: str, **data: Any) -> Any:
        self.calls.append((command, data))
        match command:
            case "config/device_registry/list":
                return self.devices
            case "config/area_registry/list":
                return self.areas
            case "config/area_registry/create":
                area = {"area_id": "living_room", "name": data["name"]}
                self.areas.append(area)
                return area
            case "config/device_registry/update":
                device = next(d for d in self.devices if d["id"] == data["device_id"])
                device["area_id"] = data["area_id"]
                return device
        raise AssertionError(command)


@pytest.mark.parametrize("existing", [True, False])
async def test_devices_are_put_in_the_room_area(
    existing: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    areas = [{"area_id": "office", "name": "Office"}]
    if existing:  # onboarding made it
        areas.append({"area_id": "living_room", "name": "Living Room"})
    registries = FakeRegistries(areas)
    demo_run = main.Demo(main.parse_args([]), files.DemoPaths(tmp_path))
    await demo_run.session.close()
    demo_run.client = registries  # type: ignore[assignment]
    demo_run.reports = reports = [
        devices.DeviceReport(mac=MAC_1, board="a", title="Box A"),
        devices.DeviceReport(mac="02:00:5a:48:00:02", board="b"),
        devices.DeviceReport(mac="02:00:5a:48:00:09", board="gone"),
    ]
    await demo_run._put_in_area()
    updates = [c for c in registries.calls if c[0] == "config/device_registry/update"]
    # Only the device in no area moves; the one a person put elsewhere stays.
    assert updates == [
        (
            "config/device_registry/update",
            {"device_id": "d1", "area_id": "living_room"},
        )
    ]
    created = [c for c in registries.calls if c[0] == "config/area_registry/create"]
    assert created == (
        [] if existing else [("config/area_registry/create", {"name": "Living room"})]
    )
    name = "Living Room" if existing else "Living room"
    assert [report.area for report in reports] == [name, "Office", ""]
    assert f"Put Box A in the area {name}" in capsys.readouterr().out

    # The next start: nothing to do.
    registries.calls.clear()
    await demo_run._put_in_area()
    assert [c[0] for c in registries.calls] == [
        "config/device_registry/list",
        "config/area_registry/list",
    ]
    assert "Put" not in capsys.readouterr().out


async def test_an_area_that_cannot_be_set_does_not_stop_the_demo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    registries = FakeRegistries([])

    async def refuse(command: str, **data: Any) -> Any:
        if command == "config/area_registry/create":
            raise DemoError("config/area_registry/create failed: not allowed")
        return await FakeRegistries.ws(registries, command, **data)

    registries.ws = refuse  # type: ignore[method-assign]
    demo_run = main.Demo(main.parse_args([]), files.DemoPaths(tmp_path))
    await demo_run.session.close()
    demo_run.client = registries  # type: ignore[assignment]
    demo_run.reports = [devices.DeviceReport(mac=MAC_1, board="a")]
    await demo_run._put_in_area()
    assert "Could not put the devices in an area" in capsys.readouterr().out


# ------------------------------------------------------------ voice


def test_parse_say() -> None:
    assert devices.parse_command("say 2 what time is it\n", 2) == devices.Command(
        "say", 2, "what time is it"
    )
    with pytest.raises(ValueError, match="say needs what to say"):
        devices.parse_command("say 1", 2)


def test_reply_lines() -> None:
    reply = voice.Reply(["It is", "9:46 PM."], 1.74, Path("/r/device-1.wav"))
    assert devices.reply_lines("box", reply) == (
        "box said 'It is 9:46 PM.' (1.7 s of audio, saved to /r/device-1.wav)"
    )
    assert devices.reply_lines("box", voice.Reply([], 0.0, None)) == (
        "box said 'nothing' (no audio came back)"
    )


def test_engine_entities() -> None:
    entities = [
        {"entity_id": "stt.demo_speech_to_text", "platform": voice.ENGINES},
        {"entity_id": "tts.demo_text_to_speech", "platform": voice.ENGINES},
        {"entity_id": "tts.google_translate_en_com", "platform": "google_translate"},
        {"entity_id": "sensor.x", "platform": voice.ENGINES},
        {"entity_id": "conversation.demo_agent", "platform": voice.ENGINES},
        {"entity_id": "conversation.home_assistant", "platform": "conversation"},
    ]
    assert voice.engine_entities(entities) == {
        "stt": "stt.demo_speech_to_text",
        "tts": "tts.demo_text_to_speech",
        "conversation": "conversation.demo_agent",
    }


def test_pipeline_settings_are_what_home_assistant_takes() -> None:
    """The create command's schema is Home Assistant's: a change shows here."""
    settings = voice.pipeline_settings("stt.a", "tts.b")
    schema = vol.Schema(PIPELINE_FIELDS)
    assert schema(settings) == settings
    assert settings["conversation_engine"] == voice.AGENT
    other = voice.pipeline_settings(
        "stt.a", "tts.b", name="n", agent="conversation.x", prefer_local_intents=False
    )
    assert schema(other) == other
    assert (other["name"], other["conversation_engine"]) == ("n", "conversation.x")
    assert other["prefer_local_intents"] is False


def test_demo_engines_manifest_and_languages() -> None:
    manifest = json.loads(
        (ROOT / "demo" / "voice_engines" / "manifest.json").read_text()
    )
    assert manifest["domain"] == voice.ENGINES
    assert files.CUSTOM_COMPONENTS[voice.ENGINES] == Path("demo/voice_engines")
    assert demo.LANGUAGE in engines_tts.LANGUAGES


def test_demo_engines_beep_without_espeak() -> None:
    with wave.open(io.BytesIO(engines_tts.beeps("one two three four"))) as wav:
        assert wav.getnchannels() == 1
        assert wav.getnframes() / wav.getframerate() == pytest.approx(1.0, abs=0.01)


async def _chunks(pcm: bytes, read: list[int] | None = None) -> AsyncIterator[bytes]:
    for offset in range(0, len(pcm), 3200):
        if read is not None:
            read.append(offset)
        yield pcm[offset : offset + 3200]


async def test_demo_stt_hears_speech_and_answers_the_console() -> None:
    data = engines.DemoVoiceData(transcripts=deque(["what time is it"]))
    entry = SimpleNamespace(entry_id="e", runtime_data=data)
    engine = engines_stt.DemoSpeechToText(entry)  # type: ignore[arg-type]
    metadata = stt.SpeechMetadata(
        language="en",
        format=stt.AudioFormats.WAV,
        codec=stt.AudioCodecs.PCM,
        bit_rate=stt.AudioBitRates.BITRATE_16,
        sample_rate=stt.AudioSampleRates.SAMPLERATE_16000,
        channel=stt.AudioChannels.CHANNEL_MONO,
    )
    quiet = await engine.async_process_audio_stream(metadata, _chunks(silence(2)))
    assert quiet.result is stt.SpeechResultState.ERROR
    assert data.transcripts  # the sentence waits for speech

    # The pause after speech ends the sentence: what follows is not read.
    spoken = tone(300, 1.0) + silence(0.9) + tone(300, 5.0)
    read: list[int] = []
    heard = await engine.async_process_audio_stream(metadata, _chunks(spoken, read))
    assert len(read) * 0.1 == pytest.approx(1.8, abs=0.11)
    assert heard.result is stt.SpeechResultState.SUCCESS
    assert heard.text == "what time is it"
    assert not data.transcripts


def _question(
    hass: HomeAssistant, text: str
) -> tuple[conversation.ConversationInput, conversation.ChatLog]:
    user_input = conversation.ConversationInput(
        text=text,
        context=Context(),
        conversation_id="c1",
        device_id=None,
        satellite_id=None,
        language="en",
        agent_id="conversation.demo_agent",
    )
    chat_log = conversation.ChatLog(hass, "c1")
    chat_log.async_add_user_content(conversation.UserContent(content=text))
    return user_input, chat_log


async def test_demo_agent_answers_after_its_delay(hass: HomeAssistant) -> None:
    data = engines.DemoVoiceData()
    agent = engines_conversation.DemoConversationAgent("e", data)
    assert agent.unique_id == "e-conversation"
    assert agent.supported_languages == "*"
    user_input, chat_log = _question(hass, "tell me a story")
    result = await agent._async_handle_message(user_input, chat_log)
    assert result.response.speech["plain"]["speech"] == engines_conversation.ANSWER
    assert result.conversation_id == "c1"
    assert agent.extra_state_attributes == {
        "question": "tell me a story",
        "conversation_id": "c1",
        "thinking": False,
        "answers": 1,
        "interrupted": 0,
    }


async def test_demo_agent_thinks_until_interrupted(hass: HomeAssistant) -> None:
    data = engines.DemoVoiceData(agent_delay=30.0)
    agent = engines_conversation.DemoConversationAgent("e", data)
    user_input, chat_log = _question(hass, "tell me a long story")
    task = asyncio.create_task(agent._async_handle_message(user_input, chat_log))
    await asyncio.sleep(0.01)
    assert agent.extra_state_attributes["thinking"] is True
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    attributes = agent.extra_state_attributes
    assert (attributes["thinking"], attributes["answers"]) == (False, 0)
    assert attributes["interrupted"] == 1


def test_transcript_of_a_recording() -> None:
    assert voice.transcript_of(Path("/x/what_time-is  it.wav")) == "what time is it"


async def test_say_a_recording(tmp_path: Path) -> None:
    recording = tmp_path / "turn_on_the_light.wav"
    write_wav(recording, tone(300, 0.5), 16000)
    demo_voice = voice.DemoVoice(None, tmp_path)  # type: ignore[arg-type]
    pcm, text = await demo_voice.speech_of(f"{recording}")
    assert len(pcm) == 16000  # 0.5 s of 16 kHz 16-bit
    assert text == "turn on the light"
    _, text = await demo_voice.speech_of(f"{recording} lights on")
    assert text == "lights on"
    with pytest.raises(demo.DemoError, match="No audio file"):
        await demo_voice.speech_of(f"{tmp_path}/missing.wav")
    (tmp_path / "bad.wav").write_bytes(b"not audio")
    with pytest.raises(demo.DemoError, match="Cannot read"):
        await demo_voice.speech_of(f"{tmp_path}/bad.wav")


# ------------------------------------------------------------ media


def test_media_player_of() -> None:
    entities = [
        {"platform": "xiaozhi", "unique_id": "aa-number", "entity_id": "number.x"},
        {
            "platform": "xiaozhi",
            "unique_id": "aa-media_player",
            "entity_id": "media_player.box_speaker",
        },
    ]
    assert media.media_player_of(entities, "aa") == "media_player.box_speaker"
    with pytest.raises(DemoError, match="no media player"):
        media.media_player_of(entities, "bb")


async def test_local_files_are_served_once_asked_for(
    tmp_path: Path, socket_enabled: None
) -> None:
    song = tmp_path / "song.wav"
    song.write_bytes(b"RIFF....WAVE")
    server = media.FileServer()
    try:
        url = await server.url_of(song)
        assert url.endswith("/song.wav")
        async with aiohttp.ClientSession() as session, session.get(url) as answer:
            assert await answer.read() == b"RIFF....WAVE"
        async with (
            aiohttp.ClientSession() as session,
            session.get(url.replace("/song", "x/song")) as answer,
        ):
            assert answer.status == 404
        with pytest.raises(DemoError, match="no such file"):
            await server.url_of(tmp_path / "missing.mp3")
    finally:
        await server.close()
