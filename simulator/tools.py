"""Tool definitions, their JSON form and the firmware's argument rules.

A tool is a name, a description, a list of typed properties and a handler.
The JSON a device publishes for a tool, the way it turns a `tools/call`
request's arguments into values and the way it turns a handler's return value
into an MCP result all follow the xiaozhi-esp32 firmware:

* property types are only ``boolean``, ``integer`` and ``string``;
* a property without a default is listed in ``required``;
* an argument of the wrong JSON type counts as missing: its default is used
  silently when it has one, otherwise the call fails with
  ``Missing valid argument: <name>``;
* integers come from any JSON number, truncated toward zero and saturated to
  the 32-bit range; an integer outside ``[minimum, maximum]`` fails the call;
* booleans, integers and JSON objects are returned as *strings* in a text
  content item.
"""

import base64
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
import json
from typing import TYPE_CHECKING, Any, Literal, get_args

if TYPE_CHECKING:
    from .device import SimulatedDevice

PropertyType = Literal["boolean", "integer", "string"]
ArgumentValue = bool | int | str

INT_MIN = -(2**31)
INT_MAX = 2**31 - 1

_PROPERTY_TYPES: frozenset[str] = frozenset(get_args(PropertyType))


class ToolError(Exception):
    """A tool failed; its message is what the device reports to the caller."""


class ArgumentError(ToolError):
    """The arguments of a `tools/call` request do not satisfy the tool."""


@dataclass(frozen=True, kw_only=True)
class ImageResult:
    """An image returned by a tool (sent as an ``image`` content item)."""

    mime_type: str = "image/jpeg"
    data: bytes = b""


type ToolResult = str | bool | int | Mapping[str, Any] | list[Any] | ImageResult
type ToolHandler = Callable[
    [SimulatedDevice, dict[str, ArgumentValue]], ToolResult | Awaitable[ToolResult]
]


def dumps(value: object) -> str:
    """Serialise like cJSON_PrintUnformatted: compact, UTF-8 kept as is."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _is_number(value: object) -> bool:
    """Return whether a decoded JSON value is a JSON number."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def to_int32(value: float) -> int:
    """Convert a JSON number the way cJSON fills ``valueint``."""
    if value >= INT_MAX:
        return INT_MAX
    if value <= INT_MIN:
        return INT_MIN
    return int(value)


@dataclass(frozen=True, kw_only=True)
class PropertySpec:
    """One typed property of a tool's input schema."""

    name: str
    type: PropertyType
    default: ArgumentValue | None = None
    minimum: int | None = None
    maximum: int | None = None

    def __post_init__(self) -> None:
        """Reject definitions the firmware would refuse to build."""
        if self.type not in _PROPERTY_TYPES:
            raise ValueError(f"Unsupported property type: {self.type}")
        if self.type != "integer" and (
            self.minimum is not None or self.maximum is not None
        ):
            raise ValueError("Range limits only apply to integer properties")
        if self.default is not None:
            if self.accept(self.default) is None:
                raise ValueError(
                    f"Default of {self.name} does not match type {self.type}"
                )
            if self.type == "integer" and self.range_error(int(self.default)):
                raise ValueError("Default value must be within the specified range")

    @property
    def required(self) -> bool:
        """Return whether callers must pass this property."""
        return self.default is None

    def to_schema(self) -> dict[str, Any]:
        """Return the JSON schema fragment, keys in firmware order."""
        schema: dict[str, Any] = {"type": self.type}
        if self.default is not None:
            schema["default"] = self.default
        if self.minimum is not None:
            schema["minimum"] = self.minimum
        if self.maximum is not None:
            schema["maximum"] = self.maximum
        return schema

    def accept(self, value: object) -> ArgumentValue | None:
        """Return the value if its JSON type fits this property, else None."""
        if self.type == "boolean":
            return value if isinstance(value, bool) else None
        if self.type == "integer":
            return to_int32(value) if _is_number(value) else None  # type: ignore[arg-type]
        return value if isinstance(value, str) else None

    def range_error(self, value: int) -> str | None:
        """Return the firmware's message for an out-of-range integer."""
        if self.minimum is not None and value < self.minimum:
            return (
                f"Property '{self.name}': value {value} is below minimum {self.minimum}"
            )
        if self.maximum is not None and value > self.maximum:
            return (
                f"Property '{self.name}': value {value} exceeds maximum {self.maximum}"
            )
        return None

    @classmethod
    def from_schema(
        cls, name: str, schema: Mapping[str, Any], *, required: bool = True
    ) -> PropertySpec:
        """Build a property from an MCP ``inputSchema`` property object.

        The firmware cannot express an optional property without a default, so
        a property that is not required and has no default gets the zero value
        of its type as default.
        """
        prop_type = schema.get("type", "string")
        default = schema.get("default")
        if default is None and not required:
            default = {"boolean": False, "integer": 0}.get(prop_type, "")
        return cls(
            name=name,
            type=prop_type,
            default=default,
            minimum=schema.get("minimum"),
            maximum=schema.get("maximum"),
        )


