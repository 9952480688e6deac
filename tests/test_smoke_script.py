"""Tests for the pure helpers of scripts/smoke (no Home Assistant is started)."""

import io
import json
from pathlib import Path
from types import SimpleNamespace
import zipfile

import aiohttp
import homeassistant.components
import pytest

from custom_components.xiaozhi.firmware.releases import parse_releases
from demo import ota_url
from demo.smoke import SmokeError, config, ha_requirements, log, releases, run, venv
from demo.voice_engines import conversation as engines_conversation
from simulator.firmware_image import read_image

COMPONENTS = Path(homeassistant.components.__file__).parent
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def auto_enable_custom_integrations() -> None:
    """Override the suite's fixture: these tests need no Home Assistant."""


# ------------------------------------------------------------ releases to test

PIP_INDEX = """\
homeassistant (2026.11.0)
Available versions: 2026.11.0, 2026.10.4, 2026.10.3, 2026.9.0, 0.7.0.1, 0.19
  INSTALLED: 2026.10.4
"""
RELEASES = ["2026.11.0", "2026.10.4", "2026.10.3", "2026.9.0"]


def test_parse_pip_index() -> None:
    assert venv.parse_pip_index(PIP_INDEX) == RELEASES
    assert venv.parse_pip_index("") == []


@pytest.mark.parametrize(
    ("wanted", "picked"),
    [(None, "2026.11.0"), ("2026.10", "2026.10.4"), ("2026.10.3", "2026.10.3")],
)
def test_pick_release(wanted: str | None, picked: str) -> None:
    assert venv.pick_release(wanted, RELEASES) == picked


@pytest.mark.parametrize(
    ("wanted", "error"),
    [
        ("2026.11.1", "2026.11.1 is not on PyPI"),
        ("2026.12", "no homeassistant 2026.12.x"),
        ("latest", "Not a Home Assistant release number"),
    ],
)
def test_pick_release_refuses(wanted: str, error: str) -> None:
    with pytest.raises(SmokeError, match=error):
        venv.pick_release(wanted, RELEASES)
    with pytest.raises(SmokeError, match="no homeassistant release"):
        venv.pick_release(None, [])


# ------------------------------------------------------------ requirements


def _manifest(folder: Path, domain: str, **fields: object) -> None:
    (folder / domain).mkdir(parents=True)
    (folder / domain / "manifest.json").write_text(json.dumps(fields))


def test_requirements_follow_dependencies(tmp_path: Path) -> None:
    _manifest(tmp_path, "a", requirements=["a==1"], dependencies=["b"])
    _manifest(tmp_path, "b", requirements=["b==2"], after_dependencies=["c"])
    _manifest(tmp_path, "c", requirements=["C==3"], dependencies=["a"])
    _manifest(tmp_path, "unused", requirements=["unused==4"])
    custom = [{"requirements": ["av>=14"], "dependencies": ["missing", "a"]}]
    assert ha_requirements.requirements(tmp_path, ["b"], custom) == [
        "a==1",
        "av>=14",
        "b==2",
        "C==3",
    ]


