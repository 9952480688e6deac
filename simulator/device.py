"""A simulated xiaozhi-esp32 device: its transports, state, run loop, OTA.

The device behaves like the firmware (``websocket_protocol.cc``,
``mqtt_protocol.cc``, ``application.cc``, ``ota.cc``). Over WebSocket it
dials with ``Authorization`` / ``Protocol-Version`` / ``Device-Id`` /
``Client-Id`` headers, sends its hello, waits for the server's, and closes
the link after ``idle_timeout`` without any incoming frame. Over MQTT + UDP
(an ``mqtt`` block in the OTA answer, or ``DeviceConfig.mqtt``) it connects at
boot and stays connected; each conversation opens a UDP audio channel with a
hello and closes it with ``goodbye`` (see ``simulator/mqtt.py``). Either way
it dispatches text frames on ``type``, answers MCP requests and reboots on
request. Everything it sees and does is recorded, and tests
wait for it with :meth:`SimulatedDevice.wait_for` and friends instead of
sleeping.
"""

import asyncio
from collections.abc import Callable, Coroutine, Mapping
import dataclasses
from dataclasses import dataclass, field
import json
import logging
import random
from types import TracebackType
from typing import Any, NoReturn, Self, cast

import aiohttp

from .config import DeviceConfig, Faults
from .device_tools import build_tools
from .firmware_image import next_ota_slot, read_image
from .mcp_server import AfterReply, McpServer, defer_after_reply
from .mqtt import DeviceMqttLink, DeviceUdpChannel, UdpParams, UdpRecord, parse_udp
from .notify import NotifyPlayback, play_notify
from .ota import (
    Activation,
    FirmwareOffer,
    OtaError,
    OtaResult,
    activate_url,
    activation_payload,
    is_newer_version,
    ota_headers,
    parse_ota_response,
    system_info,
)
from .protocol import (
    AUDIO_FRAME_DURATION_MS,
    ListenMode,
    ListenState,
    abort_frame,
    decode_audio,
    encode_audio,
    hello_frame,
    listen_frame,
    mcp_frame,
)
from .tools import ArgumentValue, ToolError, ToolSpec, dumps
from .transport import HttpClient, UrlRewriter, mask_token, redact_url
from .voice import (
    NO_PSRAM_BURST_LIMIT,
    NO_PSRAM_CHIPS,
    WAKE_WORD_PREROLL,
    MicEncoder,
    Speaker,
    silence,
    wake_preroll,
)

_LOGGER = logging.getLogger(__package__)

DEFAULT_WAIT = 5.0
OTA_MAX_RETRY = 10
# The microphone input warms up this long after listening starts.
MIC_WARM_UP = 0.12
ACTIVATION_ATTEMPTS = 10

# Reasons a link ended, as recorded in ``close_reason``.
REASON_SERVER_CLOSED = "server_closed"
REASON_IDLE_TIMEOUT = "idle_timeout"
REASON_REBOOT = "reboot"
REASON_HELLO_TIMEOUT = "hello_timeout"
REASON_FATAL_HELLO = "fatal_hello"
REASON_CRASH = "crash"
REASON_DROPPED = "dropped"
REASON_DISCONNECTED = "disconnected"
REASON_STOPPED = "stopped"
REASON_ERROR = "error"

_NO_RECONNECT = frozenset(
    {
        REASON_DISCONNECTED,
        REASON_STOPPED,
        REASON_FATAL_HELLO,
        REASON_CRASH,
        REASON_HELLO_TIMEOUT,
    }
)


class DeviceError(Exception):
    """Base class of the simulator's connection errors."""


class DeviceConnectionError(DeviceError):
    """The WebSocket could not be opened or closed before the hello."""


class HelloTimeoutError(DeviceError):
    """The server did not send its hello within ``hello_timeout``."""


class ServerHelloRejected(DeviceError):  # noqa: N818 - name kept for callers
    """The server hello had no ``transport``: real firmware crashes on it."""


