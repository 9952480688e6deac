"""Device tools: descriptions from ``tools/list``, argument checks, results."""

from collections.abc import Mapping
from dataclasses import dataclass, field
import logging
import math
from typing import Any

import orjson

from .errors import ArgumentError
from .messages import json_too_deep

_LOGGER = logging.getLogger(__name__)

_JSON_START = frozenset('{["-0123456789tfn')
# The JSON encoder carries integers of at most 64 bits, signed or not.
_WIRE_INT_MIN = -(2**63)
_WIRE_INT_MAX = 2**64 - 1


@dataclass(slots=True, frozen=True, kw_only=True)
class ToolProperty:
    """One argument of a tool, as declared in its input schema."""

    name: str
    type: str | None
    required: bool
    default: Any = None
    minimum: int | float | None = None
    maximum: int | float | None = None
    enum: tuple[Any, ...] | None = None
    description: str = ""


@dataclass(slots=True, frozen=True, kw_only=True)
class Tool:
    """A tool the device offers over MCP."""

    name: str
    description: str = ""
    input_schema: Mapping[str, Any] = field(default_factory=dict)
    user_only: bool = False
    properties: tuple[ToolProperty, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Read the declared arguments once, in schema order."""
        object.__setattr__(self, "properties", _properties(self.input_schema))

    @classmethod
    def from_json(cls, obj: Any) -> Tool | None:
        """Build a tool from its ``tools/list`` entry; None when unusable."""
        if not isinstance(obj, dict):
            return None
        name = obj.get("name")
        if not isinstance(name, str) or not name:
            return None
        description = obj.get("description")
        schema = obj.get("inputSchema")
        annotations = obj.get("annotations")
        audience = (
            annotations.get("audience") if isinstance(annotations, dict) else None
        )
        return cls(
            name=name,
            description=description if isinstance(description, str) else "",
            input_schema=schema if isinstance(schema, dict) else {},
            user_only=isinstance(audience, list) and "user" in audience,
        )

    def as_dict(self) -> dict[str, Any]:
        """Return the tool in its wire shape (for storage and diagnostics)."""
        data: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "inputSchema": dict(self.input_schema),
        }
        if self.user_only:
            data["annotations"] = {"audience": ["user"]}
        return data


def _number(value: Any) -> int | float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    return None


def _properties(schema: Mapping[str, Any]) -> tuple[ToolProperty, ...]:
    props = schema.get("properties")
    if not isinstance(props, dict):
        return ()
    required = schema.get("required")
    required_names = (
        {name for name in required if isinstance(name, str)}
        if isinstance(required, list)
        else set()
    )
    result: list[ToolProperty] = []
    for name, spec in props.items():
        if not isinstance(spec, dict):
            spec = {}  # noqa: PLW2901
        prop_type = spec.get("type")
        enum = spec.get("enum")
        description = spec.get("description")
        result.append(
            ToolProperty(
                name=name,
                type=prop_type if isinstance(prop_type, str) else None,
                required=name in required_names,
                default=spec.get("default"),
                minimum=_number(spec.get("minimum")),
                maximum=_number(spec.get("maximum")),
                enum=tuple(enum) if isinstance(enum, list) else None,
                description=description if isinstance(description, str) else "",
            )
        )
    return tuple(result)


def _coerce(prop: ToolProperty, value: Any) -> Any:
    """Return ``value`` as the property's type, or raise ArgumentError."""
    match prop.type:
        case "boolean":
            if isinstance(value, bool):
                return value
        case "integer":
            if isinstance(value, bool):
                pass
            elif isinstance(value, int):
                return value
            elif isinstance(value, float) and value.is_integer():
                return int(value)
        case "number":
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            if isinstance(value, float) and math.isfinite(value):
                return value
        case "string":
            if isinstance(value, str):
                return value
        case "array":
            if isinstance(value, list):
                return value
        case "object":
            if isinstance(value, dict):
                return value
        case _:
            return value
    raise ArgumentError("invalid_type", prop.name, expected=prop.type)


def validate_arguments(tool: Tool, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Check ``arguments`` against the tool's schema and return them cleaned.

    The firmware silently replaces a wrong-typed argument by its default, so
    catching mistakes here is the only way a user learns about them.
    """
    props = tool.properties  # unique names: they are keys of the schema
    for name in arguments:
        for prop in props:
            if prop.name == name:
                break
        else:
            raise ArgumentError("unknown_argument", name, tool=tool.name)
    cleaned: dict[str, Any] = {}
    for prop in props:
        if prop.name not in arguments:
            if prop.required:
                raise ArgumentError("missing_argument", prop.name, tool=tool.name)
            continue
        value = _coerce(prop, arguments[prop.name])
        if prop.type in ("integer", "number") and (
            (prop.minimum is not None and value < prop.minimum)
            or (prop.maximum is not None and value > prop.maximum)
        ):
            raise ArgumentError(
                "out_of_range",
                prop.name,
                minimum=prop.minimum if prop.minimum is not None else "-∞",
                maximum=prop.maximum if prop.maximum is not None else "∞",
            )
        if type(value) is int and not _WIRE_INT_MIN <= value <= _WIRE_INT_MAX:
            # Said here, rather than failing in the send without a reason.
            raise ArgumentError(
                "out_of_range",
                prop.name,
                minimum=_WIRE_INT_MIN
                if prop.minimum is None
                else max(prop.minimum, _WIRE_INT_MIN),
                maximum=_WIRE_INT_MAX
                if prop.maximum is None
                else min(prop.maximum, _WIRE_INT_MAX),
            )
        if prop.enum is not None and value not in prop.enum:
            raise ArgumentError(
                "invalid_choice",
                prop.name,
                choices=", ".join(str(choice) for choice in prop.enum),
            )
        cleaned[prop.name] = value
    return cleaned


@dataclass(slots=True, frozen=True, kw_only=True)
class ToolImage:
    """A picture in a tool result."""

    mime_type: str
    data: str


@dataclass(slots=True, frozen=True, kw_only=True)
class ToolResult:
    """The outcome of ``tools/call``, whatever shape the device used.

    ``json`` is the text decoded as JSON once (the firmware answers booleans,
    numbers and objects as text), or None when the text is not usable JSON.
    """

    is_error: bool
    text: str
    images: tuple[ToolImage, ...] = ()
    code: int | None = None
    json: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Decode the text as JSON once."""
        object.__setattr__(self, "json", _decode_json(self.text))

    @classmethod
    def from_result(cls, result: Any) -> ToolResult:
        """Read a ``tools/call`` result object."""
        if not isinstance(result, dict):
            return cls(is_error=False, text="" if result is None else str(result))
        content = result.get("content")
        if type(content) is list and len(content) == 1:
            # The usual answer: one text item.
            item = content[0]
            if (
                type(item) is dict
                and item.get("type") == "text"
                and type(text := item.get("text")) is str
            ):
                return cls(is_error=result.get("isError") is True, text=text)
        texts: list[str] = []
        images: list[ToolImage] = []
        for item in content if isinstance(content, list) else ():
            if not isinstance(item, dict):
                continue
            kind = item.get("type")
            if kind == "text" and isinstance(item.get("text"), str):
                texts.append(item["text"])
            elif kind == "image" and (image := _image(item)) is not None:
                images.append(image)
        return cls(
            is_error=result.get("isError") is True,
            text="\n".join(texts),
            images=tuple(images),
        )

    @classmethod
    def from_error(cls, message: str, code: int | None) -> ToolResult:
        """Represent a JSON-RPC error reply to ``tools/call`` as a result."""
        return cls(is_error=True, text=message, code=code)


def _decode_json(text: str) -> Any:
    """Return ``text`` decoded as JSON, or None when it is not usable JSON."""
    text = text.strip()
    if not text or text[0] not in _JSON_START:
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return None if json_too_deep(text, value) else value


def _image(item: dict[str, Any]) -> ToolImage | None:
    """Read an image item: MCP's flat shape or the firmware's JSON string."""
    source: Any = item
    if isinstance(item.get("image"), str):
        try:
            source = orjson.loads(item["image"])
        except orjson.JSONDecodeError:
            _LOGGER.debug("Image content is not JSON")
            return None
    elif isinstance(item.get("image"), dict):
        source = item["image"]
    if not isinstance(source, dict):
        return None
    data = source.get("data")
    mime = source.get("mimeType", "image/jpeg")
    if not isinstance(data, str) or not isinstance(mime, str):
        return None
    return ToolImage(mime_type=mime, data=data)
