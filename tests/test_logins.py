"""The failed-login limiter: a guesser is shut out, a device paired again is not."""

from typing import Any

from aiohttp.test_utils import TestClient
from homeassistant.config_entries import SOURCE_USER
from homeassistant.core import HomeAssistant
from homeassistant.data_entry_flow import FlowResultType
import pytest

from custom_components.xiaozhi.const import DOMAIN
from custom_components.xiaozhi.domain_data import DATA_KEY
from custom_components.xiaozhi.transport import logins as logins_module
from custom_components.xiaozhi.transport.logins import MAX_FAILURES, FailedLogins
from tests.test_config_flow import check_in


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Drive the limiter's clock by hand."""
    now = [1000.0]
    monkeypatch.setattr(logins_module.time, "monotonic", lambda: now[0])
    return now


def test_too_many_wrong_answers_block_the_address(
    clock: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    """Ten wrong in the window block that address alone, for the block time."""
    limiter = FailedLogins(max_failures=3, window=60, block=120)
    for _ in range(2):
        limiter.failed("10.0.0.9", "MQTT login")
    assert not limiter.blocked("10.0.0.9")
    limiter.failed("10.0.0.9", "MQTT login")
    assert limiter.blocked("10.0.0.9")
    assert not limiter.blocked("10.0.0.8")
    assert limiter.as_dict() == {"failures": {}, "blocked": ["10.0.0.0/24"]}
    assert caplog.text.count("Refusing 10.0.0.9") == 1
    clock[0] += 121
    assert not limiter.blocked("10.0.0.9")
    assert not limiter.blocked(None)


def test_diagnostics_name_networks_only(clock: list[float]) -> None:
    """Addresses of one network count together; what is no address is hidden."""
    limiter = FailedLogins(max_failures=3, window=60, block=120)
    limiter.failed("10.0.0.9", "MQTT login")
    limiter.failed("10.0.0.10", "MQTT login")
    limiter.failed("fe80::1%eth0", "WebSocket")
    limiter.failed("a-proxy", "WebSocket")
    assert limiter.as_dict() == {
        "failures": {"10.0.0.0/24": 2, "fe80::/64": 1, "**REDACTED**": 1},
        "blocked": [],
    }


def test_old_failures_leave_the_window(clock: list[float]) -> None:
    """Wrong answers spread wider than the window never block."""
    limiter = FailedLogins(max_failures=3, window=60, block=120)
    for _ in range(10):
        limiter.failed("10.0.0.9", "WebSocket")
        clock[0] += 31
    assert not limiter.blocked("10.0.0.9")
    assert limiter.failures("10.0.0.9") == 2
    limiter.failed(None, "WebSocket")  # no address: nothing to count


def test_a_right_answer_clears_the_count_and_pairing_forgives(
    clock: list[float],
) -> None:
    """A right login clears the count; pairing lifts a block at once."""
    limiter = FailedLogins(max_failures=3, window=60, block=120)
    limiter.failed("10.0.0.9", "MQTT login")
    limiter.failed("10.0.0.9", "MQTT login")
    limiter.succeeded("10.0.0.9")
    limiter.failed("10.0.0.9", "MQTT login")
    assert not limiter.blocked("10.0.0.9")
    for _ in range(3):
        limiter.failed("10.0.0.9", "MQTT login")
    assert limiter.blocked("10.0.0.9")
    limiter.succeeded("10.0.0.9")  # a block is not lifted by a login
    assert limiter.blocked("10.0.0.9")
    limiter.forgive("10.0.0.9")
    assert not limiter.blocked("10.0.0.9")
    limiter.succeeded(None)
    limiter.forgive(None)


def test_memory_is_bounded(clock: list[float], monkeypatch: pytest.MonkeyPatch) -> None:
    """However many addresses guess, a bounded number is remembered."""
    monkeypatch.setattr(logins_module, "MAX_ADDRESSES", 4)
    limiter = FailedLogins(max_failures=1, window=60, block=120)
    for host in range(10):
        limiter.failed(f"10.0.1.{host}", "sound URL")
    state = limiter.as_dict()
    assert len(state["blocked"]) <= 4
    assert limiter.blocked("10.0.1.9")  # the newest is kept
    clock[0] += 121
    limiter.failed("10.0.2.1", "sound URL")  # expired blocks make room
    assert limiter.as_dict()["blocked"] == ["10.0.2.0/24"]


async def test_pairing_forgives_the_devices_address(
    hass: HomeAssistant, client: TestClient[Any, Any]
) -> None:
    """A device whose old token shut its address out pairs and gets in at once."""
    logins = hass.data[DATA_KEY].logins
    for _ in range(MAX_FAILURES):
        logins.failed("127.0.0.1", "WebSocket")
    assert logins.blocked("127.0.0.1")
    code = (await check_in(client))["activation"]["code"]
    result = await hass.config_entries.flow.async_init(
        DOMAIN, context={"source": SOURCE_USER}
    )
    result = await hass.config_entries.flow.async_configure(
        result["flow_id"], {"code": code}
    )
    assert result["type"] is FlowResultType.CREATE_ENTRY
    assert not logins.blocked("127.0.0.1")
