"""The device's own tools, offered to the conversation agent it talks through.

When a conversation comes through a XiaoZhi satellite, the Assist API gets that
device's AI-visible tools next to Home Assistant's own intents: "turn the
volume down" or "what is your battery" runs on the box that heard it.
User-only tools (reboot, firmware upgrade...) are never offered.
"""

import hashlib
import re
from typing import Any, Final, override

from homeassistant.components.llm import LLMTools
from homeassistant.core import HomeAssistant, callback
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers import llm
import probatio

from .const import DOMAIN, LOGGER
from .pairing.identity import loaded_runtimes
from .protocol import Tool
from .runtime import XiaozhiRuntime

TOOL_PREFIX: Final = f"{DOMAIN}__"
MAX_TOOL_NAME: Final = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


def tool_name(name: str, taken: set[str]) -> str:
    """Return the agent's name of a device tool: ``xiaozhi__audio_speaker_set_volume``.

    Agents accept letters, digits, ``_`` and ``-``, 64 at most; names stay
    unique.
    """
    part = _UNSAFE.sub("_", name.removeprefix("self.")).strip("_")
    if not part:  # a name in another script: keep it apart by a hash
        part = "tool_" + hashlib.sha256(name.encode()).hexdigest()[:8]
    base = (TOOL_PREFIX + part)[:MAX_TOOL_NAME]
    candidate, number = base, 2
    while candidate in taken:
        suffix = f"_{number}"
        candidate = base[: MAX_TOOL_NAME - len(suffix)] + suffix
        number += 1
    return candidate


def _parameters(tool: Tool) -> probatio.Schema:
    try:
        return probatio.from_openapi(dict(tool.input_schema))
    except (probatio.Invalid, ValueError, TypeError, KeyError) as err:
        LOGGER.debug("Tool %s has a schema the agent cannot use: %s", tool.name, err)
        return probatio.Schema({}, extra=probatio.ALLOW_EXTRA)


class DeviceTool(llm.Tool):
    """One tool of the device, run on that device only."""

    def __init__(self, runtime: XiaozhiRuntime, tool: Tool, name: str) -> None:
        """Describe the tool for the agent."""
        self._runtime = runtime
        self._tool = tool
        self.name = name
        self.description = tool.description or tool.name
        self.parameters = _parameters(tool)
        self.integration = DOMAIN

    @override
    async def async_call(
        self,
        hass: HomeAssistant,
        tool_input: llm.ToolInput,
        llm_context: llm.LLMContext,
    ) -> llm.ToolResult:
        """Call the tool on the device; its answer, or a clean error, comes back."""
        try:
            result = await self._runtime.commands.async_call_tool(
                self._tool.name, tool_input.tool_args, check=False
            )
        except HomeAssistantError as err:
            return llm.ToolResult(data={"error": str(err)}, error=True)
        data: dict[str, Any] = {
            "result": result.json if result.json is not None else result.text
        }
        if result.images:
            data["images"] = len(result.images)
        return llm.ToolResult(data=data, error=result.is_error)


def runtime_for_device(hass: HomeAssistant, device_id: str) -> XiaozhiRuntime | None:
    """Return the runtime of the loaded device with this registry id."""
    for runtime in loaded_runtimes(hass):
        if runtime.entry_data.device_id == device_id:
            return runtime
    return None


@callback
def async_get_tools(
    hass: HomeAssistant, llm_context: llm.LLMContext, api_id: str
) -> LLMTools | None:
    """Offer the tools of the device the conversation comes through."""
    if api_id != llm.LLM_API_ASSIST or llm_context.device_id is None:
        return None
    runtime = runtime_for_device(hass, llm_context.device_id)
    if runtime is None:
        return None
    taken: set[str] = set()
    tools: list[llm.Tool] = []
    for tool in runtime.entry_data.tools.values():
        if tool.user_only:
            continue
        name = tool_name(tool.name, taken)
        taken.add(name)
        tools.append(DeviceTool(runtime, tool, name))
    if not tools:
        return None
    return LLMTools(
        tools=tools,
        prompt=(
            f"You are speaking through {runtime.name}, a voice device. Tools "
            f"named {TOOL_PREFIX}... act on this device itself (its volume, "
            "screen, camera, lights...), not on other devices in the home."
        ),
    )
