"""The JSON-RPC client: id matching, errors, notifications, timeouts, close."""

import asyncio
from typing import Any

import pytest

from aioxiaozhi import (
    ConnectionClosedError,
    McpClient,
    McpError,
    RequestTimeoutError,
)

from .fakes import wait


class Wire:
    """Collects what the client sends and lets a test await it."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.error: BaseException | None = None
        self.notifications: list[tuple[str, dict[str, Any]]] = []

    async def send(self, payload: dict[str, Any]) -> None:
        if self.error is not None:
            raise self.error
        self.sent.append(payload)
        self.queue.put_nowait(payload)

    def on_notification(self, method: str, params: dict[str, Any]) -> None:
        self.notifications.append((method, params))

    async def next(self) -> dict[str, Any]:
        return await wait(self.queue.get())


@pytest.fixture
def wire() -> Wire:
    return Wire()


@pytest.fixture
async def client(wire: Wire) -> McpClient:
    return McpClient(wire.send, wire.on_notification)


def start(
    client: McpClient, method: str = "m", params: Any = None
) -> asyncio.Task[Any]:
    return asyncio.create_task(client.request(method, params, 2.0))


def result(request_id: Any, value: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": value}


async def test_request_payload(client: McpClient, wire: Wire) -> None:
    first = start(client, "initialize", {"a": 1})
    second = start(client, "ping")
    assert await wire.next() == {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"a": 1},
    }
    assert await wire.next() == {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    assert client.pending_count == 2
    assert client.handle_payload(result(1, {"ok": 1})) is None
    assert client.handle_payload(result(2, {})) is None
    assert await wait(first) == {"ok": 1}
    assert await wait(second) == {}
    assert client.pending_count == 0


async def test_out_of_order_replies(client: McpClient, wire: Wire) -> None:
    tasks = [start(client, "tools/call", {"n": n}) for n in range(3)]
    ids = [(await wire.next())["id"] for _ in tasks]
    assert ids == [1, 2, 3]
    for request_id in reversed(ids):
        client.handle_payload(result(request_id, f"answer {request_id}"))
    assert await wait(asyncio.gather(*tasks)) == ["answer 1", "answer 2", "answer 3"]


@pytest.mark.parametrize(
    ("error", "message", "code"),
    [
        ({"code": -32601, "message": "Method not found"}, "Method not found", -32601),
        ({"message": "Unknown tool: x"}, "Unknown tool: x", None),
        ({"code": True, "message": "m"}, "m", None),
        ({"code": -32603.0, "message": "m"}, "m", None),
        ({"code": -32603}, "{'code': -32603}", -32603),
        ("plain failure", "plain failure", None),
        (None, "None", None),
    ],
)
async def test_error_reply(
    client: McpClient, wire: Wire, error: Any, message: str, code: int | None
) -> None:
    task = start(client)
    request_id = (await wire.next())["id"]
    client.handle_payload({"jsonrpc": "2.0", "id": request_id, "error": error})
    with pytest.raises(McpError) as err:
        await wait(task)
    assert err.value.message == message
    assert str(err.value) == message
    assert err.value.code == code
    assert client.pending_count == 0


@pytest.mark.parametrize("bad_id", [True, "1", 1.0, None, 99])
async def test_reply_with_unusable_id_is_ignored(
    client: McpClient, wire: Wire, bad_id: Any
) -> None:
    task = start(client)
    await wire.next()
    assert client.handle_payload(result(bad_id, "wrong")) is None
    assert (
        client.handle_payload(
            {"jsonrpc": "2.0", "id": bad_id, "error": {"message": "wrong"}}
        )
        is None
    )
    assert client.pending_count == 1
    assert not task.done()
    client.handle_payload(result(1, "right"))
    assert await wait(task) == "right"


async def test_duplicate_reply_is_ignored(client: McpClient, wire: Wire) -> None:
    first = start(client)
    second = start(client)
    await wire.next()
    await wire.next()
    client.handle_payload(result(1, "first"))
    # Again before the waiting request has run, then after it has finished.
    client.handle_payload(result(1, "again"))
    client.handle_payload({"jsonrpc": "2.0", "id": 1, "error": {"message": "x"}})
    assert await wait(first) == "first"
    client.handle_payload(result(1, "late"))
    assert client.pending_count == 1
    assert not second.done()
    client.handle_payload(result(2, "second"))
    assert await wait(second) == "second"


@pytest.mark.parametrize(
    "payload",
    [
        {"jsonrpc": "2.0", "id": 1},
        {"jsonrpc": "2.0", "id": 1, "method": 5},
        None,
        "text",
        [result(1, "in a list")],
    ],
)
async def test_unusable_payload_is_ignored(
    client: McpClient, wire: Wire, payload: Any
) -> None:
    task = start(client)
    await wire.next()
    assert client.handle_payload(payload) is None
    assert client.pending_count == 1
    assert wire.notifications == []
    client.handle_payload(result(1, None))
    assert await wait(task) is None


@pytest.mark.parametrize(
    ("payload", "params"),
    [
        (
            {
                "jsonrpc": "2.0",
                "method": "notifications/state_changed",
                "params": {"newState": "listening", "oldState": "idle"},
            },
            {"newState": "listening", "oldState": "idle"},
        ),
        ({"jsonrpc": "2.0", "method": "notifications/state_changed"}, {}),
        (
            {"jsonrpc": "2.0", "method": "notifications/state_changed", "params": [1]},
            {},
        ),
        (
            {"method": "notifications/state_changed", "id": None, "params": "x"},
            {},
        ),
    ],
)
async def test_notification(
    client: McpClient, wire: Wire, payload: dict[str, Any], params: dict[str, Any]
) -> None:
    assert client.handle_payload(payload) is None
    assert wire.notifications == [("notifications/state_changed", params)]
    assert wire.sent == []


async def test_notification_without_handler(wire: Wire) -> None:
    client = McpClient(wire.send)
    assert (
        client.handle_payload({"jsonrpc": "2.0", "method": "notifications/x"}) is None
    )
    assert wire.notifications == []


@pytest.mark.parametrize("request_id", [7, "abc"])
async def test_request_from_device_is_refused(
    client: McpClient, wire: Wire, request_id: Any
) -> None:
    answer = client.handle_payload(
        {"jsonrpc": "2.0", "id": request_id, "method": "sampling/createMessage"}
    )
    assert answer == {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": -32601, "message": "Method not found"},
    }
    assert wire.notifications == []


async def test_timeout(client: McpClient, wire: Wire) -> None:
    with pytest.raises(RequestTimeoutError) as err:
        await client.request("tools/list", {"cursor": ""}, 0.01)
    assert err.value.method == "tools/list"
    assert err.value.timeout == 0.01
    assert str(err.value) == "tools/list got no answer within 0.01 s"
    assert client.pending_count == 0
    assert wire.sent[0]["method"] == "tools/list"
    # A late answer changes nothing.
    assert client.handle_payload(result(1, "late")) is None


async def test_send_failure_removes_pending(client: McpClient, wire: Wire) -> None:
    wire.error = ConnectionClosedError("gone")
    with pytest.raises(ConnectionClosedError, match="gone"):
        await client.request("ping", None, 2.0)
    assert client.pending_count == 0


async def test_cancelled_request_removes_pending(client: McpClient, wire: Wire) -> None:
    task = start(client)
    await wire.next()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert client.pending_count == 0


async def test_close_fails_every_pending_request(client: McpClient, wire: Wire) -> None:
    tasks = [start(client) for _ in range(3)]
    for _ in tasks:
        await wire.next()
    client.close("socket gone")
    results = await wait(asyncio.gather(*tasks, return_exceptions=True))
    assert [type(res) for res in results] == [ConnectionClosedError] * 3
    assert [str(res) for res in results] == ["socket gone"] * 3
    assert client.pending_count == 0
    with pytest.raises(ConnectionClosedError, match="socket gone"):
        await client.request("ping", None, 2.0)
    # The first reason stays.
    client.close("later")
    with pytest.raises(ConnectionClosedError, match="socket gone"):
        await client.request("ping", None, 2.0)
    assert len(wire.sent) == 3


async def test_close_keeps_answered_requests(client: McpClient, wire: Wire) -> None:
    task = start(client)
    await wire.next()
    client.handle_payload(result(1, "done"))
    client.close("gone")
    assert await wait(task) == "done"


async def test_fail_request(client: McpClient, wire: Wire) -> None:
    first = start(client)
    second = start(client)
    await wire.next()
    await wire.next()
    client.fail_request(2, 'bad "x" value')
    with pytest.raises(McpError) as err:
        await wait(second)
    assert err.value.message == 'bad "x" value'
    assert err.value.code is None
    client.fail_request(2, "again")
    client.fail_request(42, "unknown")
    assert not first.done()
    client.handle_payload(result(1, "ok"))
    assert await wait(first) == "ok"