def test_requirements_of_the_installed_home_assistant(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """What a fresh Home Assistant would install for the smoke configuration."""
    assert ha_requirements.main([*map(str, venv.MANIFESTS), "--domain", "api"]) == 0
    printed = capsys.readouterr().out.split()
    names = {line.split("=")[0].split(">")[0].lower() for line in printed}
    # The voice stack, the integration's own, and the frontend (a default).
    assert {"hassil", "pymicro-vad", "mutagen", "ha-ffmpeg", "av", "pypinyin"} <= names
    assert "home-assistant-frontend" in names
    (frontend,) = json.loads((COMPONENTS / "frontend" / "manifest.json").read_text())[
        "requirements"
    ]
    assert frontend in printed


# ------------------------------------------------------------ the log

LOG = """\
2026-11-28 08:54:01.085+00:00 WARNING (MainThread) [homeassistant.bootstrap] Skip pip
2026-11-28 08:54:01.088+00:00 WARNING (SyncWorker_0) [homeassistant.loader] We found \
a custom integration xiaozhi which has not been tested by Home Assistant.
2026-11-28 08:54:02.000+00:00 ERROR (MainThread) [custom_components.xiaozhi] Boom
Traceback (most recent call last):
  File "x.py", line 1, in <module>
ValueError: boom
2026-10-28 08:54:03.000 INFO (MainThread) [custom_components.xiaozhi] Paired XiaoZhi
2026-10-28 08:54:04.000 WARNING (MainThread) [homeassistant.helpers.frame] Detected \
that custom integration 'xiaozhi' calls a thing
2026-10-28 08:54:05.000 WARNING (MainThread) [custom_components.xiaozhi_demo_voice] x
2026-10-28 08:54:06.000 DEBUG (MainThread) [some.lib] Traceback (most recent call last)
2026-10-28T08:54:07Z something else ERROR in a layout of its own
"""


def test_log_entries_in_both_layouts() -> None:
    entries = log.entries(LOG)
    assert [entry.level for entry in entries] == [
        "WARNING",
        "WARNING",
        "ERROR",
        "INFO",
        "WARNING",
        "WARNING",
        "DEBUG",
        "ERROR",
    ]
    assert entries[2].logger == "custom_components.xiaozhi"
    assert entries[2].text.endswith("ValueError: boom")
    assert entries[2].first_line.endswith("Boom")


def test_log_failures_are_errors_and_tracebacks() -> None:
    failures = log.failures(LOG)
    assert [entry.first_line[:19] for entry in failures] == [
        "2026-11-28 08:54:02",
        "2026-10-28 08:54:06",
        "2026-10-28T08:54:07",
    ]
    assert log.failures("") == []


def test_log_warnings_of_the_integration() -> None:
    warnings = log.integration_warnings(LOG, "xiaozhi")
    assert [entry.logger for entry in warnings] == ["homeassistant.helpers.frame"]


# ------------------------------------------------------------ release source


def test_release_list_is_what_the_integration_reads() -> None:
    listed = releases.release_list("http://127.0.0.1:1", "2.9.0", "esp-box-3", 123)
    (release,) = parse_releases(listed, prereleases=False)
    assert release.version == "2.9.0"
    asset = release.asset_for("esp-box-3", None)
    assert asset is not None
    assert asset.url == "http://127.0.0.1:1/download/v2.9.0_esp-box-3.zip"
    assert asset.size == 123


async def test_release_server(socket_enabled: None) -> None:
    server = releases.ReleaseServer(run.BOARD, run.CHIP)
    await server.start()
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(server.list_url) as response:
                listed = await response.json()
            (release,) = parse_releases(listed, prereleases=False)
            asset = release.asset_for(run.BOARD, None)
            assert asset is not None
            async with session.get(asset.url) as response:
                body = await response.read()
            async with session.get(server.url + "/download/other.zip") as response:
                assert response.status == 404
    finally:
        await server.stop()
    assert body == server.zip
    assert len(body) == asset.size
    assert (server.list_reads, server.downloads) == (1, 1)
    assert releases.RELEASE_VERSION != run.INSTALLED_FIRMWARE


def test_release_zip_holds_the_image() -> None:
    server = releases.ReleaseServer(run.BOARD, run.CHIP)
    # The image sits at its partition's offset in the zip's merged binary.
    with zipfile.ZipFile(io.BytesIO(server.zip)) as zipped:
        merged = zipped.read("merged-binary.bin")
    assert read_image(merged[0x20000:], run.CHIP) == releases.RELEASE_VERSION


# ------------------------------------------------------------ configuration


def test_prepare_config_dir(tmp_path: Path) -> None:
    folder = tmp_path / "config"
    config.prepare_config_dir(folder, 8124, (3, 1), debug=True)
    yaml = (folder / "configuration.yaml").read_text()
    assert "custom_components.xiaozhi: debug" in yaml
    assert "xiaozhi_demo_voice:" in yaml
    for domain in config.CONFIGURED_DOMAINS:
        assert f"\n{domain}:" in f"\n{yaml}"
    store = json.loads((folder / ".storage" / "http").read_text())
    assert (store["version"], store["minor_version"]) == (3, 1)
    assert store["data"]["stable"]["server_port"] == 8124
    for name in ("xiaozhi", "xiaozhi_demo_voice"):
        assert (folder / "custom_components" / name / "manifest.json").is_file()
    config.prepare_config_dir(folder, 8124, (2, 2))
    assert (
        "custom_components.xiaozhi: info" in (folder / "configuration.yaml").read_text()
    )


def test_free_ports_are_free(socket_enabled: None) -> None:
    assert config.free_port() != config.free_port()


def test_device_config() -> None:
    device = run.device_config(run.MQTT_MAC, 8124)
    assert device.ota_url == ota_url(8124)
    assert (device.board, device.chip, device.firmware) == (
        run.BOARD,
        run.CHIP,
        run.INSTALLED_FIRMWARE,
    )
    # Firmware behaviour: a WebSocket device connects when it is used.
    assert device.reconnect_delay is None
    assert not device.websocket_only


# ------------------------------------------------------------ summary


def test_summary() -> None:
    results = [
        run.StepResult("Venv", 1.25, "cached"),
        run.StepResult("Start", 10.0, error="timed out\nmore"),
    ]
    lines = run.summary("2026.11.0", results, 12.0)
    assert lines[1] == "Smoke run against Home Assistant 2026.11.0:"
    assert lines[2] == "  ok      1.2 s  Venv: cached"
    assert lines[3] == "  FAIL   10.0 s  Start: timed out"
    assert lines[-1] == "  FAILED in 12.0 s"
    assert run.summary("x", results[:1], 1.0)[-1] == "  PASSED in 1.0 s"


async def test_steps_record_failures() -> None:
    steps = run.Steps()
    async with steps.step("fine") as step:
        step.outcome = "good"
    with pytest.raises(SmokeError):
        async with steps.step("broken"):
            raise SmokeError("it broke")
    with pytest.raises(TimeoutError):
        async with steps.step("slow"):
            raise TimeoutError
    assert [(r.name, r.outcome, r.error) for r in steps.results] == [
        ("fine", "good", None),
        ("broken", "", "it broke"),
        ("slow", "", "timed out"),
    ]
    assert steps.failed


def test_command_line() -> None:
    args = run.build_parser().parse_args(["--ha", "2026.11", "--debug"])
    assert (args.ha, args.debug, args.rebuild) == ("2026.11", True, False)
    assert args.timeout == run.DEFAULT_TIMEOUT
    assert (ROOT / "scripts" / "smoke").stat().st_mode & 0o111


def test_tts_stops() -> None:
    device = SimpleNamespace(
        timeline=[(1.0, "tts:start"), (2.0, "audio"), (3.0, "tts:stop"), (4.0, "stt")]
    )
    assert run.tts_stops(device) == 1


def test_barge_in_expects_the_demo_agent_s_answer() -> None:
    assert run.ANSWER == engines_conversation.ANSWER
    assert run.AGENT_SLOW > 10 * run.STOP_WITHIN
