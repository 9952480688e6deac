"""Tool descriptions, argument checks and the shapes of tool results."""

from typing import Any

import pytest

from aioxiaozhi import (
    ArgumentError,
    Tool,
    ToolProperty,
    ToolResult,
    validate_arguments,
)
from aioxiaozhi.tools import ToolImage

from .fakes import REBOOT_TOOL, VOLUME_TOOL

LIGHT = Tool.from_json(
    {
        "name": "self.light.set",
        "description": "Set the light",
        "inputSchema": {
            "type": "object",
            "properties": {
                "on": {"type": "boolean", "description": "Light on"},
                "level": {"type": "integer", "minimum": 1, "maximum": 10},
                "gain": {"type": "number", "minimum": -1.5},
                "cap": {"type": "integer", "maximum": 5},
                "color": {"type": "string", "enum": ["red", "green"]},
                "tags": {"type": "array"},
                "extra": {"type": "object"},
                "blob": {"type": "binary"},
                "anything": {},
            },
            "required": ["on"],
        },
    }
)


def light() -> Tool:
    assert LIGHT is not None
    return LIGHT


def test_from_json_valid() -> None:
    tool = Tool.from_json(VOLUME_TOOL)
    assert tool is not None
    assert tool.name == "self.audio_speaker.set_volume"
    assert tool.description == VOLUME_TOOL["description"]
    assert tool.user_only is False
    assert tool.properties == (
        ToolProperty(
            name="volume", type="integer", required=True, minimum=0, maximum=100
        ),
    )
    assert tool.as_dict() == VOLUME_TOOL


def test_from_json_user_only() -> None:
    tool = Tool.from_json(REBOOT_TOOL)
    assert tool is not None
    assert tool.user_only is True
    assert tool.properties == ()
    assert tool.as_dict()["annotations"] == {"audience": ["user"]}


@pytest.mark.parametrize(
    "annotations",
    [None, "user", {"audience": "user"}, {"audience": ["assistant"]}, {}],
)
def test_from_json_not_user_only(annotations: Any) -> None:
    tool = Tool.from_json({"name": "t", "annotations": annotations})
    assert tool is not None
    assert tool.user_only is False


@pytest.mark.parametrize(
    "obj",
    [None, "self.reboot", ["self.reboot"], {}, {"name": ""}, {"name": 5}],
)
def test_from_json_unusable(obj: Any) -> None:
    assert Tool.from_json(obj) is None


@pytest.mark.parametrize(
    "schema",
    [
        None,
        "object",
        {"type": "object"},
        {"type": "object", "properties": ["a", "b"]},
    ],
)
def test_from_json_bad_schema(schema: Any) -> None:
    tool = Tool.from_json({"name": "t", "description": 42, "inputSchema": schema})
    assert tool is not None
    assert tool.description == ""
    assert tool.properties == ()
    assert validate_arguments(tool, {}) == {}
    with pytest.raises(ArgumentError) as err:
        validate_arguments(tool, {"a": 1})
    assert err.value.reason == "unknown_argument"


def test_properties() -> None:
    props = {prop.name: prop for prop in light().properties}
    assert list(props) == [
        "on",
        "level",
        "gain",
        "cap",
        "color",
        "tags",
        "extra",
        "blob",
        "anything",
    ]
    assert props["on"].required is True
    assert props["on"].description == "Light on"
    assert props["level"].required is False
    assert (props["level"].minimum, props["level"].maximum) == (1, 10)
    assert (props["gain"].minimum, props["gain"].maximum) == (-1.5, None)
    assert props["color"].enum == ("red", "green")
    assert props["anything"].type is None
    assert props["anything"].enum is None