async def _default_handler(
    device: SimulatedDevice, arguments: dict[str, ArgumentValue]
) -> ToolResult:
    """Do nothing and report success, like most board tools."""
    del device, arguments
    return True


@dataclass(frozen=True, kw_only=True)
class ToolSpec:
    """A tool as registered on the device."""

    name: str
    description: str = ""
    properties: Sequence[PropertySpec] = field(default_factory=tuple)
    user_only: bool = False
    handler: ToolHandler = _default_handler

    def __post_init__(self) -> None:
        """Freeze the property list and reject duplicate property names."""
        props = tuple(self.properties)
        names = [prop.name for prop in props]
        if len(set(names)) != len(names):
            raise ValueError(f"Duplicate property names in tool {self.name}")
        object.__setattr__(self, "properties", props)

    def to_json(self) -> dict[str, Any]:
        """Return the tool object as listed by `tools/list`."""
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {prop.name: prop.to_schema() for prop in self.properties},
        }
        required = [prop.name for prop in self.properties if prop.required]
        if required:
            schema["required"] = required
        tool: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "inputSchema": schema,
        }
        if self.user_only:
            tool["annotations"] = {"audience": ["user"]}
        return tool

    def resolve_arguments(
        self, arguments: Mapping[str, Any] | None
    ) -> dict[str, ArgumentValue]:
        """Turn request arguments into values, property by property.

        Raises ArgumentError with the firmware's message on the first property
        that is out of range or missing without a default.
        """
        values: dict[str, ArgumentValue] = {}
        for prop in self.properties:
            raw = arguments.get(prop.name) if arguments is not None else None
            value = prop.accept(raw)
            if value is not None:
                if prop.type == "integer" and (message := prop.range_error(value)):  # type: ignore[arg-type]
                    raise ArgumentError(message)
                values[prop.name] = value
            elif prop.default is not None:
                values[prop.name] = prop.default
            else:
                raise ArgumentError(f"Missing valid argument: {prop.name}")
        return values


def result_text(result: ToolResult) -> str:
    """Return the text the firmware puts in a text content item."""
    if isinstance(result, bool):
        return "true" if result else "false"
    if isinstance(result, int | str):
        return str(result)
    return dumps(result)


def result_object(result: ToolResult) -> dict[str, Any]:
    """Return the MCP result object for a handler's return value."""
    if isinstance(result, ImageResult):
        image = {
            "type": "image",
            "mimeType": result.mime_type,
            "data": base64.b64encode(result.data).decode("ascii"),
        }
        content: dict[str, Any] = {"type": "image", "image": dumps(image)}
    else:
        content = {"type": "text", "text": result_text(result)}
    return {"content": [content], "isError": False}


def error_result_object(message: str) -> dict[str, Any]:
    """Return a failed result, as other device implementations report errors."""
    return {"content": [{"type": "text", "text": message}], "isError": True}
