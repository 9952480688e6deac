"""The command line: parsing, configurations, running and Ctrl-C."""

import asyncio
import json
import logging
from pathlib import Path
import signal
import subprocess
import sys

import pytest

from aioxiaozhi.testing import cli

from .conftest import WAIT, FakeServer

ROOT = Path(__file__).resolve().parents[2]


def test_parser_requires_a_target() -> None:
    parser = cli.build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args([])
    with pytest.raises(SystemExit):
        parser.parse_args(["--url", "ws://h/", "--ota-url", "http://h/ota/"])
    args = parser.parse_args(["--ota-url", "http://h/ota/"])
    assert args.ota_url == "http://h/ota/"
    assert args.count == 1
    assert args.protocol_version == 1


def test_configs_from_args(tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([{"name": "take_photo"}]), encoding="utf-8")
    args = cli.build_parser().parse_args(
        [
            "--url",
            "ws://h/ws",
            "--token",
            "t",
            "--mac",
            "AA:BB:CC:DD:EE:FE",
            "--count",
            "3",
            "--board",
            "box",
            "--firmware",
            "1.2.3",
            "--tools",
            str(tools),
            "--camera",
            "--no-screen",
            "--battery",
            "--protocol-version",
            "3",
            "--idle-timeout",
            "30",
            "--no-reconnect",
            "--other-implementation",
            "--notifications",
        ]
    )
    configs = cli.configs_from_args(args)
    assert [config.mac for config in configs] == [
        "aa:bb:cc:dd:ee:fe",
        "aa:bb:cc:dd:ee:ff",
        "aa:bb:cc:dd:ef:00",
    ]
    assert len({config.client_id for config in configs}) == 3
    assert configs[0].client_id == cli.client_id_for("aa:bb:cc:dd:ee:fe")
    first = configs[0]
    assert (first.ws_url, first.token, first.ota_url) == ("ws://h/ws", "t", None)
    assert (first.board, first.firmware, first.protocol_version) == ("box", "1.2.3", 3)
    assert (first.camera, first.screen, first.battery) == (True, False, True)
    assert first.idle_timeout == 30
    assert first.reconnect_delay is None
    assert first.other_implementation
    assert first.notifications
    assert [tool.name for tool in first.extra_tools] == ["take_photo"]

    plain = cli.configs_from_args(cli.build_parser().parse_args(["--url", "ws://h"]))
    assert plain[0].reconnect_delay == 5.0
    assert plain[0].extra_tools == ()


def test_increment_mac() -> None:
    assert cli.increment_mac("ff:ff:ff:ff:ff:ff", 1) == "00:00:00:00:00:00"
    for bad in ("aa:bb", "zz:bb:cc:dd:ee:ff", "aabbccddeeff00"):
        with pytest.raises(ValueError, match="Invalid MAC"):
            cli.increment_mac(bad, 1)


@pytest.mark.parametrize(
    "argv",
    [
        ["--url", "ws://h", "--count", "0"],
        ["--url", "ws://h", "--mac", "nope"],
        ["--url", "ws://h", "--tools", "/nonexistent/tools.json"],
    ],
)
def test_main_rejects_bad_arguments(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as err:
        cli.main(argv)
    assert err.value.code == 2


def test_main_runs_and_swallows_ctrl_c(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def fake_run(configs: list[object]) -> None:
        seen.append([config.mac for config in configs])  # type: ignore[attr-defined]
        raise KeyboardInterrupt

    logger = logging.getLogger("aioxiaozhi.testing")
    level = logger.level
    monkeypatch.setattr(cli, "_run", fake_run)
    try:
        assert cli.main(["--url", "ws://h", "--count", "2", "-v"]) == 0
        assert logger.level == logging.DEBUG
    finally:
        logger.setLevel(level)
    assert seen == [["aa:bb:cc:dd:ee:01", "aa:bb:cc:dd:ee:02"]]


@pytest.mark.parametrize("signals", [False, True])
async def test_run_devices_until_stopped(server: FakeServer, signals: bool) -> None:
    args = cli.build_parser().parse_args(
        ["--url", server.ws_url, "--count", "2", "--reconnect-delay", "0.01"]
    )
    stop = asyncio.Event()
    task = asyncio.create_task(
        cli.run_devices(
            cli.configs_from_args(args), stop=stop, install_signal_handlers=signals
        )
    )
    first = await server.conn(0)
    second = await server.conn(1)
    assert {first.headers["Device-Id"], second.headers["Device-Id"]} == {
        "aa:bb:cc:dd:ee:01",
        "aa:bb:cc:dd:ee:02",
    }
    stop.set()
    async with asyncio.timeout(WAIT):
        await task
    await first.wait_closed()
    await second.wait_closed()


def test_help_runs_as_a_module() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "aioxiaozhi.testing", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0
    assert "--ota-url" in result.stdout
    assert "--count" in result.stdout


async def test_ctrl_c_stops_cleanly(server: FakeServer) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "aioxiaozhi.testing",
        "--url",
        server.ws_url,
        "--token",
        "secret-token-123",
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        conn = await server.conn(0, timeout=30)
        await conn.frame(lambda f: f.get("type") == "hello")
        conn_reply = await conn.request("initialize", {})
        assert "result" in conn_reply
        process.send_signal(signal.SIGINT)
        async with asyncio.timeout(30):
            _stdout, stderr = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0
    log = stderr.decode()
    assert "connected, session sess-1" in log
    assert "stopping 1 device(s)" in log
    assert "secret-token-123" not in log
    assert "secr***" in log
    await conn.wait_closed()
