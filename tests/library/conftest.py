"""Fixtures for protocol tests: a fake socket, a scripted device, no hass."""

from collections.abc import AsyncGenerator

import pytest

from .fakes import Rig


@pytest.fixture(autouse=True)
def auto_enable_custom_integrations() -> None:
    """Override the package-wide fixture: these tests need no Home Assistant."""


@pytest.fixture
async def rig() -> AsyncGenerator[Rig]:
    """Return a rig whose sessions all end when the test does."""
    rig = Rig()
    yield rig
    await rig.close_all()
