"""Tool call latency: the integration's path and the action, against raw aiohttp.

Variants, measured in the same Home Assistant and interleaved in every round
(the order rotates each round, so drift and load hit all of them alike):

``raw``
    a bare aiohttp server sends the tool call frame to the same fast device
    and reads the reply: the transport floor.
``dispatch``
    the same, but a reader task owns the socket, decodes each reply and
    resolves the waiting request by id, as any server must that has several
    requests in flight on one link: the floor of such a design (shown for
    reference; targets compare with ``raw``).
``call``
    ``XiaozhiRuntime.commands.async_call_tool("self.audio_speaker.set_volume", ...)``:
    argument validation, JSON-RPC request, frame encoding, the WebSocket
    view's reader, reply decoding and matching.
``action``
    the ``xiaozhi.call_tool`` action through Home Assistant's service layer
    (schema, device lookup, response).
``noop``
    an action of the same shape and schema that answers without the device:
    the service layer's own cost.
"""

import asyncio
from collections.abc import Awaitable, Callable
import time
from typing import Any

import aiohttp
from homeassistant.const import ATTR_DEVICE_ID
from homeassistant.core import ServiceCall, ServiceResponse, SupportsResponse

from custom_components.xiaozhi.const import DOMAIN
from custom_components.xiaozhi.protocol.firmware import VOLUME_TOOL
from custom_components.xiaozhi.services import (
    ATTR_ARGUMENTS,
    ATTR_TOOL,
    CALL_TOOL_SCHEMA,
    SERVICE_CALL_TOOL,
)

from .device import DeviceScript, FastDevice, RawServer
from .harness import Home, runtime, wait_connected
from .stats import ratio, summary_us

NOOP_DOMAIN = "bench"

type Variant = Callable[[int], Awaitable[int]]


async def _noop_call_tool(call: ServiceCall) -> ServiceResponse:
    """Answer like ``xiaozhi.call_tool`` without asking any device."""
    del call
    return {"is_error": False, "text": "true", "json": True}


async def run_interleaved(
    variants: dict[str, Variant], *, iterations: int, warmup: int
) -> dict[str, list[int]]:
    """Run every variant once per round, rotating the order; return samples."""
    names = list(variants)
    samples: dict[str, list[int]] = {name: [] for name in names}
    for round_index in range(warmup + iterations):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            elapsed = await variants[name](round_index % 101)
            if round_index >= warmup:
                samples[name].append(elapsed)
    return samples