def test_properties_odd_specs() -> None:
    tool = Tool(
        name="t",
        input_schema={
            "properties": {
                "a": "not a spec",
                "b": {
                    "type": ["integer"],
                    "minimum": True,
                    "maximum": "9",
                    "default": 7,
                    "enum": "x",
                    "description": 3,
                },
            },
            "required": "a",
        },
    )
    a, b = tool.properties
    assert a == ToolProperty(name="a", type=None, required=False)
    assert b == ToolProperty(name="b", type=None, required=False, default=7)


def test_required_ignores_non_strings() -> None:
    tool = Tool(
        name="t",
        input_schema={
            "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
            "required": ["b", 3, None],
        },
    )
    assert [prop.required for prop in tool.properties] == [False, True]


def test_default_is_kept() -> None:
    tool = Tool(
        name="self.screen.snapshot",
        input_schema={
            "properties": {
                "url": {"type": "string"},
                "quality": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 100,
                    "default": 80,
                },
            },
            "required": ["url"],
        },
    )
    quality = tool.properties[1]
    assert quality.default == 80
    assert quality.required is False
    # The device fills in the default: nothing is added here.
    assert validate_arguments(tool, {"url": "http://x"}) == {"url": "http://x"}


def test_validate_cleans_every_type() -> None:
    arguments = {
        "on": True,
        "level": 10.0,
        "gain": -1.5,
        "cap": -3,
        "color": "green",
        "tags": ["a"],
        "extra": {"k": 1},
        "blob": b"\x00",
        "anything": None,
    }
    cleaned = validate_arguments(light(), arguments)
    assert cleaned == {**arguments, "level": 10}
    assert type(cleaned["level"]) is int


def test_validate_only_given_arguments() -> None:
    assert validate_arguments(light(), {"on": False}) == {"on": False}


def test_missing_argument() -> None:
    with pytest.raises(ArgumentError) as err:
        validate_arguments(light(), {"level": 3})
    assert err.value.reason == "missing_argument"
    assert err.value.argument == "on"
    assert err.value.placeholders == {"argument": "on", "tool": "self.light.set"}


def test_unknown_argument() -> None:
    with pytest.raises(ArgumentError) as err:
        validate_arguments(light(), {"on": True, "brightness": 3})
    assert err.value.reason == "unknown_argument"
    assert err.value.placeholders == {
        "argument": "brightness",
        "tool": "self.light.set",
    }
    assert str(err.value) == ("unknown_argument: brightness {'tool': 'self.light.set'}")


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("on", "true", "boolean"),
        ("on", 1, "boolean"),
        ("level", True, "integer"),
        ("level", 2.5, "integer"),
        ("level", "5", "integer"),
        ("level", float("inf"), "integer"),
        ("gain", False, "number"),
        ("gain", "1.0", "number"),
        ("color", 1, "string"),
        ("tags", ("a",), "array"),
        ("extra", [], "object"),
    ],
)
def test_invalid_type(name: str, value: Any, expected: str) -> None:
    arguments = {"on": True, name: value}
    with pytest.raises(ArgumentError) as err:
        validate_arguments(light(), arguments)
    assert err.value.reason == "invalid_type"
    assert err.value.placeholders == {"argument": name, "expected": expected}


@pytest.mark.parametrize(
    ("name", "value", "minimum", "maximum"),
    [
        ("level", 0, "1", "10"),
        ("level", 11, "1", "10"),
        ("level", 11.0, "1", "10"),
        ("gain", -2, "-1.5", "∞"),
        ("cap", 6, "-∞", "5"),
    ],
)
def test_out_of_range(name: str, value: Any, minimum: str, maximum: str) -> None:
    with pytest.raises(ArgumentError) as err:
        validate_arguments(light(), {"on": True, name: value})
    assert err.value.reason == "out_of_range"
    assert err.value.placeholders == {
        "argument": name,
        "minimum": minimum,
        "maximum": maximum,
    }


@pytest.mark.parametrize(("name", "value"), [("level", 1), ("level", 10)])
def test_range_is_inclusive(name: str, value: int) -> None:
    assert validate_arguments(light(), {"on": True, name: value})[name] == value