class _LinkEnd(Exception):  # noqa: N818 - control flow, not an error
    """Raised inside the read loop to end the link with a reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _end_link(reason: str) -> NoReturn:
    """End the link being read, recording ``reason``."""
    raise _LinkEnd(reason)


@dataclass(kw_only=True)
class DeviceState:
    """The simulated hardware state tools read and change."""

    volume: int = 70
    brightness: int = 80
    theme: str = "light"
    battery_level: int = 85
    charging: bool = False
    network_type: str = "wifi"
    ssid: str = "home"
    signal: str = "strong"
    rssi: int = -55
    temperature: float = 41.5
    activity: str = "idle"
    emotion: str = "neutral"


@dataclass(frozen=True, kw_only=True)
class ToolCallRecord:
    """A tool call the device executed, with its resolved arguments."""

    name: str
    arguments: dict[str, ArgumentValue] = field(default_factory=dict)


class SimulatedDevice:
    """One simulated xiaozhi device.

    ``http`` is any client with aiohttp-style ``ws_connect`` / ``post`` /
    ``get`` (an ``aiohttp.ClientSession`` or an aiohttp ``TestClient``); when
    omitted the device opens its own session and closes it in :meth:`stop`.
    Every URL passes through ``url_rewriter`` first (see
    :func:`simulator.relative_url`).
    """

    def __init__(
        self,
        config: DeviceConfig | None = None,
        *,
        http: HttpClient | None = None,
        url_rewriter: UrlRewriter | None = None,
    ) -> None:
        """Create the device; nothing happens until connect/run/start."""
        self.config = config or DeviceConfig()
        self.faults = Faults()
        self.state = DeviceState()
        self.tools: list[ToolSpec] = build_tools(self.config)
        self.mcp = McpServer(self)
        self._http = http
        self._own_session: aiohttp.ClientSession | None = None
        self._url_rewriter = url_rewriter

        # Connection settings (the firmware's "websocket" settings namespace).
        self.ota_url = self.config.ota_url
        self.ws_url = self.config.ws_url
        self.token = self.config.token
        self.protocol_version = self.config.protocol_version
        self.session_id = ""

        # Link state
        self.connected = False
        self.crashed = False
        self.close_reason: str | None = None
        self.close_reasons: list[str] = []
        self.connect_count = 0
        self.offline_reason: str | None = None
        self.reboot_count = 0
        self.listen_mode: ListenMode = "auto"

        # Records
        self.received: list[dict[str, Any]] = []
        # (loop time, what): text frames as "type" or "type:state", audio as
        # "audio", in the order they arrived.
        self.timeline: list[tuple[float, str]] = []
        self.received_text: list[str] = []
        self.invalid_frames = 0
        self.sent: list[str] = []
        self.sent_binary: list[bytes] = []
        self.binary_received = 0
        self.audio_received: list[bytes] = []
        self.server_hello: dict[str, Any] | None = None
        self.server_audio_params: dict[str, Any] | None = None
        self.alerts: list[dict[str, str]] = []
        self.stt_texts: list[str] = []
        self.tts_sentences: list[str] = []
        self.custom_payloads: list[Any] = []
        self.system_commands: list[str] = []
        self.mcp_requests: list[dict[str, Any]] = []
        self.calls: list[ToolCallRecord] = []
        self.vision_url: str | None = None
        self.vision_token = ""
        self.photos_taken = 0
        self.snapshots: list[tuple[str, int]] = []
        self.previewed_images: list[int] = []
        self.upgrade_urls: list[str] = []
        # (version flashed, or None) and why it failed, per upgrade.
        self.upgrades: list[tuple[str | None, str]] = []
        self.upgrade_bytes = 0
        self.assets_download_url: str | None = None

        # OTA
        self.ota_result: OtaResult | None = None
        self.ota_checks = 0
        self.activation_attempts = 0
        self.activation: Activation | None = None
        self.activation_code: str | None = None
        self.activated = False
        self.websocket_settings: dict[str, str | int] = {}
        self.mqtt_config: dict[str, str | int] | None = (
            dict(self.config.mqtt) if self.config.mqtt is not None else None
        )
        self.server_time: dict[str, Any] | None = None
        self.firmware_offer: FirmwareOffer | None = None
        self._upgrade_at_boot: str | None = None

        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._mqtt: DeviceMqttLink | None = None
        self._udp: DeviceUdpChannel | None = None
        self._udp_params: UdpParams | None = None
        self.udp_record = UdpRecord()
        self.goodbyes_received = 0
        self.notify_sounds: list[NotifyPlayback] = []
        self.popups = 0
        self._notifying = False
        self._notify_task: asyncio.Task[None] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._hello: asyncio.Future[None] | None = None
        self._closing_reason: str | None = None
        self._drop_requested = False
        self._last_incoming = 0.0
        self._connect_lock = asyncio.Lock()
        self._changed = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._call_tasks: set[asyncio.Task[Any]] = set()
        self._reconnect_task: asyncio.Task[None] | None = None
        self._run_task: asyncio.Task[None] | None = None
        self._stopping = False
        self._stopped = asyncio.Event()
        self._audio_rng = random.Random(self.config.mac)  # noqa: S311 - not crypto
        self._audio_timestamp = 0

        # Voice: the microphone streams while Listening, the speaker plays
        # while Speaking (see simulator/voice.py).
        self.speaker = Speaker(
            is_speaking=self._playing_allowed,
            on_drained=self._playback_drained,
            queue_limit=self.config.decode_queue,
            burst_limit=NO_PSRAM_BURST_LIMIT
            if self.config.chip in NO_PSRAM_CHIPS
            else None,
        )
        self._mic_encoder: MicEncoder | None = None
        self._mic_source = bytearray()
        self._mic_task: asyncio.Task[None] | None = None
        self.mic_frames_sent = 0
        self._speaking_since = 0.0
        self._pending_listen_start = False
        self.listen_starts = 0

    # ------------------------------------------------------------------ misc

    @property
    def name(self) -> str:
        """Return a short name for logs (the MAC)."""
        return self.config.mac

    def __repr__(self) -> str:
        """Return a debugging representation."""
        return f"<SimulatedDevice {self.name} connected={self.connected}>"

    async def __aenter__(self) -> Self:
        """Use the device as an async context manager; stop on exit."""
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Stop the device."""
        await self.stop()

    def touch(self) -> None:
        """Wake whoever waits for the device (``wait_for``): something changed."""
        self._notify()

    def _notify(self) -> None:
        """Wake every waiter so it re-checks its predicate."""
        self._changed.set()
        self._changed = asyncio.Event()

    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Start a task the device owns (cancelled by stop)."""
        task = asyncio.get_running_loop().create_task(coro, name=f"{self.name} {name}")
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        """Forget a finished task; log its failure instead of losing it."""
        self._tasks.discard(task)
        if not task.cancelled() and (err := task.exception()) is not None:
            _LOGGER.error(
                "%s: task %s failed", self.name, task.get_name(), exc_info=err
            )

    def spawn_task(
        self, coro: Coroutine[Any, Any, Any], name: str
    ) -> asyncio.Task[Any]:
        """Run a coroutine on a task the device owns (cancelled by stop)."""
        return self._spawn(coro, name)

    def spawn_call(self, coro: Coroutine[Any, Any, Any], name: str) -> None:
        """Run a tool call on its own task (cancelled when the link ends)."""
        task = self._spawn(coro, f"call {name}")
        self._call_tasks.add(task)
        task.add_done_callback(self._call_tasks.discard)

    def record_call(self, name: str, arguments: dict[str, ArgumentValue]) -> None:
        """Record an executed tool call and wake waiters."""
        self.calls.append(ToolCallRecord(name=name, arguments=dict(arguments)))
        self._notify()

    def after_reply(self, action: AfterReply) -> None:
        """Run ``action`` after the current tool call is answered (or now)."""
        if not defer_after_reply(action):
            self._spawn(action(), "deferred action")

    # ------------------------------------------------------------------ waits

    async def wait_for(
        self, predicate: Callable[[], bool], timeout: float = DEFAULT_WAIT
    ) -> None:
        """Wait until ``predicate()`` is true; raises TimeoutError."""
        async with asyncio.timeout(timeout):
            while not predicate():
                await self._changed.wait()

    async def wait_for_frame(
        self,
        predicate: Callable[[dict[str, Any]], bool] | None = None,
        *,
        timeout: float = DEFAULT_WAIT,
        since: int = 0,
    ) -> dict[str, Any]:
        """Return the first received frame (from index ``since``) matching."""
        found: list[dict[str, Any]] = []

        def check() -> bool:
            for frame in self.received[since:]:
                if predicate is None or predicate(frame):
                    found.append(frame)
                    return True
            return False

        await self.wait_for(check, timeout)
        return found[0]

    async def wait_for_call(
        self, name: str, *, timeout: float = DEFAULT_WAIT, since: int = 0
    ) -> ToolCallRecord:
        """Return the first executed call of tool ``name`` (from ``since``)."""
        found: list[ToolCallRecord] = []

        def check() -> bool:
            found[:] = [call for call in self.calls[since:] if call.name == name][:1]
            return bool(found)

        await self.wait_for(check, timeout)
        return found[0]

    async def wait_connected(self, timeout: float = DEFAULT_WAIT) -> None:
        """Wait until the hello exchange of a link has completed."""
        await self.wait_for(lambda: self.connected, timeout)

    async def wait_disconnected(self, timeout: float = DEFAULT_WAIT) -> None:
        """Wait until no link is up."""
        await self.wait_for(lambda: not self.connected, timeout)

    async def wait_activation_code(self, timeout: float = DEFAULT_WAIT) -> str:
        """Return the activation code once an OTA answer has shown one."""
        code: list[str] = []

        def check() -> bool:
            if self.activation_code is not None:
                code[:] = [self.activation_code]
            return bool(code)

        await self.wait_for(check, timeout)
        return code[0]

    # ------------------------------------------------------------------ HTTP

    def _client(self) -> HttpClient:
        if self._http is None:
            if self._own_session is None:
                self._own_session = aiohttp.ClientSession()
            # ClientSession takes typed keyword arguments where the protocol,
            # which TestClient also meets, says Any.
            return cast("HttpClient", self._own_session)
        return self._http

    def rewrite(self, url: str) -> str:
        """Apply the URL rewriter."""
        return self._url_rewriter(url) if self._url_rewriter else url

    async def http_request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        data: Any = None,
        failure: str = "HTTP request failed",
    ) -> tuple[int, bytes]:
        """Send a request; return status and body.

        A connection failure raises ToolError with ``failure``.
        """
        client = self._client()
        timeout = aiohttp.ClientTimeout(total=self.config.http_timeout)
        kwargs: dict[str, Any] = {"headers": dict(headers or {}), "timeout": timeout}
        if data is not None:
            kwargs["data"] = data
        try:
            if method == "GET":
                response = await client.get(self.rewrite(url), **kwargs)
            else:
                response = await client.post(self.rewrite(url), **kwargs)
            try:
                body = await response.read()
            finally:
                response.release()
        except (aiohttp.ClientError, TimeoutError, ValueError) as err:
            _LOGGER.debug("%s: %s %s failed: %r", self.name, method, url, err)
            raise ToolError(failure) from err
        return response.status, body

    # ------------------------------------------------------------------ OTA

    async def check_ota(self, ota_url: str | None = None) -> OtaResult:
        """POST the system information to the OTA URL and apply the answer."""
        url = ota_url or self.ota_url
        if not url:
            raise OtaError("No OTA URL configured")
        self.ota_url = url
        self.ota_checks += 1
        client = self._client()
        try:
            response = await client.post(
                self.rewrite(url),
                headers=ota_headers(self.config),
                data=dumps(system_info(self.config)).encode(),
                timeout=aiohttp.ClientTimeout(total=self.config.http_timeout),
            )
            try:
                status = response.status
                body = await response.read()
            finally:
                response.release()
        except (aiohttp.ClientError, TimeoutError) as err:
            raise OtaError(f"OTA request failed: {err!r}") from err
        if status != 200:
            raise OtaError(f"OTA check failed with status {status}", status=status)
        try:
            data = json.loads(body)
        except ValueError as err:
            raise OtaError("OTA answer is not JSON") from err
        result = parse_ota_response(data, self.config.firmware)
        self._apply_ota(result)
        return result

    def _apply_ota(self, result: OtaResult) -> None:
        self.ota_result = result
        self.activation = result.activation
        if result.activation is not None and result.activation.code is not None:
            self.activation_code = result.activation.code
            _LOGGER.info(
                "%s: Activation code: %s (%s)",
                self.name,
                result.activation.code,
                result.activation.message or "",
            )
        if result.mqtt is not None and not self.config.websocket_only:
            # Stored key by key; keys left out keep their old value.
            self.mqtt_config = {**(self.mqtt_config or {}), **result.mqtt}
            _LOGGER.info(
                "%s: mqtt %s (client %s)",
                self.name,
                self.mqtt_config.get("endpoint"),
                self.mqtt_config.get("client_id"),
            )
        elif result.websocket is not None:
            # The boot's OTA answer chooses: a websocket block alone selects it.
            self.mqtt_config = None
        if result.websocket is not None:
            self.websocket_settings.update(result.websocket)
            url = self.websocket_settings.get("url")
            token = self.websocket_settings.get("token")
            version = self.websocket_settings.get("version")
            if isinstance(url, str) and url:
                self.ws_url = url
            if isinstance(token, str):
                self.token = token
            if isinstance(version, int) and version in (1, 2, 3):
                self.protocol_version = version
            _LOGGER.info(
                "%s: websocket %s (token %s, version %s)",
                self.name,
                redact_url(self.ws_url),
                mask_token(self.token),
                self.protocol_version,
            )
        if result.server_time is not None:
            self.server_time = dict(result.server_time)
        if result.firmware is not None:
            self.firmware_offer = result.firmware
            if result.firmware.newer and self.config.upgrade_at_boot:
                # CheckNewVersion: a newer version is installed before the
                # device goes online.
                _LOGGER.info(
                    "%s: firmware %s offered; upgrading",
                    self.name,
                    result.firmware.version,
                )
                self._upgrade_at_boot = result.firmware.url
        self._notify()

    async def activate(self, ota_url: str | None = None) -> str:
        """POST ``<ota url>/activate`` once.

        Returns ``"activated"`` (200), ``"pending"`` (202) or ``"failed"``
        (anything else, a network error, or no challenge to answer).
        """
        url = ota_url or self.ota_url
        challenge = self.activation.challenge if self.activation else None
        if not url or challenge is None:
            _LOGGER.warning("%s: no activation challenge", self.name)
            return "failed"
        self.activation_attempts += 1
        client = self._client()
        try:
            response = await client.post(
                self.rewrite(activate_url(url)),
                headers=ota_headers(self.config),
                data=activation_payload(self.config, challenge).encode(),
                timeout=aiohttp.ClientTimeout(total=self.config.http_timeout),
            )
            try:
                status = response.status
                await response.read()
            finally:
                response.release()
        except (aiohttp.ClientError, TimeoutError) as err:
            _LOGGER.warning("%s: activation request failed: %r", self.name, err)
            return "failed"
        self._notify()
        if status == 200:
            _LOGGER.info("%s: activated", self.name)
            self.activated = True
            return "activated"
        if status == 202:
            return "pending"
        _LOGGER.warning("%s: activation failed with status %s", self.name, status)
        return "failed"

    async def provision(
        self, ota_url: str | None = None, *, timeout: float | None = None
    ) -> OtaResult:
        """Check the OTA URL and activate until the answer needs no activation.

        Mirrors the firmware's boot loop: a failed check is retried with a
        doubling delay (at most 10 times); while the answer holds an
        activation, ``/activate`` is polled (202: again after
        ``activation_poll_interval``; other failures: after
        ``activation_retry_delay``; 10 polls at most) and the OTA URL is
        checked again afterwards.
        """
        config = self.config
        async with asyncio.timeout(timeout or config.provision_timeout):
            retries = 0
            retry_delay = config.ota_retry_delay
            while True:
                try:
                    result = await self.check_ota(ota_url)
                except OtaError as err:
                    retries += 1
                    if retries >= OTA_MAX_RETRY:
                        raise
                    _LOGGER.warning(
                        "%s: %s; retrying in %.1f s", self.name, err, retry_delay
                    )
                    await asyncio.sleep(retry_delay)
                    retry_delay = min(retry_delay * 2, config.max_backoff)
                    continue
                retries = 0
                retry_delay = config.ota_retry_delay
                if not result.needs_activation:
                    return result
                for _attempt in range(ACTIVATION_ATTEMPTS):
                    outcome = await self.activate(ota_url)
                    if outcome == "activated":
                        break
                    await asyncio.sleep(
                        config.activation_poll_interval
                        if outcome == "pending"
                        else config.activation_retry_delay
                    )

    # ------------------------------------------------------------------ link

    def _ws_headers(self, token: str | None) -> dict[str, str]:
        headers: dict[str, str] = {}
        if token:
            headers["Authorization"] = token if " " in token else "Bearer " + token
        headers["Protocol-Version"] = str(self.protocol_version)
        headers["Device-Id"] = self.config.mac
        headers["Client-Id"] = self.config.client_id
        return headers

    def _hello_text(self) -> str:
        features = None
        if self.config.features:
            features = {**self.config.extra_features, "mcp": True}
        return hello_frame(
            self.protocol_version, features=features, extra=self.config.hello_extra
        )

    @property
    def outgoing_session_id(self) -> str:
        """Return the session id put in outgoing frames."""
        return "" if self.config.other_implementation else self.session_id

    async def connect(self, url: str | None = None, token: str | None = None) -> None:
        """Open the link and complete the hello exchange.

        Uses the stored WebSocket URL and token (from the OTA answer or the
        configuration) when omitted. Raises DeviceConnectionError,
        HelloTimeoutError or ServerHelloRejected.
        """
        async with self._connect_lock:
            if self.connected:
                raise DeviceError("Already connected")
            await self._open_link(url, token)

    @property
    def uses_mqtt(self) -> bool:
        """Return True when the device talks MQTT + UDP (its OTA answer said so)."""
        return self.mqtt_config is not None

    async def _open_link(self, url: str | None, token: str | None) -> None:
        if self.uses_mqtt and url is None:
            await self._open_mqtt()
            return
        url = url or self.ws_url
        if token is None:
            token = self.token
        if not url:
            raise DeviceConnectionError("No WebSocket URL known")
        self.ws_url = url
        self.token = token
        _LOGGER.info(
            "%s: connecting to %s (token %s, protocol version %s)",
            self.name,
            redact_url(url),
            mask_token(token),
            self.protocol_version,
        )
        self._set_activity("connecting")
        try:
            ws = await self._client().ws_connect(
                self.rewrite(url),
                headers=self._ws_headers(token),
                autoping=False,
                heartbeat=None,
                max_msg_size=self.config.max_msg_size,
            )
        except (aiohttp.ClientError, ValueError) as err:
            self._set_activity("idle")
            self._record_close("connect_failed")
            # str(), not repr(): the repr of a handshake error carries the
            # request headers, the bearer token among them.
            raise DeviceConnectionError(
                f"Cannot connect to {redact_url(url)}: {type(err).__name__}: {err}"
            ) from err

        self._ws = ws
        self._closing_reason = None
        self._drop_requested = False
        self._last_incoming = asyncio.get_running_loop().time()
        hello = asyncio.get_running_loop().create_future()
        self._hello = hello
        await self._send_text(self._hello_text())
        self._reader = self._spawn(self._read_loop(ws), "reader")
        try:
            async with asyncio.timeout(self.config.hello_timeout):
                await asyncio.shield(hello)
        except TimeoutError:
            _LOGGER.error("%s: no server hello within the timeout", self.name)
            await self._close_link(REASON_HELLO_TIMEOUT)
            raise HelloTimeoutError("Failed to receive server hello") from None
        except DeviceError:
            await self._wait_reader()
            raise
        self.connected = True
        self.connect_count += 1
        _LOGGER.info("%s: connected, session %s", self.name, self.session_id)
        self._set_activity("idle")
        self._notify()

    async def _open_mqtt(self) -> None:
        """Connect to the MQTT endpoint: no hello, MCP works at once."""
        settings = dict(self.mqtt_config or {})
        _LOGGER.info(
            "%s: connecting to MQTT %s", self.name, settings.get("endpoint", "")
        )
        self._set_activity("connecting")
        link = DeviceMqttLink(settings, self._on_text, self._mqtt_closed)
        try:
            await link.connect()
        except ConnectionError as err:
            self._set_activity("idle")
            self._record_close("connect_failed")
            raise DeviceConnectionError(str(err)) from err
        self._mqtt = link
        self._closing_reason = None
        self.connected = True
        self.connect_count += 1
        _LOGGER.info("%s: connected over MQTT", self.name)
        self._set_activity("idle")
        self._notify()

    def _mqtt_closed(self, reason: str) -> None:
        if self._mqtt is None:
            return
        self._mqtt = None
        # MQTT going down leaves the UDP channel alone; only Wi-Fi loss and
        # reboots close it (the simulator closes it with the link it rode on).
        self._close_udp()
        self._link_ended(self._closing_reason or reason)

    # --- the audio channel over MQTT + UDP ------------------------------

    @property
    def audio_channel_open(self) -> bool:
        """Return True while the UDP audio channel exists (MQTT only)."""
        return self._udp is not None and self._udp.is_open

    @property
    def microphone_on(self) -> bool:
        """Return True while the microphone streams to the server."""
        return self._mic_task is not None and not self._mic_task.done()

    async def open_audio_channel(self) -> None:
        """Publish the hello and wait for the server's (MQTT + UDP).

        As ``OpenAudioChannel``: the session id is cleared, the server hello
        must come within ``hello_timeout`` with ``transport: udp`` and a
        ``udp`` object, then the UDP socket is created.
        """
        if not self.uses_mqtt:
            return
        if not self.connected:
            await self.connect()
        if self.audio_channel_open:
            return  # reused while it has not timed out
        self.session_id = ""
        self._udp_params = None
        hello = asyncio.get_running_loop().create_future()
        self._hello = hello
        features = None
        if self.config.features:
            features = {**self.config.extra_features, "mcp": True}
        await self._send_text(
            hello_frame(
                3, features=features, extra=self.config.hello_extra, transport="udp"
            )
        )
        try:
            async with asyncio.timeout(self.config.hello_timeout):
                await asyncio.shield(hello)
        except TimeoutError:
            _LOGGER.error("%s: no server hello within the timeout", self.name)
            self._set_activity("idle")
            raise HelloTimeoutError("Failed to receive server hello") from None
        params = self._server_udp()
        if params is None:  # pragma: no cover - set with the hello
            raise DeviceConnectionError("server hello without udp")
        channel = DeviceUdpChannel(
            params,
            self._on_udp_packet,
            self.udp_record,
            strict_sequence=self.config.udp_strict_sequence,
        )
        await channel.open()
        self._udp = channel
        self._notify()

    async def close_audio_channel(self, *, send_goodbye: bool = True) -> None:
        """Close the UDP channel; say goodbye as the firmware does."""
        if self._udp is None:
            return
        self._close_udp()
        if send_goodbye:
            await self._send_text(
                '{"session_id":"' + self.session_id + '","type":"goodbye"}'
            )
        self._stop_mic()
        await self._change_activity("idle")

    def _server_udp(self) -> UdpParams | None:
        """Return the ``udp`` object of the server hello, once it came."""
        return self._udp_params

    def _close_udp(self) -> None:
        if self._udp is not None:
            self._udp.close()
            self._udp = None

    def _on_udp_packet(self, payload: bytes, timestamp: int) -> None:
        del timestamp  # the echo reference of server-side AEC
        self.binary_received += 1
        self.timeline.append((asyncio.get_running_loop().time(), "audio"))
        self.audio_received.append(payload)
        self.speaker.push(payload)
        self._notify()

    async def send_audio_packet(self, payload: bytes) -> bool:
        """Send one Opus packet: over UDP (MQTT) or framed on the WebSocket."""
        if self.uses_mqtt:
            if self._udp is None or not self._udp.send(payload):
                return False
            self.sent_binary.append(payload)
            return True
        data = encode_audio(payload, self.protocol_version, self._audio_timestamp)
        self._audio_timestamp += AUDIO_FRAME_DURATION_MS
        return await self.send_bytes(data)

    async def _wait_reader(self) -> None:
        reader = self._reader
        if reader is not None and reader is not asyncio.current_task():
            await asyncio.wait({reader})

    async def _close_link(self, reason: str) -> None:
        """Close the link from the device side and wait for the reader."""
        if self._mqtt is not None:
            self._closing_reason = reason
            await self._mqtt.close()
            self._mqtt_closed(reason)
            return
        ws = self._ws
        if ws is None:
            return
        self._closing_reason = reason
        if not ws.closed:
            await ws.close()
        await self._wait_reader()

    def drop_link(self) -> None:
        """Drop the TCP connection at once, without a close frame."""
        ws = self._ws
        if ws is None:
            return
        _LOGGER.info("%s: dropping the connection", self.name)
        self._drop_requested = True
        response = ws._response  # noqa: SLF001 - aiohttp offers no public abort
        response.close()

    async def disconnect(self) -> None:
        """Close the link (no automatic reconnect)."""
        await self._close_link(REASON_DISCONNECTED)

    async def _read_loop(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        loop = asyncio.get_running_loop()
        reason = REASON_SERVER_CLOSED
        try:
            while True:
                if self._drop_requested:
                    _end_link(REASON_DROPPED)
                remaining = self._last_incoming + self.config.idle_timeout - loop.time()
                if remaining <= 0:
                    _LOGGER.warning("%s: channel idle timeout", self.name)
                    _end_link(REASON_IDLE_TIMEOUT)
                try:
                    msg = await ws.receive(timeout=remaining)
                except TimeoutError:
                    continue
                if msg.type is aiohttp.WSMsgType.TEXT:
                    self._last_incoming = loop.time()
                    await self._on_text(msg.data)
                elif msg.type is aiohttp.WSMsgType.BINARY:
                    self._last_incoming = loop.time()
                    self._on_binary(msg.data)
                elif msg.type is aiohttp.WSMsgType.PING:
                    if self.config.answer_pings:
                        await ws.pong(msg.data)
                elif msg.type is aiohttp.WSMsgType.ERROR:
                    _LOGGER.warning("%s: websocket error %r", self.name, msg.data)
                    _end_link(REASON_ERROR)
                elif msg.type in (
                    aiohttp.WSMsgType.CLOSE,
                    aiohttp.WSMsgType.CLOSING,
                    aiohttp.WSMsgType.CLOSED,
                ):
                    break
        except _LinkEnd as end:
            reason = end.reason
        except (aiohttp.ClientError, ConnectionError) as err:
            _LOGGER.warning("%s: connection lost: %r", self.name, err)
            reason = REASON_ERROR
        except Exception:
            _LOGGER.exception("%s: unexpected error on the link", self.name)
            reason = REASON_ERROR
        finally:
            if self._drop_requested:
                reason = REASON_DROPPED
            elif self._closing_reason is not None:
                reason = self._closing_reason
            elif not ws.closed:
                await ws.close()
            self._link_ended(reason)

    def _record_close(self, reason: str) -> None:
        self.close_reason = reason
        self.close_reasons.append(reason)

    def _link_ended(self, reason: str) -> None:
        was_connected = self.connected
        self._ws = None
        self.connected = False
        self._record_close(reason)
        _LOGGER.info("%s: link closed (%s)", self.name, reason)
        for task in list(self._call_tasks):
            task.cancel()
        hello = self._hello
        if hello is not None and not hello.done():
            if reason == REASON_FATAL_HELLO:
                hello.set_exception(
                    ServerHelloRejected("Server hello without transport")
                )
            else:
                hello.set_exception(
                    DeviceConnectionError(f"Link closed before the hello ({reason})")
                )
            hello.exception()  # mark retrieved; connect() reads it via shield
        self._set_activity("idle")
        self._notify()
        if self._stopping:
            return
        if reason == REASON_REBOOT:
            self._schedule_reconnect(self.config.reboot_delay, reboot=True)
        elif self.uses_mqtt and reason not in _NO_RECONNECT:
            # esp-mqtt reconnects by itself.
            self._schedule_reconnect(self.config.mqtt_reconnect_delay)
        elif (
            was_connected
            and reason not in _NO_RECONNECT
            and self.config.reconnect_delay is not None
        ):
            self._schedule_reconnect(self.config.reconnect_delay)

    # ------------------------------------------------------------------ incoming

    async def _on_text(self, text: str) -> None:
        _LOGGER.debug("%s << %s", self.name, text)
        self.received_text.append(text)
        try:
            frame = json.loads(text)
        except ValueError:
            frame = None
        if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
            _LOGGER.error("%s: missing message type, data: %s", self.name, text)
            self.invalid_frames += 1
            self._notify()
            return
        self.received.append(frame)
        state = frame.get("state")
        self.timeline.append(
            (
                asyncio.get_running_loop().time(),
                f"{frame['type']}:{state}" if isinstance(state, str) else frame["type"],
            )
        )
        self._notify()
        kind = frame["type"]
        if kind == "hello":
            self._on_server_hello(frame)
        elif kind == "goodbye" and self.uses_mqtt:
            await self._on_goodbye(frame)
        elif kind == "notify" and self._plays_notify():
            self._on_notify(frame)
        elif kind == "mcp":
            payload = frame.get("payload")
            if isinstance(payload, dict):
                await self.mcp.handle(payload)
        elif kind == "tts":
            await self._on_tts(frame)
        elif kind == "stt":
            if isinstance(frame.get("text"), str):
                self.stt_texts.append(frame["text"])
        elif kind == "llm":
            if isinstance(frame.get("emotion"), str):
                self.state.emotion = frame["emotion"]
        elif kind == "system":
            command = frame.get("command")
            if isinstance(command, str):
                self.system_commands.append(command)
                if command == "reboot":
                    self._spawn(self.reboot(), "reboot")
                else:
                    _LOGGER.warning("%s: unknown system command %s", self.name, command)
        elif kind == "alert":
            self._on_alert(frame)
        elif kind == "custom" and self.config.custom_messages:
            if isinstance(frame.get("payload"), dict):
                self.custom_payloads.append(frame["payload"])
            else:
                _LOGGER.warning("%s: custom message without payload", self.name)
        else:
            _LOGGER.warning("%s: unknown message type: %s", self.name, kind)
        self._notify()

    def _on_notify(self, frame: dict[str, Any]) -> None:
        """Fetch and play a sound while idle (firmware after 2.4.2).

        Ignored unless idle, with an http(s) ``audio_url``; ``subtitles``,
        when present, must be a list.
        """
        url = frame.get("audio_url")
        subtitles = frame.get("subtitles", [])
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            _LOGGER.warning("%s: notify without a usable audio_url", self.name)
            return
        if not isinstance(subtitles, list):
            _LOGGER.warning("%s: notify subtitles are not a list", self.name)
            return
        if self.state.activity != "idle" or self._notifying:
            _LOGGER.info("%s: busy, notify ignored", self.name)
            return
        self._notifying = True
        self._notify_task = self._spawn(self._play_notify(url, subtitles), "notify")

    async def _play_notify(self, url: str, subtitles: list[Any]) -> None:
        texts = [
            item["text"]
            for item in subtitles
            if isinstance(item, dict) and isinstance(item.get("text"), str)
        ]
        record = NotifyPlayback(url=url, subtitles=texts)
        self.notify_sounds.append(record)
        self.popups += 1
        self._notify()
        try:
            await asyncio.sleep(self.config.notify_cue)
            await play_notify(
                self._client(),
                self.rewrite(url),
                record,
                queue_size=self.config.decode_queue,
                changed=self._notify,
            )
            if record.error:
                _LOGGER.warning(
                    "%s: notify playback failed: %s", self.name, record.error
                )
        finally:
            self._notifying = False
            self._notify_task = None
            self._notify()

    def _stop_notify(self) -> None:
        """Stop a notify playback (a wake word): what is queued is dropped."""
        if self._notify_task is not None:
            self._notify_task.cancel()

    async def _on_goodbye(self, frame: dict[str, Any]) -> None:
        """Close the audio channel when the goodbye names this conversation."""
        session_id = frame.get("session_id")
        if not isinstance(session_id, str) or session_id != self.session_id:
            _LOGGER.debug("%s: goodbye for another session", self.name)
            return
        await self.close_audio_channel(send_goodbye=False)
        self.goodbyes_received += 1

    def _on_server_hello(self, frame: dict[str, Any]) -> None:
        transport = frame.get("transport")
        if not isinstance(transport, str):
            # The firmware dereferences the missing string and crashes.
            _LOGGER.error("%s: server hello without transport: crash", self.name)
            self.crashed = True
            raise _LinkEnd(REASON_FATAL_HELLO)
        expected = "udp" if self.uses_mqtt else "websocket"
        if transport != expected:
            _LOGGER.error("%s: unsupported transport: %s", self.name, transport)
            return
        if self.uses_mqtt:
            # Handled at any time; a failed check returns silently and the
            # opening side gives up after its wait.
            params = parse_udp(frame.get("udp"))
            if params is None:
                _LOGGER.error("%s: server hello with a bad udp object", self.name)
                return
            self._udp_params = params
            if self._udp is not None:
                self._udp.params = params
                self._udp.local_sequence = self._udp.remote_sequence = 0
        session_id = frame.get("session_id")
        if isinstance(session_id, str):
            self.session_id = session_id
        audio_params = frame.get("audio_params")
        if isinstance(audio_params, dict):
            self.server_audio_params = audio_params
            rate = audio_params.get("sample_rate", 24000)
            frame_ms = audio_params.get("frame_duration", AUDIO_FRAME_DURATION_MS)
            if isinstance(rate, int) and isinstance(frame_ms, int):
                self.speaker.configure(rate, frame_ms)
        self.server_hello = frame
        if self._hello is not None and not self._hello.done():
            self._hello.set_result(None)

    async def _on_tts(self, frame: dict[str, Any]) -> None:
        state = frame.get("state")
        if not isinstance(state, str):
            # The firmware compares the missing string and crashes.
            _LOGGER.error("%s: tts frame without state: crash", self.name)
            self.crashed = True
            raise _LinkEnd(REASON_CRASH)
        activity = self.state.activity
        if state == "start":
            if activity in ("idle", "listening"):
                # Scheduled on the main loop: audio right behind it is lost.
                self._speaking_since = (
                    asyncio.get_running_loop().time() + self.config.tts_start_latency
                )
                self._pending_listen_start = False
                self.speaker.reset()
                self._stop_mic()
                await self._change_activity("speaking")
        elif state == "stop":
            if activity == "speaking":
                if self.listen_mode == "manual":
                    await self._change_activity("idle")
                else:
                    # Listening again once what is queued has played.
                    await self._change_activity("listening")
                    self._pending_listen_start = True
                    if self.speaker.idle:
                        self._playback_drained()
        elif state == "sentence_start" and isinstance(frame.get("text"), str):
            self.tts_sentences.append(frame["text"])

    def _plays_notify(self) -> bool:
        if self.config.notify is not None:
            return self.config.notify
        return is_newer_version("2.4.2", self.config.firmware)

    def _on_alert(self, frame: dict[str, Any]) -> None:
        fields = ("status", "message", "emotion")
        if all(isinstance(frame.get(key), str) for key in fields):
            self.alerts.append({key: frame[key] for key in fields})
        else:
            _LOGGER.warning("%s: alert needs status, message and emotion", self.name)

    def _on_binary(self, data: bytes) -> None:
        self.binary_received += 1
        self.timeline.append((asyncio.get_running_loop().time(), "audio"))
        try:
            packet = decode_audio(data, self.protocol_version)
        except ValueError:
            _LOGGER.debug("%s: short binary frame", self.name)
        else:
            self.audio_received.append(packet.payload)
            self.speaker.push(packet.payload)
        self._notify()

    def _playing_allowed(self) -> bool:
        """Return True when incoming audio is queued: Speaking, and settled."""
        return (
            self.state.activity == "speaking"
            and asyncio.get_running_loop().time() >= self._speaking_since
        )

    def _playback_drained(self) -> None:
        """Send the deferred ``listen start`` once playback has drained."""
        self._notify()
        if self._pending_listen_start and self.state.activity == "listening":
            self._pending_listen_start = False
            if self.connected:
                self._spawn(self._deferred_listen_start(), "listen")

    async def _deferred_listen_start(self) -> None:
        """Send the ``listen start`` unless something moved the device on first.

        The firmware does this on its main loop; a ``goodbye`` handled before
        it leaves the device idle, with no listen start and no new channel.
        """
        if self.state.activity == "listening" and self.connected:
            await self.send_listen("start", self.listen_mode)

    # ------------------------------------------------------------------ voice

    def say(self, pcm: bytes) -> None:
        """Put speech (16 kHz mono 16-bit PCM) in front of the microphone."""
        self._mic_source += pcm
        self._notify()

    async def wake(
        self,
        phrase: str = "你好小智",
        speech: bytes = b"",
        *,
        preroll: float = WAKE_WORD_PREROLL,
        mode: ListenMode = "auto",
        loudness: float = -20.0,
        phrase_audio: bytes | None = None,
        detect: bool | None = None,
    ) -> None:
        """Hear the wake word: dial if needed, pre-roll, detect, listen.

        As the firmware does with ``CONFIG_SEND_WAKE_WORD_DATA``: first about
        two seconds of audio from before the wake word, as fast as possible,
        then ``listen detect`` with the phrase, then ``listen start`` and the
        microphone in real time. The pre-roll is the room's noise with the
        wake phrase (``phrase_audio``, a tone without it) at ``loudness``
        dBFS at its end (:func:`~simulator.voice.wake_preroll`); with
        ``preroll=0`` the ``detect`` comes alone, as from a board that could
        not allocate its audio cache.

        ``detect=False`` is a board without the audio front end (ESP32-C3,
        C5, C6): its wake word starts listening as a button press does, with
        no pre-roll and no ``detect``. Unset, it follows the configuration's
        ``wake_preroll``.
        """
        if detect is None:
            detect = self.config.wake_preroll
        self._stop_notify()
        if not self.connected:
            await self.connect()
        self._stop_mic()
        await self.open_audio_channel()
        if detect:
            if preroll > 0:
                audio = wake_preroll(preroll, loudness, phrase_audio)
                for packet in self._mic().frames(audio):
                    await self.send_audio_packet(packet)
                    self.mic_frames_sent += 1
            await self.send_listen("detect", text=phrase)
        self.say(speech)
        await self.send_listen("start", mode)

    async def press_button(self) -> None:
        """Press the boot button, as ``ToggleChatState`` handles it.

        Speaking: abort. Listening: the conversation ends. Otherwise (idle,
        or playing a ``notify`` sound, which stops first) a conversation
        starts: the audio channel opens and the device listens (auto mode),
        without a wake word.
        """
        activity = self.state.activity
        if activity == "speaking":
            await self.send_abort()
            return
        if activity == "listening":
            await self.close_audio_channel()
            return
        self._stop_notify()
        if not self.connected:
            await self.connect()
        await self.open_audio_channel()
        await self.send_listen("start", "auto")

    async def interrupt(self, phrase: str = "你好小智") -> None:
        """Hear the wake word while speaking: abort, then listen again.

        In auto mode the ``listen start`` waits until playback has drained.
        """
        await self._send_text(
            abort_frame(self.outgoing_session_id, "wake_word_detected")
        )
        del phrase  # the firmware does not say it again
        await self._change_activity("listening")
        if self.listen_mode == "auto" and not self.speaker.idle:
            self._pending_listen_start = True
        else:
            await self.send_listen("start", self.listen_mode)

    def _mic(self) -> MicEncoder:
        if self._mic_encoder is None:
            self._mic_encoder = MicEncoder()
        return self._mic_encoder

    def _start_mic(self) -> None:
        if self._mic_task is None or self._mic_task.done():
            self._mic_task = self._spawn(self._stream_mic(), "microphone")

    def _stop_mic(self) -> None:
        if self._mic_task is not None and self.listen_mode != "realtime":
            self._mic_task.cancel()
            self._mic_task = None

    async def _stream_mic(self) -> None:
        """Stream the microphone while listening: speech, then silence."""
        loop = asyncio.get_running_loop()
        encoder = self._mic()
        frame_seconds = AUDIO_FRAME_DURATION_MS / 1000 / self.config.mic_speed
        # The first packet leaves once the input has warmed up (120 ms, in
        # real time whatever the speed: ``audio_service.cc``, each time voice
        # processing is enabled) and a frame has been captured.
        next_at = loop.time() + MIC_WARM_UP + frame_seconds
        await asyncio.sleep(next_at - loop.time())
        while self.connected and (
            self.state.activity == "listening" or self.listen_mode == "realtime"
        ):
            chunk = bytes(self._mic_source[: encoder.frame_bytes])
            del self._mic_source[: encoder.frame_bytes]
            for packet in encoder.frames(chunk or silence(0.06)):
                if not await self.send_audio_packet(packet):
                    return
                self.mic_frames_sent += 1
            next_at += frame_seconds
            await asyncio.sleep(max(0.0, next_at - loop.time()))

    # ------------------------------------------------------------------ outgoing

    async def _send_text(self, text: str) -> bool:
        if self._mqtt is not None:
            if not await self._mqtt.publish(text):
                _LOGGER.debug("%s: not connected, dropped %s", self.name, text)
                return False
            _LOGGER.debug("%s >> %s", self.name, text)
            self.sent.append(text)
            self._notify()
            return True
        ws = self._ws
        if ws is None or ws.closed:
            _LOGGER.debug("%s: not connected, dropped %s", self.name, text)
            return False
        _LOGGER.debug("%s >> %s", self.name, text)
        try:
            await ws.send_str(text)
        except (aiohttp.ClientError, ConnectionError) as err:
            _LOGGER.warning("%s: failed to send text: %r", self.name, err)
            return False
        self.sent.append(text)
        self._notify()
        return True

    async def send_mcp_payload(self, payload: str) -> bool:
        """Send a serialised JSON-RPC payload in an ``mcp`` frame."""
        return await self._send_text(mcp_frame(self.outgoing_session_id, payload))

    async def send_raw(self, text: str) -> bool:
        """Send any text frame as is."""
        return await self._send_text(text)

    async def send_bytes(self, data: bytes) -> bool:
        """Send any binary frame as is."""
        ws = self._ws
        if ws is None or ws.closed:
            return False
        _LOGGER.debug("%s >> %d bytes", self.name, len(data))
        try:
            await ws.send_bytes(data)
        except (aiohttp.ClientError, ConnectionError) as err:
            _LOGGER.warning("%s: failed to send binary: %r", self.name, err)
            return False
        self.sent_binary.append(bytes(data))
        return True

    async def send_listen(
        self,
        state: ListenState,
        mode: ListenMode = "auto",
        text: str | None = None,
    ) -> bool:
        """Send ``listen`` (start / stop / detect) and update the activity."""
        if state != "stop" and self.uses_mqtt and self.connected:
            await self.open_audio_channel()  # the firmware listens on a channel
        if state == "start":
            # As the firmware: enter Listening, then say so. A goodbye that
            # arrives while the frame is on its way leaves the device idle.
            self.listen_mode = mode
            self.listen_starts += 1
            await self._change_activity("listening")
        sent = await self._send_text(
            listen_frame(self.outgoing_session_id, state, mode, text)
        )
        if state == "start":
            if self.config.microphone and sent and self.state.activity == "listening":
                self._start_mic()
        elif state == "stop":
            self._stop_mic()
            await self._change_activity("idle")
        return sent

    async def send_abort(self, reason: str | None = None) -> bool:
        """Send ``abort`` (optionally with a reason), as ``AbortSpeaking`` does.

        The firmware (``main/application.cc``) only sends it: the device stays
        Speaking, and plays what still arrives, until the server's ``tts
        stop``; then auto mode listens again and manual mode goes idle. (A
        wake word's abort listens at once: :meth:`interrupt`.)
        """
        return await self._send_text(abort_frame(self.outgoing_session_id, reason))

    async def send_notification(
        self, method: str, params: Mapping[str, Any] | None = None
    ) -> bool:
        """Send a JSON-RPC notification (no ``id``) in an ``mcp`` frame."""
        payload: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            payload["params"] = dict(params)
        return await self.send_mcp_payload(dumps(payload))

    async def send_audio(self, frames: int = 3) -> list[bytes]:
        """Send Opus-sized binary frames framed for the protocol version."""
        sent: list[bytes] = []
        for _ in range(frames):
            size = self._audio_rng.randint(40, 120)
            payload = bytes(self._audio_rng.getrandbits(8) for _ in range(size))
            data = encode_audio(payload, self.protocol_version, self._audio_timestamp)
            self._audio_timestamp += AUDIO_FRAME_DURATION_MS
            if await self.send_bytes(data):
                sent.append(data)
        return sent

    def _set_activity(self, activity: str) -> None:
        """Change the activity without telling the server (link lifecycle)."""
        self.state.activity = activity
        if activity == "idle":
            # The microphone hears the room as it is now: what was to be said
            # into a conversation that ended is gone with it.
            self._mic_source.clear()

    async def _change_activity(self, activity: str) -> None:
        old = self.state.activity
        if old == activity:
            return
        self._set_activity(activity)
        self._notify()
        if self.config.notifications:
            await self.send_notification(
                "notifications/state_changed",
                {"newState": activity, "oldState": old},
            )

    # ------------------------------------------------------------------ upgrade

    async def upgrade(self, url: str) -> None:
        """Download and flash an image, as ``Application::UpgradeFirmware`` does.

        The audio channel closes first (over WebSocket that is the link).
        Success reboots into the new version; failure shows an alert and
        carries on.
        """
        if self._udp is not None:
            await self.close_audio_channel()
        if self._ws is not None:
            await self._close_link(REASON_DISCONNECTED)
        if await self._flash(url):
            await self.reboot()

    async def _flash(self, url: str) -> bool:
        """Download and write an image; True once it is the next boot's.

        As ``Ota::Upgrade`` (``main/ota.cc``) does: the next OTA slot is
        picked before the GET (with none it fails at once), the download is
        written into it (``esp_ota_write`` refuses a byte past its end), and
        ``esp_ota_end`` verifies the whole (``read_image``).
        """
        try:
            slot = next_ota_slot(self.config.partition_table, self.config.running_label)
            image = await self._download_image(url, slot.size)
            version = read_image(image, self.config.chip)
        except (aiohttp.ClientError, TimeoutError, ValueError) as err:
            _LOGGER.warning("%s: upgrade failed: %s", self.name, err)
            self.upgrades.append((None, str(err)))
            self._notify()
            return False
        _LOGGER.info("%s: upgraded to %s; rebooting", self.name, version)
        self.upgrades.append((version, ""))
        self.config = dataclasses.replace(
            self.config, firmware=version, running_partition=slot.label
        )
        return True

    async def _download_image(self, url: str, room: int) -> bytes:
        """GET an image into a slot of ``room`` bytes; ValueError when refused.

        As the firmware's OTA does: status 200 and a non-zero
        ``Content-Length``, and no byte past the end of the slot.
        """
        response = await self._client().get(self.rewrite(url), allow_redirects=False)
        try:
            length = response.content_length or 0
            if response.status != 200 or length <= 0:
                raise ValueError(f"HTTP {response.status}, length {length}")
            body = bytearray()
            async for chunk in response.content.iter_chunked(4096):
                body += chunk
                self.upgrade_bytes += len(chunk)
                self._notify()
                if len(body) > room:
                    raise ValueError(f"image larger than its {room}-byte slot")
        finally:
            response.release()
        if len(body) != length:
            raise ValueError("download cut short")
        return bytes(body)

    # ------------------------------------------------------------------ reboot

    async def reboot(self) -> None:
        """Reboot: close the link, come back after ``reboot_delay``."""
        self.reboot_count += 1
        _LOGGER.info("%s: rebooting", self.name)
        self.session_id = ""
        self.vision_url = None
        self.vision_token = ""
        self._notify()
        if self._udp is not None:
            await self.close_audio_channel()
        if self._ws is not None or self._mqtt is not None:
            await self._close_link(REASON_REBOOT)
        elif not self._stopping:
            self._schedule_reconnect(self.config.reboot_delay, reboot=True)

    def _schedule_reconnect(self, delay: float, *, reboot: bool = False) -> None:
        if self._reconnect_task is not None and not self._reconnect_task.done():
            return
        self._reconnect_task = self._spawn(
            self._reconnect(delay, reboot=reboot), "reconnect"
        )

    async def _reconnect(self, delay: float, *, reboot: bool) -> None:
        await asyncio.sleep(delay)
        while reboot and self.ota_url:
            try:
                await self.provision()
            except (OtaError, TimeoutError) as err:
                _LOGGER.error(
                    "%s: provisioning after reboot failed: %s", self.name, err
                )
                return
            url, self._upgrade_at_boot = self._upgrade_at_boot, None
            if url is None or not await self._flash(url):
                break
            # Flashed at boot: the device reboots into it and checks again.
            self.reboot_count += 1
            await asyncio.sleep(self.config.reboot_delay)
        await self._connect_with_retry()

    async def _connect_with_retry(self) -> None:
        """Connect, retrying with a doubling delay; give up on a crash."""
        delay = self.config.retry_delay
        while not self._stopping and not self.connected:
            try:
                await self.connect()
            except ServerHelloRejected:
                _LOGGER.error("%s: crashed on the server hello", self.name)
                return
            except DeviceError as err:
                _LOGGER.warning(
                    "%s: connection failed (%s); retrying in %.1f s",
                    self.name,
                    err,
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.config.max_backoff)
            else:
                return

    # ------------------------------------------------------------------ run

    async def run(self) -> None:
        """Provision (when an OTA URL is set), connect, serve until stopped.

        When the device cannot go online (provisioning failed, the OTA answer
        selects MQTT, no WebSocket URL) it records why in ``offline_reason``
        and idles until stopped, like a device waiting for its user.
        """
        reason = await self._boot()
        if reason is None:
            await self._connect_with_retry()
        else:
            self.offline_reason = reason
            self._notify()
        await self._stopped.wait()

    async def _boot(self) -> str | None:
        """Run the boot-time OTA check; return why the device stays offline."""
        if self.ota_url:
            try:
                await self.provision()
            except (OtaError, TimeoutError) as err:
                _LOGGER.error("%s: provisioning failed: %s", self.name, err)
                return "provisioning_failed"
            if self.uses_mqtt:
                return None
        if self.uses_mqtt:
            return None
        if not self.ws_url:
            _LOGGER.error("%s: no WebSocket URL; staying offline", self.name)
            return "no_websocket_url"
        return None

    def start(self) -> asyncio.Task[None]:
        """Start :meth:`run` in the background and return its task."""
        if self._run_task is None or self._run_task.done():
            self._run_task = self._spawn(self.run(), "run")
        return self._run_task

    async def stop(self) -> None:
        """Stop everything: close the link, cancel every task, close HTTP."""
        self._stopping = True
        await self.speaker.stop()
        self._stopped.set()
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not self._reader and task is not current:
                task.cancel()
        if self._ws is not None or self._mqtt is not None:
            await self._close_link(REASON_STOPPED)
        self._close_udp()
        pending = [task for task in self._tasks if task is not current]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
        if self._own_session is not None:
            await self._own_session.close()
            self._own_session = None
        self._notify()
