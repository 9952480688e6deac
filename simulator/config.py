"""Device configuration, fault switches and ready-made board tools."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
import uuid

from .firmware_image import DEFAULT_TABLE, FACTORY_TABLE, PartitionEntry
from .tools import (
    ArgumentValue,
    PropertySpec,
    ToolError,
    ToolHandler,
    ToolResult,
    ToolSpec,
)

if TYPE_CHECKING:
    from .device import SimulatedDevice

DEFAULT_MAC = "aa:bb:cc:dd:ee:01"


@dataclass(frozen=True, kw_only=True)
class DeviceConfig:
    """Everything that makes one simulated device what it is.

    Durations are in seconds; tests make them tiny.
    """

    # Identity
    mac: str = DEFAULT_MAC
    client_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    board: str = "xiaozhi-sim"
    firmware: str = "2.0.4"
    chip: str = "esp32s3"
    """The chip (``chip_model_name``); an image for another one is refused."""
    manufacturer: str | None = None
    """``board.manufacturer`` of the OTA check (firmware 2.4.2 and later)."""
    upgrade_at_boot: bool = True
    """Install a newer ``firmware`` the OTA answer offers, as the firmware
    does at boot (off: only record the offer)."""
    ota_slots: bool = True
    """Whether its partition table has OTA slots (``partitions/v2/16m.csv``;
    ``4m.csv`` has only ``factory``: such a board cannot update over the
    air)."""
    running_partition: str | None = None
    """The app partition it runs from (``ota.label`` of its OTA check); None
    for the first of its table. A flash switches it to the slot written."""
    language: str = "zh-CN"
    serial_number: str | None = None
    hmac_key: str = "xiaozhi-simulator"

    # Where to connect
    ota_url: str | None = None
    ws_url: str | None = None
    token: str | None = None
    protocol_version: int = 1
    mqtt: Mapping[str, str | int] | None = None
    """The ``mqtt`` settings, as an OTA answer would store them: MQTT + UDP."""
    websocket_only: bool = False
    """Ignore an OTA answer's ``mqtt`` block, as clients that speak only
    WebSocket do (py-xiaozhi's default, xiaozhi-sdk)."""

    # Hardware and tools
    camera: bool = False
    screen: bool = True
    battery: bool = False
    temperature: bool = True
    assets: bool = True
    extra_tools: Sequence[ToolSpec] = ()
    user_tools: bool = True

    # Hello
    features: bool = True
    extra_features: Mapping[str, bool] = field(default_factory=dict)
    hello_extra: Mapping[str, Any] = field(default_factory=dict)

    # Behaviour
    notifications: bool = False
    other_implementation: bool = False
    custom_messages: bool = False
    answer_pings: bool = True
    unknown_cursor: Literal["empty", "error"] = "empty"
    page_size_bytes: int = 8000
    tool_delays: Mapping[str, float] = field(default_factory=dict)
    max_msg_size: int = 4 * 1024 * 1024

    # Voice
    microphone: bool = True
    """Stream the microphone while Listening, as the firmware does."""
    notify: bool | None = None
    """Whether the firmware plays ``notify`` sounds; None: after 2.4.2 only.

    ``main`` kept version 2.4.2 for a while after the change, so a version
    alone does not tell.
    """
    mic_speed: float = 1.0
    """How much faster than real time the microphone streams (tests)."""
    tts_start_latency: float = 0.02
    """How long ``tts start`` takes to reach the main loop: audio sent sooner
    is dropped."""
    wake_preroll: bool = True
    """Whether a wake word sends the audio from before it, then ``listen
    detect`` (boards with the audio front end, such as the ESP32-S3). Off:
    a wake word starts listening as a button press does (ESP32-C3, C5, C6)."""
    notify_cue: float = 0.48
    """How long the popup cue plays before a ``notify`` fetches its sound."""
    decode_queue: int = 40
    """Packets the decode queue holds (40 in v2.4; 20 after the notify change)."""
    udp_strict_sequence: bool = True
    """Drop UDP packets whose sequence is not above the last (2.4.0 and later;
    older firmware drops only lower ones)."""

    # Timing
    idle_timeout: float = 120.0
    hello_timeout: float = 10.0
    reboot_delay: float = 3.0
    reconnect_delay: float | None = None
    mqtt_reconnect_delay: float = 10.0
    """esp-mqtt reconnects by itself this long after losing the broker."""
    retry_delay: float = 5.0
    max_backoff: float = 60.0
    activation_poll_interval: float = 3.0
    activation_retry_delay: float = 10.0
    ota_retry_delay: float = 10.0
    provision_timeout: float | None = None
    """How long provisioning may take at most; None: as the firmware, which
    checks and polls until it is activated (``application.cc``
    ``CheckNewVersion``), longer than a pairing code lives."""
    http_timeout: float = 30.0

    def __post_init__(self) -> None:
        """Normalise the MAC and check the protocol version."""
        object.__setattr__(self, "mac", self.mac.lower())
        object.__setattr__(self, "extra_tools", tuple(self.extra_tools))
        if self.protocol_version not in (1, 2, 3):
            raise ValueError("protocol_version must be 1, 2 or 3")

    @property
    def partition_table(self) -> list[PartitionEntry]:
        """Return its partition table."""
        return DEFAULT_TABLE if self.ota_slots else FACTORY_TABLE

    @property
    def running_label(self) -> str:
        """Return the label of the app partition it runs from."""
        if self.running_partition is not None:
            return self.running_partition
        return next(entry.label for entry in self.partition_table if entry.type == 0)

    @property
    def user_agent(self) -> str:
        """Return the User-Agent the firmware sends: ``<board>/<version>``."""
        return f"{self.board}/{self.firmware}"


@dataclass(kw_only=True)
class Faults:
    """Misbehaviours a test can switch on at any time (``device.faults``)."""

    silent: bool = False
    """Ignore every MCP request: recorded in ``mcp_requests``, never processed
    nor answered."""
    silent_methods: set[str] = field(default_factory=set)
    """Ignore MCP requests with these methods, the same way."""
    drop_on_call: set[str] = field(default_factory=set)
    """Drop the TCP connection, without a close frame, when one of these tools
    is called, before answering."""
    duplicate_replies: bool = False
    """Send every MCP reply twice."""
    reply_id_offset: int = 0
    """Add this to the id of every MCP reply."""
    invalid_error_json: bool = False
    """Make every MCP error frame invalid JSON (an unescaped quote)."""


def rgb_light_tool(name: str = "self.light.set_rgb") -> ToolSpec:
    """Return an RGB light tool: integers ``r``, ``g``, ``b`` 0-255, required."""
    return ToolSpec(
        name=name,
        description="Set the colour of the light strip from red, green and blue.",
        properties=[
            PropertySpec(name=channel, type="integer", minimum=0, maximum=255)
            for channel in ("r", "g", "b")
        ],
    )


def no_arg_tool(
    name: str = "self.dog.forward", description: str = "Walk one step forward."
) -> ToolSpec:
    """Return a tool without arguments."""
    return ToolSpec(name=name, description=description)


def bool_tool(
    name: str = "self.led.set_enabled", property_name: str = "enabled"
) -> ToolSpec:
    """Return a tool with one required boolean argument."""
    return ToolSpec(
        name=name,
        description="Switch the status LED on or off.",
        properties=[PropertySpec(name=property_name, type="boolean")],
    )


def string_tool(
    name: str = "self.display.show_text", property_name: str = "text"
) -> ToolSpec:
    """Return a tool with one required string argument."""
    return ToolSpec(
        name=name,
        description="Show a short text on the screen.",
        properties=[PropertySpec(name=property_name, type="string")],
    )


def many_tools(n: int = 40, prefix: str = "self.bulk.tool_") -> list[ToolSpec]:
    """Return ``n`` sizeable tools whose listing spans several 8000-byte pages.

    Each tool serialises to roughly 700 bytes; names are zero-padded so they
    sort in registration order.
    """
    width = max(2, len(str(n - 1)))
    filler = (
        "This tool exists to make the tool listing long enough to need several "
        "pages. It accepts a level, a flag and a label and does nothing with "
        "them except report success. "
    )
    return [
        ToolSpec(
            name=f"{prefix}{index:0{width}d}",
            description=f"Bulk tool number {index}. " + filler * 3,
            properties=[
                PropertySpec(name="level", type="integer", minimum=0, maximum=100),
                PropertySpec(name="flag", type="boolean", default=False),
                PropertySpec(name="label", type="string", default="bulk"),
            ],
        )
        for index in range(n)
    ]


def _fixed_handler(result: ToolResult | None, error: str | None) -> ToolHandler:
    """Return a handler that answers ``result`` or fails with ``error``."""

    async def handler(
        device: SimulatedDevice, arguments: dict[str, ArgumentValue]
    ) -> ToolResult:
        del device, arguments
        if error is not None:
            raise ToolError(error)
        return True if result is None else result

    return handler


def tool_from_dict(data: Mapping[str, Any]) -> ToolSpec:
    """Build a tool from a JSON object.

    Keys: ``name`` (required), ``description``, ``inputSchema`` (MCP shape) or
    ``properties`` (either an MCP ``properties`` object or a list of
    ``{"name", "type", "default"?, "minimum"?, "maximum"?}``), ``user_only``,
    ``result`` (what a call returns; booleans, numbers and objects become
    strings the firmware way) and ``error`` (make every call fail with it).
    """
    if not isinstance(data, Mapping):
        raise TypeError("Every tool is a JSON object")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("Every tool needs a non-empty string 'name'")
    properties: list[PropertySpec] = []
    schema = data.get("inputSchema")
    if isinstance(schema, Mapping):
        required = schema.get("required")
        required_names = set(required) if isinstance(required, list) else None
        for prop_name, prop_schema in (schema.get("properties") or {}).items():
            properties.append(
                PropertySpec.from_schema(
                    prop_name,
                    prop_schema,
                    required=required_names is None or prop_name in required_names,
                )
            )
    else:
        raw = data.get("properties") or []
        if isinstance(raw, Mapping):
            properties = [
                PropertySpec.from_schema(prop_name, prop_schema)
                for prop_name, prop_schema in raw.items()
            ]
        else:
            properties = [
                PropertySpec(
                    name=item["name"],
                    type=item.get("type", "string"),
                    default=item.get("default"),
                    minimum=item.get("minimum"),
                    maximum=item.get("maximum"),
                )
                for item in raw
            ]
    return ToolSpec(
        name=name,
        description=str(data.get("description", "")),
        properties=properties,
        user_only=bool(data.get("user_only", False)),
        handler=_fixed_handler(data.get("result"), data.get("error")),
    )


def load_tools_file(path: str | Path) -> list[ToolSpec]:
    """Load a JSON list of tool objects (see :func:`tool_from_dict`)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise TypeError("A tools file holds a JSON list of tool objects")
    return [tool_from_dict(item) for item in data]
