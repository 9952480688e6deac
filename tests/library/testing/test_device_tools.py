"""Built-in tools and their effects on the simulated state."""

import json
from typing import Any

import pytest

from aioxiaozhi.testing import TINY_JPEG, DeviceConfig, SimulatedDevice, device_status
from aioxiaozhi.testing.device_tools import FIRMWARE

from .conftest import WAIT, Conn, DeviceFactory, FakeServer


def text_of(reply: dict[str, Any]) -> str:
    assert reply["result"]["isError"] is False
    return reply["result"]["content"][0]["text"]


async def connect(
    server: FakeServer, make_device: DeviceFactory, **kwargs: Any
) -> tuple[SimulatedDevice, Conn]:
    index = len(server.conns)
    device = make_device(**kwargs)
    await device.connect()
    return device, await server.conn(index)


async def test_device_status_sections(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    _device, conn = await connect(server, make_device, battery=True)
    text = text_of(await conn.call("self.get_device_status"))
    assert text == (
        '{"audio_speaker":{"volume":70},"screen":{"brightness":80,"theme":"light"},'
        '"battery":{"level":85,"charging":false},'
        '"network":{"type":"wifi","ssid":"home","signal":"strong"},'
        '"chip":{"temperature":41.5}}'
    )
    bare = make_device(screen=False, temperature=False, mac="aa:bb:cc:dd:ee:02")
    assert device_status(bare) == {
        "audio_speaker": {"volume": 70},
        "screen": {},
        "network": {"type": "wifi", "ssid": "home", "signal": "strong"},
    }


async def test_setters_change_state(connected: tuple[SimulatedDevice, Conn]) -> None:
    device, conn = connected
    calls = [
        ("self.audio_speaker.set_volume", {"volume": 0}, "true"),
        ("self.screen.set_brightness", {"brightness": 100}, "true"),
        ("self.screen.set_theme", {"theme": "dark"}, "true"),
        # the firmware answers a successful "false" for an unknown theme
        ("self.screen.set_theme", {"theme": "blue"}, "false"),
    ]
    for name, arguments, expected in calls:
        assert text_of(await conn.call(name, arguments)) == expected
    state = device.state
    assert (state.volume, state.brightness, state.theme) == (0, 100, "dark")
    status = json.loads(text_of(await conn.call("self.get_device_status")))
    assert status["audio_speaker"] == {"volume": 0}
    assert status["screen"] == {"brightness": 100, "theme": "dark"}


async def test_take_photo_uploads_like_the_firmware(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device, conn = await connect(
        server, make_device, camera=True, client_id="cid-9", mac="aa:bb:cc:dd:ee:09"
    )
    vision = {"url": server.url("/vision"), "token": "vis-token"}
    await conn.request("initialize", {"capabilities": {"vision": vision}})
    reply = await conn.call("self.camera.take_photo", {"question": "What is it?"})
    assert text_of(reply) == server.upload_body
    upload = server.uploads[-1]
    assert upload["path"] == "/vision"
    assert upload["headers"]["Authorization"] == "Bearer vis-token"
    assert upload["headers"]["Device-Id"] == "aa:bb:cc:dd:ee:09"
    assert upload["headers"]["Client-Id"] == "cid-9"
    assert upload["headers"]["Content-Type"] == (
        "multipart/form-data; boundary=----ESP32_CAMERA_BOUNDARY"
    )
    assert upload["chunked"]
    assert upload["fields"] == [
        {
            "name": "question",
            "filename": None,
            "content_type": None,
            "data": b"What is it?",
        },
        {
            "name": "file",
            "filename": "camera.jpg",
            "content_type": "image/jpeg",
            "data": TINY_JPEG,
        },
    ]
    assert TINY_JPEG.startswith(b"\xff\xd8\xff")
    assert TINY_JPEG.endswith(b"\xff\xd9")
    assert device.photos_taken == 1


async def test_take_photo_failures(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    _device, conn = await connect(server, make_device, camera=True)
    reply = await conn.call("self.camera.take_photo", {"question": "q"})
    assert reply["error"]["message"] == "Image explain URL or token is not set"

    await conn.request(
        "initialize",
        {"capabilities": {"vision": {"url": server.url("/vision")}}},
    )
    server.upload_status = 401
    reply = await conn.call("self.camera.take_photo", {"question": "q"})
    assert reply["error"]["message"] == "Failed to upload photo"
    assert "Authorization" not in server.uploads[-1]["headers"]

    await conn.request(
        "initialize", {"capabilities": {"vision": {"url": "http://127.0.0.1:1/v"}}}
    )
    reply = await conn.call("self.camera.take_photo", {"question": "q"})
    assert reply["error"]["message"] == "Failed to connect to explain URL"


async def test_snapshot_uploads_screenshot(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device, conn = await connect(server, make_device)
    url = server.url("/snapshot")
    assert text_of(await conn.call("self.screen.snapshot", {"url": url})) == "true"
    upload = server.uploads[-1]
    assert upload["path"] == "/snapshot"
    assert upload["fields"] == [
        {
            "name": "file",
            "filename": "screenshot.jpg",
            "content_type": "image/jpeg",
            "data": TINY_JPEG,
        }
    ]
    assert "Authorization" not in upload["headers"]
    assert upload["headers"]["Content-Type"] == (
        "multipart/form-data; boundary=----ESP32_SCREEN_SNAPSHOT_BOUNDARY"
    )
    await conn.call("self.screen.snapshot", {"url": url, "quality": 5})
    assert device.snapshots == [(url, 80), (url, 5)]

    server.upload_status = 500
    reply = await conn.call("self.screen.snapshot", {"url": url})
    assert reply["error"]["message"] == "Unexpected status code: 500"
    reply = await conn.call("self.screen.snapshot", {"url": "http://127.0.0.1:1/s"})
    assert reply["error"]["message"] == "Failed to open URL: http://127.0.0.1:1/s"
    reply = await conn.call("self.screen.snapshot", {"url": url, "quality": 0})
    assert reply["error"]["message"] == "Property 'quality': value 0 is below minimum 1"


async def test_preview_image(server: FakeServer, make_device: DeviceFactory) -> None:
    device, conn = await connect(server, make_device)
    url = server.url("/image.jpg")
    assert text_of(await conn.call("self.screen.preview_image", {"url": url})) == "true"
    assert device.previewed_images == [len(server.image_bytes)]
    server.image_status = 404
    reply = await conn.call("self.screen.preview_image", {"url": url})
    assert reply["error"]["message"] == "Unexpected status code: 404"
    reply = await conn.call("self.screen.preview_image", {"url": "not a url"})
    assert reply["error"]["message"] == "Failed to open URL: not a url"


async def test_user_only_info_tools(connected: tuple[SimulatedDevice, Conn]) -> None:
    device, conn = connected
    info = json.loads(text_of(await conn.call("self.get_system_info")))
    assert info["mac_address"] == device.config.mac
    assert info["uuid"] == device.config.client_id
    assert info["application"]["version"] == "2.0.4"
    assert info["board"]["name"] == "xiaozhi-sim"
    assert info["board"]["mac"] == device.config.mac
    assert json.loads(text_of(await conn.call("self.screen.get_info"))) == {
        "width": 320,
        "height": 240,
        "monochrome": False,
    }
    await conn.call("self.assets.set_download_url", {"url": "http://assets"})
    assert device.assets_download_url == "http://assets"
    await conn.call("self.upgrade_firmware", {"url": "http://fw"})
    assert device.upgrade_urls == ["http://fw"]


async def test_reboot_tool_answers_then_reconnects(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device, conn = await connect(server, make_device, camera=True)
    await conn.request(
        "initialize", {"capabilities": {"vision": {"url": server.url("/vision")}}}
    )
    assert text_of(await conn.call("self.reboot")) == "true"
    await conn.wait_closed()
    second = await server.conn(1)
    await device.wait_for(lambda: device.connect_count == 2, WAIT)
    assert device.reboot_count == 1
    assert device.close_reasons == ["reboot"]
    assert device.vision_url is None
    assert json.loads(second.texts[0])["type"] == "hello"


async def test_reboot_is_deferred_outside_a_call(
    connected: tuple[SimulatedDevice, Conn],
) -> None:
    device, _conn = connected
    device.after_reply(device.reboot)
    await device.wait_for(lambda: device.reboot_count == 1)


@pytest.mark.parametrize("user_tools", [True, False])
async def test_user_tools_flag(
    server: FakeServer, make_device: DeviceFactory, user_tools: bool
) -> None:
    _device, conn = await connect(server, make_device, user_tools=user_tools)
    reply = await conn.call("self.reboot")
    if user_tools:
        assert text_of(reply) == "true"
    else:
        assert reply["error"]["message"] == "Unknown tool: self.reboot"


def test_firmware_data_is_what_the_simulator_says() -> None:
    """firmware.json, read by the protocol tests and the bench, stays true."""
    device = SimulatedDevice(DeviceConfig(camera=True, battery=True))
    assert [tool.to_json() for tool in device.tools] == FIRMWARE["tools"]
    assert json.loads(device._hello_text()) == FIRMWARE["hello"]
    assert device_status(device) == FIRMWARE["status"]
    assert FIRMWARE["server_info"] == {
        "name": device.config.board,
        "version": device.config.firmware,
    }