class ToolCallRig:
    """One fast device on Home Assistant and one on a raw aiohttp server."""

    def __init__(self, home: Home, script: DeviceScript) -> None:
        """Remember where to connect; :meth:`start` does the work."""
        self.home = home
        self.script = script
        self.http: aiohttp.ClientSession | None = None
        self.device: FastDevice | None = None
        self.raw = RawServer()
        self.raw_device: FastDevice | None = None
        self.dispatch_device: FastDevice | None = None
        self._raw_link: Any = None
        self._dispatch_link: Any = None

    async def start(self) -> None:
        """Pair and connect the device; open the raw link."""
        hass = self.home.hass
        (entry,) = await self.home.add_devices(1)
        self.entry = entry
        self.http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        self.device = FastDevice(self.script, entry.data["mac"], entry.data["token"])
        await self.device.connect(self.http, self.home.ws_url)
        await wait_connected(runtime(entry))
        await hass.async_block_till_done()
        await self.raw.start()
        self.raw_device = FastDevice(self.script, "02:00:00:00:00:00", "raw")
        await self.raw_device.connect(self.http, self.raw.url)
        self._raw_link = await self.raw.accept()
        self.dispatch_device = FastDevice(self.script, "02:00:00:00:00:01", "raw")
        await self.dispatch_device.connect(self.http, self.raw.dispatch_url)
        self._dispatch_link = await self.raw.accept()
        if not hass.services.has_service(NOOP_DOMAIN, SERVICE_CALL_TOOL):
            hass.services.async_register(
                NOOP_DOMAIN,
                SERVICE_CALL_TOOL,
                _noop_call_tool,
                schema=CALL_TOOL_SCHEMA,
                supports_response=SupportsResponse.OPTIONAL,
            )

    async def stop(self) -> None:
        """Close both links and the raw server."""
        # The raw server closes its held link; the device only answers that.
        await self.raw.stop()
        for device in (self.raw_device, self.dispatch_device, self.device):
            if device is not None:
                await device.close()
        if self.http is not None:
            await self.http.close()

    async def raw_round_trip(self, volume: int) -> int:
        """Time one request/reply over the bare aiohttp server."""
        return await self.raw.round_trip(self._raw_link, volume)

    async def dispatch_round_trip(self, volume: int) -> int:
        """Time one request/reply resolved by a reader task."""
        return await self.raw.dispatch_round_trip(self._dispatch_link, volume)

    async def call(self, volume: int) -> int:
        """Time one ``async_call_tool`` through the integration."""
        device = runtime(self.entry)
        start = time.perf_counter_ns()
        result = await device.commands.async_call_tool(VOLUME_TOOL, {"volume": volume})
        elapsed = time.perf_counter_ns() - start
        if result.is_error or result.text != "true":
            raise RuntimeError(f"unexpected tool result {result!r}")
        return elapsed

    def _action_data(self, volume: int) -> dict[str, Any]:
        return {
            ATTR_DEVICE_ID: runtime(self.entry).entry_data.device_id,
            ATTR_TOOL: VOLUME_TOOL,
            ATTR_ARGUMENTS: {"volume": volume},
        }

    async def action(self, volume: int) -> int:
        """Time one ``xiaozhi.call_tool`` action."""
        data = self._action_data(volume)
        start = time.perf_counter_ns()
        response = await self.home.hass.services.async_call(
            DOMAIN, SERVICE_CALL_TOOL, data, blocking=True, return_response=True
        )
        elapsed = time.perf_counter_ns() - start
        expected = {"is_error": False, "text": "true", "json": True, "images": []}
        if response != expected:
            raise RuntimeError(f"unexpected action response {response!r}")
        return elapsed

    async def noop(self, volume: int) -> int:
        """Time one no-op action of the same shape."""
        data = self._action_data(volume)
        start = time.perf_counter_ns()
        response = await self.home.hass.services.async_call(
            NOOP_DOMAIN, SERVICE_CALL_TOOL, data, blocking=True, return_response=True
        )
        elapsed = time.perf_counter_ns() - start
        if response is None:
            raise RuntimeError("no-op action returned nothing")
        return elapsed


async def measure(
    home: Home, script: DeviceScript, *, iterations: int, warmup: int
) -> dict[str, Any]:
    """Measure all four variants interleaved; return summaries and ratios."""
    rig = ToolCallRig(home, script)
    await rig.start()
    try:
        device = rig.device
        if device is None:
            raise RuntimeError("the device did not connect")
        requests_before = device.requests
        samples = await run_interleaved(
            {
                "raw": rig.raw_round_trip,
                "dispatch": rig.dispatch_round_trip,
                "call": rig.call,
                "action": rig.action,
                "noop": rig.noop,
            },
            iterations=iterations,
            warmup=warmup,
        )
        # Let a keep-alive that fired meanwhile finish before counting.
        await asyncio.sleep(0)
        answered = device.requests - requests_before
    finally:
        await rig.stop()
    raw = summary_us(samples["raw"])
    dispatch = summary_us(samples["dispatch"])
    call = summary_us(samples["call"])
    action = summary_us(samples["action"])
    noop = summary_us(samples["noop"])
    return {
        "iterations": iterations,
        "warmup": warmup,
        "device_requests": answered,
        "raw": raw,
        "dispatch": dispatch,
        "call": call,
        "action": action,
        "noop": noop,
        "call_ratio_p50": ratio(call["p50_us"], raw["p50_us"]),
        "call_ratio_p99": ratio(call["p99_us"], raw["p99_us"]),
        "call_dispatch_ratio_p50": ratio(call["p50_us"], dispatch["p50_us"]),
        "action_ratio_p50": ratio(action["p50_us"], noop["p50_us"] + raw["p50_us"]),
        "action_ratio_p99": ratio(action["p99_us"], noop["p99_us"] + raw["p99_us"]),
    }
