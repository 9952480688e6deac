"""OTA check, activation polling, provisioning and the run loop."""

import asyncio
import hashlib
import hmac
import json
import logging
from typing import Any

import pytest

from aioxiaozhi.testing import OtaError, SimulatedDevice
from aioxiaozhi.testing.ota import activate_url, is_newer_version, parse_ota_response

from .conftest import WAIT, DeviceFactory, FakeServer

WS = {"websocket": {"url": "ws://127.0.0.1:1/ws"}}


def ws_answer(server: FakeServer, **extra: Any) -> dict[str, Any]:
    return {"websocket": {"url": server.ws_url, "token": "tok-1", **extra}}


def activation_answer(challenge: str | None = "ch-1") -> dict[str, Any]:
    activation: dict[str, Any] = {
        "code": "123456",
        "message": "Enter 123456 in Home Assistant",
        "timeout_ms": 30000,
    }
    if challenge is not None:
        activation["challenge"] = challenge
    return {"activation": activation}


async def test_check_ota_request(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device = make_device(ota_url=server.ota_url, client_id="cid-1", ws_url=None)
    server.ota_default = (200, ws_answer(server, version=2))
    result = await device.check_ota()
    headers, body = server.ota_requests[0]
    assert headers["Device-Id"] == "aa:bb:cc:dd:ee:01"
    assert headers["Client-Id"] == "cid-1"
    assert headers["User-Agent"] == "xiaozhi-sim/2.0.4"
    assert headers["Accept-Language"] == "zh-CN"
    assert headers["Activation-Version"] == "1"
    assert headers["Content-Type"] == "application/json"
    assert "Serial-Number" not in headers
    assert body["version"] == 2
    assert body["mac_address"] == "aa:bb:cc:dd:ee:01"
    assert body["uuid"] == "cid-1"
    assert body["flash_size"] > 0
    assert body["chip_model_name"] == "esp32s3"
    assert body["application"]["version"] == "2.0.4"
    assert body["board"]["type"] == "xiaozhi-sim"
    assert body["board"]["name"] == "xiaozhi-sim"
    assert body["board"]["mac"] == "aa:bb:cc:dd:ee:01"
    assert result.websocket == {"url": server.ws_url, "token": "tok-1", "version": 2}
    assert not result.needs_activation
    assert (device.ws_url, device.token, device.protocol_version) == (
        server.ws_url,
        "tok-1",
        2,
    )
    await device.connect()
    conn = await server.conn()
    assert conn.headers["Authorization"] == "Bearer tok-1"
    assert conn.headers["Protocol-Version"] == "2"


async def test_websocket_settings_are_merged_key_by_key(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device = make_device(ota_url=server.ota_url)
    server.ota_answers = [
        (200, ws_answer(server, version=3)),
        (200, {"websocket": {"url": "ws://other/ws", "version": 0, "odd": [1]}}),
    ]
    await device.check_ota()
    await device.check_ota()
    assert device.ws_url == "ws://other/ws"
    assert device.token == "tok-1"
    assert device.protocol_version == 3
    assert device.websocket_settings == {
        "url": "ws://other/ws",
        "token": "tok-1",
        "version": 0,
    }


async def test_ota_sections_are_recorded(
    server: FakeServer, make_device: DeviceFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "aioxiaozhi.testing")
    device = make_device(ota_url=server.ota_url)
    server.ota_default = (
        200,
        {
            "mqtt": {"endpoint": "mqtt.example", "port": 1883, "tls": True},
            "server_time": {"timestamp": 1700000000000, "timezone_offset": 480},
            "firmware": {"version": "2.1.0", "url": "http://fw/2.1.0.bin"},
        },
    )
    result = await device.check_ota()
    assert device.mqtt_config == {"endpoint": "mqtt.example", "port": 1883}
    assert device.server_time == {"timestamp": 1700000000000, "timezone_offset": 480}
    assert result.firmware is not None
    assert result.firmware.newer
    assert device.firmware_offer == result.firmware
    assert "mqtt mqtt.example" in caplog.text
    assert "firmware 2.1.0 offered" in caplog.text


@pytest.mark.parametrize(
    ("firmware", "newer", "force"),
    [
        ({"version": "2.0.4", "url": "u"}, False, False),
        ({"version": "2.0.4", "url": "u", "force": 1}, True, True),
        ({"version": "2.0.4", "url": "u", "force": True}, False, False),
        ({"version": "1.9", "url": "u"}, False, False),
        ({"version": "2.0.4.1", "url": "u"}, True, False),
        ({"version": "2.0", "url": "u"}, False, False),
    ],
)
def test_firmware_offers(firmware: dict[str, Any], newer: bool, force: bool) -> None:
    result = parse_ota_response({"firmware": firmware}, "2.0.4")
    assert result.firmware is not None
    assert (result.firmware.newer, result.firmware.force) == (newer, force)


def test_parse_edge_cases() -> None:
    result = parse_ota_response(
        {
            "firmware": {"version": 2},
            "server_time": {"timezone_offset": 1},
            "activation": {"code": 1, "challenge": None, "timeout_ms": "x"},
        },
        "1.0",
    )
    assert result.firmware is None
    assert result.server_time is None
    assert result.activation is not None
    assert not result.needs_activation
    with pytest.raises(OtaError):
        parse_ota_response([], "1.0")
    assert is_newer_version("1.0.0-beta", "1.0.1")
    assert not is_newer_version("1.x", "1.0")
    assert activate_url("http://h/ota/") == "http://h/ota/activate"
    assert activate_url("http://h/ota") == "http://h/ota/activate"


@pytest.mark.parametrize(
    ("status", "body"),
    [(500, {}), (404, "nope"), (200, "not json"), (200, [1, 2])],
)
async def test_check_ota_failures(
    server: FakeServer, make_device: DeviceFactory, status: int, body: Any
) -> None:
    device = make_device(ota_url=server.ota_url)
    server.ota_default = (status, body)
    with pytest.raises(OtaError) as err:
        await device.check_ota()
    if status != 200:
        assert err.value.status == status


async def test_check_ota_unreachable_or_unset(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device = make_device(ota_url="http://127.0.0.1:1/ota/")
    with pytest.raises(OtaError, match="request failed"):
        await device.check_ota()
    with pytest.raises(OtaError, match="No OTA URL"):
        await make_device(mac="aa:bb:cc:dd:ee:02").check_ota()


async def test_provision_with_activation(
    server: FakeServer, make_device: DeviceFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "aioxiaozhi.testing")
    device = make_device(ota_url=server.ota_url, ws_url=None)
    server.ota_answers = [(200, activation_answer()), (200, ws_answer(server))]
    server.activate_statuses = [202, 202, 200]
    result = await device.provision()
    assert result.websocket is not None
    assert device.activation_code == "123456"
    assert await device.wait_activation_code() == "123456"
    assert device.activated
    assert len(server.ota_requests) == 2
    assert len(server.activate_requests) == 3
    headers, body = server.activate_requests[0]
    assert body == "{}"
    assert headers["Activation-Version"] == "1"
    assert headers["Device-Id"] == "aa:bb:cc:dd:ee:01"
    assert "Activation code: 123456" in caplog.text
    assert "tok-1" not in caplog.text
    assert device.ws_url == server.ws_url


async def test_activation_with_serial_number(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device = make_device(ota_url=server.ota_url, serial_number="SN-1", hmac_key="k")
    server.ota_answers = [(200, activation_answer("abc")), (200, ws_answer(server))]
    await device.provision()
    headers, body = server.activate_requests[0]
    assert headers["Activation-Version"] == "2"
    assert headers["Serial-Number"] == "SN-1"
    assert json.loads(body) == {
        "algorithm": "hmac-sha256",
        "serial_number": "SN-1",
        "challenge": "abc",
        "hmac": hmac.new(b"k", b"abc", hashlib.sha256).hexdigest(),
    }
    assert server.ota_requests[0][0]["Activation-Version"] == "2"


async def test_activation_errors_are_retried(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device = make_device(ota_url=server.ota_url)
    server.ota_answers = [(200, activation_answer()), (200, ws_answer(server))]
    server.activate_statuses = [500, 403, 200]
    await device.provision()
    assert device.activation_attempts == 3


async def test_code_without_challenge_polls_nothing(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device = make_device(ota_url=server.ota_url, activation_retry_delay=0.001)
    server.ota_answers = [(200, activation_answer(None)), (200, ws_answer(server))]
    await device.provision()
    assert server.activate_requests == []
    assert len(server.ota_requests) == 2
    assert await device.activate() == "failed"


async def test_activation_network_failure(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device = make_device(ota_url=server.ota_url)
    server.ota_default = (200, activation_answer())
    await device.check_ota()
    assert await device.activate("http://127.0.0.1:1/ota/") == "failed"


async def test_ota_failures_are_retried_then_raised(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device = make_device(ota_url=server.ota_url)
    server.ota_answers = [(500, {}), (503, {}), (200, ws_answer(server))]
    await device.provision()
    assert device.ota_checks == 3

    failing = make_device(
        ota_url=server.ota_url, mac="aa:bb:cc:dd:ee:02", ota_retry_delay=0.001
    )
    server.ota_default = (500, {})
    with pytest.raises(OtaError):
        await failing.provision()
    assert failing.ota_checks == 10


async def test_provision_timeout(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device = make_device(ota_url=server.ota_url)
    server.ota_default = (200, activation_answer())
    server.activate_statuses = [202] * 1000
    with pytest.raises(TimeoutError):
        await device.provision(timeout=0.2)


async def test_a_pending_code_is_polled_until_entered(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    """As the firmware: ten polls, the OTA check again, and on, never giving up."""
    device = make_device(ota_url=server.ota_url, activation_poll_interval=0.001)
    server.ota_answers = [(200, activation_answer())] * 3 + [(200, ws_answer(server))]
    server.activate_statuses = [202] * 30
    await device.provision()
    assert device.activation_attempts == 30
    assert len(server.ota_requests) == 4
    # No deadline of its own: a code lives ten minutes, the device waits it out.
    assert device.config.provision_timeout is None


async def test_run_provisions_then_connects(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device = make_device(ota_url=server.ota_url, ws_url=None)
    server.ota_answers = [(200, activation_answer()), (200, ws_answer(server))]
    server.activate_statuses = [202, 200]
    task = device.start()
    assert device.start() is task
    assert await device.wait_activation_code() == "123456"
    await device.wait_connected(WAIT)
    conn = await server.conn()
    assert conn.headers["Authorization"] == "Bearer tok-1"
    await device.stop()
    assert task.done()
    assert not device.connected


async def test_reboot_checks_ota_again(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device = make_device(ota_url=server.ota_url, ws_url=None)
    server.ota_default = (200, ws_answer(server))
    device.start()
    await device.wait_connected(WAIT)
    await (await server.conn()).call("self.reboot")
    await server.conn(1)
    await device.wait_for(lambda: device.connect_count == 2)
    assert len(server.ota_requests) == 2


async def test_reboot_with_failing_ota_stays_offline(
    server: FakeServer, make_device: DeviceFactory, caplog: pytest.LogCaptureFixture
) -> None:
    device = make_device(ota_url=server.ota_url, ota_retry_delay=0.001)
    server.ota_default = (200, ws_answer(server))
    await device.provision()
    await device.connect()
    server.ota_default = (500, {})
    await device.reboot()
    reconnect = device._reconnect_task
    assert reconnect is not None
    await asyncio.wait({reconnect})
    assert not device.connected
    assert "provisioning after reboot failed" in caplog.text


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ({}, "no_websocket_url"),
        (None, "provisioning_failed"),
    ],
)
async def test_run_stays_offline(
    server: FakeServer,
    make_device: DeviceFactory,
    answer: dict[str, Any] | None,
    reason: str,
) -> None:
    device = make_device(ota_url=server.ota_url, ws_url=None, ota_retry_delay=0.001)
    server.ota_default = (500, {}) if answer is None else (200, answer)
    task = device.start()
    await device.wait_for(lambda: device.offline_reason == reason)
    assert server.conns == []
    assert not device.connected
    assert not task.done()
    await device.stop()
    assert task.done()


async def test_run_without_ota(server: FakeServer, make_device: DeviceFactory) -> None:
    device = make_device()
    device.start()
    await device.wait_connected(WAIT)
    assert device.ota_checks == 0


async def test_run_retries_failed_connects(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    server.hello = None
    device = make_device(hello_timeout=0.05)
    device.start()
    await device.wait_for(lambda: len(server.conns) >= 2)
    server.hello = {"type": "hello", "transport": "websocket", "session_id": "s"}
    await device.wait_connected(WAIT)


async def test_stop_cancels_everything(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device = make_device(ota_url=server.ota_url)
    server.ota_default = (200, activation_answer())
    server.activate_statuses = [202] * 1000
    device.start()
    await device.wait_activation_code()
    await device.stop()
    assert not device._tasks
    await device.stop()


def test_wait_activation_code_times_out() -> None:
    device = SimulatedDevice()

    async def scenario() -> None:
        with pytest.raises(TimeoutError):
            await device.wait_activation_code(timeout=0.01)

    asyncio.run(scenario())
