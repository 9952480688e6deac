"""Tool definitions, argument rules, presets and tools files."""

import json
from pathlib import Path
from typing import Any

import pytest

from aioxiaozhi.testing import (
    ArgumentError,
    DeviceConfig,
    ImageResult,
    PropertySpec,
    ToolSpec,
    bool_tool,
    load_tools_file,
    many_tools,
    no_arg_tool,
    rgb_light_tool,
    string_tool,
    tool_from_dict,
)
from aioxiaozhi.testing.tools import (
    INT_MAX,
    INT_MIN,
    result_object,
    result_text,
    to_int32,
)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"type": "number"}, "Unsupported property type"),
        ({"type": "string", "minimum": 1}, "Range limits"),
        ({"type": "boolean", "maximum": 1}, "Range limits"),
        ({"type": "integer", "default": "x"}, "does not match"),
        ({"type": "integer", "default": 5, "minimum": 10}, "within the specified"),
        ({"type": "boolean", "default": 1}, "does not match"),
    ],
)
def test_invalid_properties(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PropertySpec(name="p", **kwargs)


def test_duplicate_property_names() -> None:
    prop = PropertySpec(name="p", type="string")
    with pytest.raises(ValueError, match="Duplicate"):
        ToolSpec(name="t", properties=[prop, prop])


def test_property_schema_and_acceptance() -> None:
    prop = PropertySpec(name="n", type="integer", default=3, minimum=0, maximum=9)
    assert prop.to_schema() == {
        "type": "integer",
        "default": 3,
        "minimum": 0,
        "maximum": 9,
    }
    assert not prop.required
    assert prop.accept(4.7) == 4
    assert prop.accept(True) is None
    assert prop.accept("4") is None
    assert prop.range_error(10) == "Property 'n': value 10 exceeds maximum 9"
    assert prop.range_error(-1) == "Property 'n': value -1 is below minimum 0"
    assert prop.range_error(5) is None
    flag = PropertySpec(name="f", type="boolean", default=False)
    assert flag.to_schema() == {"type": "boolean", "default": False}
    assert flag.accept(0) is None
    assert flag.accept(False) is False
    assert to_int32(1e30) == INT_MAX
    assert to_int32(-1e30) == INT_MIN
    assert to_int32(-2.9) == -2


def test_resolve_arguments_in_property_order() -> None:
    tool = ToolSpec(
        name="t",
        properties=[
            PropertySpec(name="a", type="integer", minimum=0, maximum=1),
            PropertySpec(name="b", type="string"),
            PropertySpec(name="c", type="boolean", default=True),
        ],
    )
    assert tool.resolve_arguments({"a": 1, "b": "x", "c": "no"}) == {
        "a": 1,
        "b": "x",
        "c": True,
    }
    with pytest.raises(ArgumentError, match="value 2 exceeds maximum 1"):
        tool.resolve_arguments({"a": 2})
    with pytest.raises(ArgumentError, match="Missing valid argument: a"):
        tool.resolve_arguments(None)
    with pytest.raises(ArgumentError, match="Missing valid argument: b"):
        tool.resolve_arguments({"a": 0})


def test_results() -> None:
    assert result_text(True) == "true"
    assert result_text(0) == "0"
    assert result_text([1, {"a": None}]) == '[1,{"a":null}]'
    image = result_object(ImageResult(mime_type="image/png", data=b"\x89PNG"))
    assert image["isError"] is False
    assert json.loads(image["content"][0]["image"])["mimeType"] == "image/png"


def test_presets() -> None:
    rgb = rgb_light_tool().to_json()
    assert rgb["name"] == "self.light.set_rgb"
    assert rgb["inputSchema"]["required"] == ["r", "g", "b"]
    assert no_arg_tool().to_json()["inputSchema"] == {
        "type": "object",
        "properties": {},
    }
    assert bool_tool().to_json()["inputSchema"]["properties"] == {
        "enabled": {"type": "boolean"}
    }
    assert string_tool().to_json()["inputSchema"]["properties"] == {
        "text": {"type": "string"}
    }
    assert no_arg_tool("music_player.pause").name == "music_player.pause"
    bulk = many_tools(40)
    assert [tool.name for tool in bulk] == sorted(tool.name for tool in bulk)
    assert bulk[0].name == "self.bulk.tool_00"
    sizes = [len(json.dumps(tool.to_json())) for tool in bulk]
    assert sum(sizes) > 3 * 8000
    assert many_tools(150)[0].name == "self.bulk.tool_000"


def test_tool_from_dict_shapes() -> None:
    mcp = tool_from_dict(
        {
            "name": "music_player.set_volume",
            "description": "Set volume",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "level": {"type": "integer", "minimum": 0, "maximum": 10},
                    "fade": {"type": "boolean"},
                    "label": {"type": "string"},
                    "step": {"type": "integer"},
                },
                "required": ["level"],
            },
        }
    )
    schema = mcp.to_json()["inputSchema"]
    assert schema["required"] == ["level"]
    assert schema["properties"]["fade"] == {"type": "boolean", "default": False}
    assert schema["properties"]["label"] == {"type": "string", "default": ""}
    assert schema["properties"]["step"] == {"type": "integer", "default": 0}

    no_required = tool_from_dict(
        {"name": "t", "inputSchema": {"properties": {"x": {"type": "string"}}}}
    )
    assert no_required.to_json()["inputSchema"]["required"] == ["x"]

    listed = tool_from_dict(
        {
            "name": "t",
            "properties": [
                {"name": "x", "type": "integer", "minimum": 1, "maximum": 2},
                {"name": "y", "default": "d"},
            ],
            "user_only": True,
        }
    )
    assert listed.user_only
    assert listed.to_json()["inputSchema"]["required"] == ["x"]
    assert listed.to_json()["annotations"] == {"audience": ["user"]}

    mapped = tool_from_dict({"name": "t", "properties": {"on": {"type": "boolean"}}})
    assert mapped.to_json()["inputSchema"]["required"] == ["on"]

    with pytest.raises(ValueError, match="name"):
        tool_from_dict({"description": "x"})
    with pytest.raises(TypeError):
        tool_from_dict(["x"])  # type: ignore[arg-type]


def test_load_tools_file(tmp_path: Path) -> None:
    path = tmp_path / "tools.json"
    path.write_text(
        json.dumps(
            [
                {"name": "take_photo", "result": {"ok": True}},
                {"name": "self.chassis.go_forward", "error": "blocked"},
            ]
        ),
        encoding="utf-8",
    )
    tools = load_tools_file(path)
    assert [tool.name for tool in tools] == ["take_photo", "self.chassis.go_forward"]
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x"}', encoding="utf-8")
    with pytest.raises(TypeError):
        load_tools_file(bad)


def test_config_validation() -> None:
    assert DeviceConfig(mac="AA:BB:CC:DD:EE:FF").mac == "aa:bb:cc:dd:ee:ff"
    assert DeviceConfig().user_agent == "xiaozhi-sim/2.0.4"
    assert DeviceConfig().client_id != DeviceConfig().client_id
    with pytest.raises(ValueError, match="protocol_version"):
        DeviceConfig(protocol_version=4)