def test_invalid_choice() -> None:
    with pytest.raises(ArgumentError) as err:
        validate_arguments(light(), {"on": True, "color": "blue"})
    assert err.value.reason == "invalid_choice"
    assert err.value.placeholders == {"argument": "color", "choices": "red, green"}


# --- results ---------------------------------------------------------------


def test_result_text() -> None:
    result = ToolResult.from_result(
        {"content": [{"type": "text", "text": "true"}], "isError": False}
    )
    assert result == ToolResult(is_error=False, text="true")
    assert result.json is True


def test_result_multiple_texts() -> None:
    result = ToolResult.from_result(
        {
            "content": [
                {"type": "text", "text": "one"},
                "junk",
                {"type": "text", "text": 2},
                {"type": "audio", "data": "x"},
                {"type": "text", "text": "two"},
            ]
        }
    )
    assert result.text == "one\ntwo"
    assert result.is_error is False
    assert result.images == ()


@pytest.mark.parametrize(("flag", "expected"), [(True, True), ("true", False)])
def test_result_is_error(flag: Any, expected: bool) -> None:
    result = ToolResult.from_result(
        {"content": [{"type": "text", "text": "Volume out of range"}], "isError": flag}
    )
    assert result.is_error is expected
    assert result.text == "Volume out of range"
    assert result.code is None


@pytest.mark.parametrize(
    ("result", "text"),
    [(None, ""), ("plain", "plain"), (42, "42"), ({"content": "x"}, "")],
)
def test_result_odd_shapes(result: Any, text: str) -> None:
    assert ToolResult.from_result(result) == ToolResult(is_error=False, text=text)


@pytest.mark.parametrize(
    "item",
    [
        {"type": "image", "data": "QUJD", "mimeType": "image/png"},
        {
            "type": "image",
            "image": '{"type":"image","mimeType":"image/png","data":"QUJD"}',
        },
        {"type": "image", "image": {"mimeType": "image/png", "data": "QUJD"}},
    ],
)
def test_result_image(item: dict[str, Any]) -> None:
    result = ToolResult.from_result(
        {"content": [{"type": "text", "text": "photo"}, item]}
    )
    assert result.text == "photo"
    assert result.images == (ToolImage(mime_type="image/png", data="QUJD"),)


def test_result_image_default_mime_type() -> None:
    result = ToolResult.from_result({"content": [{"type": "image", "data": "QUJD"}]})
    assert result.images == (ToolImage(mime_type="image/jpeg", data="QUJD"),)


@pytest.mark.parametrize(
    "item",
    [
        {"type": "image", "image": "{not json"},
        {"type": "image", "image": "[1, 2]"},
        {"type": "image", "image": '{"mimeType":"image/png"}'},
        {"type": "image", "data": 5},
        {"type": "image", "data": "QUJD", "mimeType": None},
        {"type": "image"},
    ],
)
def test_result_bad_image(item: dict[str, Any]) -> None:
    result = ToolResult.from_result({"content": [item]})
    assert result.images == ()
    assert result.is_error is False


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"audio_speaker":{"volume":70}}', {"audio_speaker": {"volume": 70}}),
        ("  [1, 2] ", [1, 2]),
        ("true", True),
        ("false", False),
        ("null", None),
        ("42", 42),
        ("-1.5", -1.5),
        ('"quoted"', "quoted"),
        ("plain text", None),
        ("", None),
        ("   ", None),
        ("{broken", None),
        ("nothing", None),
        ("42 apples", None),
    ],
)
def test_result_json(text: str, expected: Any) -> None:
    assert ToolResult(is_error=False, text=text).json == expected


def test_result_from_error() -> None:
    result = ToolResult.from_error("Unknown tool: x", -32601)
    assert result == ToolResult(is_error=True, text="Unknown tool: x", code=-32601)
    assert ToolResult.from_error("boom", None).code is None
