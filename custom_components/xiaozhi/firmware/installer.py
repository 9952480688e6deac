"""One device's firmware install: one at a time, one owner, one outcome.

An install starts by preparing the image (download and checks) and then
either has the connected device fetch it at once (``self.upgrade_firmware``)
or, with the device away, waits to offer it in the OTA answer of its next
boot. Every install ends in exactly one :class:`Outcome`, and the update
entity and the ``install_firmware`` action both go through here, so a second
install while one runs is refused and both see its progress.

What the firmware does decides the rules (``main/ota.cc``,
``main/application.cc``): a flash that worked restarts the device within
seconds of the last byte (``esp_ota_set_boot_partition``, ``esp_restart``)
and the device checks in at boot with the new version; a flash that failed
shows "upgrade failed" and carries on, and over MQTT its link never drops.
So once the device has fetched the whole image:

- a check-in (its OTA check, a new link) on another version fails the
  install at once;
- over MQTT, a link that has not dropped a minute after the last byte means
  it did not restart: failed;
- on any transport, no check-in on the new version within 90 s: failed.
"""

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from homeassistant.core import CALLBACK_TYPE, HomeAssistant, callback
from homeassistant.helpers.event import async_call_later

from ..const import LOGGER
from ..errors import translated_error
from ..protocol.firmware import UPGRADE_TOOL
from ..protocol.ota import firmware_block
from ..protocol.ota_image import AppImage, is_plain_version, version_key

# After the tool call the device closes its audio and starts the download at
# once; nothing fetched by then, it did not take the URL.
FETCH_START_TIMEOUT: Final = 60.0
# A download that stops moving for this long is over (the firmware's own
# HTTP client gives up sooner).
FETCH_STALL_TIMEOUT: Final = 60.0
# Over MQTT the link drops when the device restarts into the new image.
RESTART_TIMEOUT: Final = 60.0
# Writing the last block, restarting and the boot-time OTA check.
CHECK_IN_TIMEOUT: Final = 90.0
# How long an offer in the OTA answer stays valid for the device to fetch.
OFFER_LIFETIME: Final = 600.0
# How long an install waits for a device that is away to boot.
WAIT_LIFETIME: Final = 24 * 3600.0


class Outcome(StrEnum):
    """How an install ended."""

    INSTALLED = "installed"
    FAILED = "failed"
    EXPIRED = "expired"


class Reason(StrEnum):
    """Why an install did not end installed (its translation key)."""

    REFUSED = "firmware_not_confirmed"
    NOT_FETCHED = "firmware_not_fetched"
    STALLED = "firmware_fetch_stalled"
    BROKE = "firmware_fetch_broke"
    AWAY = "firmware_device_away"
    STOPPED = "firmware_install_stopped"


_LOGGED: Final = {
    Reason.REFUSED: "it refused the image or did not finish writing it",
    Reason.NOT_FETCHED: "it did not fetch the image",
    Reason.STALLED: "its download stalled",
    Reason.BROKE: "its download broke off",
    Reason.AWAY: "it did not start in time to be offered the image",
    Reason.STOPPED: "Home Assistant stopped waiting for it",
}


class Phase(StrEnum):
    """Where a running install is."""

    PREPARING = "preparing"  # downloading and checking the release
    WAITING = "waiting"  # for the device's next boot (it is away)
    OFFERED = "offered"  # in its OTA answer, not fetched yet
    SENT = "sent"  # told to fetch, not fetched yet
    FETCHING = "fetching"
    FETCHED = "fetched"  # whole: the device flashes and restarts


type Mint = Callable[
    [bytes, Callable[[int], None], Callable[[], None]], tuple[str, CALLBACK_TYPE]
]
type CallTool = Callable[[str, Mapping[str, Any]], Awaitable[object]]


@dataclass(frozen=True, slots=True)
class Result:
    """How the last install ended."""

    version: str
    outcome: Outcome
    reason: Reason | None


@dataclass(slots=True, eq=False)
class _Install:
    version: str
    phase: Phase
    done: asyncio.Future[None]
    image: bytes = b""
    fetched: int = 0
    # The link was up when the device had it all (MQTT: it stays up on a
    # failed flash).
    always_on: bool = False
    link_dropped: bool = False
    revoke: CALLBACK_TYPE | None = None
    timer: CALLBACK_TYPE | None = None


class FirmwareInstaller:
    """The firmware install of one device."""

    def __init__(
        self,
        hass: HomeAssistant,
        name: str,
        *,
        firmware: Callable[[], str | None],
        link: Callable[[], bool | None],
    ) -> None:
        """Install on the device ``name``.

        ``firmware`` returns the version it reports, ``link`` whether it is
        connected on an always-on link (True), an on-demand one (False) or
        not at all (None).
        """
        self._hass = hass
        self._name = name
        self._firmware = firmware
        self._link = link
        self._install: _Install | None = None
        self.result: Result | None = None
        self._listeners: list[CALLBACK_TYPE] = []

    # --- what the entity and diagnostics read -----------------------------

    @property
    def in_progress(self) -> bool:
        """Return True while an install runs (or waits for the device)."""
        return self._install is not None

    @property
    def version(self) -> str | None:
        """Return the version being installed."""
        return self._install.version if self._install else None

    @property
    def phase(self) -> Phase | None:
        """Return where the running install is."""
        return self._install.phase if self._install else None

    @property
    def percent(self) -> int | None:
        """Return the share of the image the device has fetched."""
        install = self._install
        if (
            install is None
            or not install.image
            or install.phase
            in (
                Phase.PREPARING,
                Phase.WAITING,
            )
        ):
            return None
        return int(100 * install.fetched / len(install.image))

    @callback
    def async_subscribe(self, listener: CALLBACK_TYPE) -> CALLBACK_TYPE:
        """Call ``listener`` when the install moves on, until the callback is called."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    @callback
    def _changed(self) -> None:
        for listener in list(self._listeners):
            listener()

    # --- installing -------------------------------------------------------

    async def async_install(
        self,
        prepare: Callable[[], Awaitable[AppImage]],
        *,
        mint: Mint | None,
        call_tool: CallTool,
    ) -> None:
        """Install the image ``prepare`` returns; return once it runs, or waits.

        ``mint`` serves the image to the connected device (None when it is
        away: a newer version then waits for its next boot). Raises
        HomeAssistantError when another install runs, when the image is
        refused, or when the device does not come back on the new version.
        """
        if self._install is not None:
            raise translated_error(
                "firmware_install_running", self._name, version=self._install.version
            )
        loop = self._hass.loop
        install = self._install = _Install("", Phase.PREPARING, loop.create_future())
        self._changed()
        try:
            image = await prepare()
        except BaseException:
            self._forget(install)
            raise
        if install is not self._install:  # let go meanwhile (unloaded)
            raise translated_error("firmware_not_connected", self._name)
        install.version, install.image = image.version, image.data
        if mint is None or self._link() is None:
            self._wait_for_boot(install)
            return
        url = self._serve(install, mint, Phase.SENT, FETCH_START_TIMEOUT)
        try:
            await call_tool(UPGRADE_TOOL, {"url": url})
        except BaseException:
            self._forget(install)
            raise
        await asyncio.shield(install.done)

    def _wait_for_boot(self, install: _Install) -> None:
        """Keep the install for the OTA answer of the device's next boot.

        The firmware installs only a newer version there, and compares
        versions by their numbers alone: going back needs the device
        connected.
        """
        installed = version_key(self._firmware() or "")
        wanted = version_key(install.version)
        if installed is None or wanted is None or wanted <= installed:
            self._forget(install)
            raise translated_error("firmware_not_connected", self._name)
        install.phase = Phase.WAITING
        self._arm(install, WAIT_LIFETIME, Outcome.EXPIRED, Reason.AWAY)
        LOGGER.info(
            "%s is away: firmware %s is offered at its next start",
            self._name,
            install.version,
        )
        self._changed()

    @callback
    def offer(self, mint: Mint) -> dict[str, str] | None:
        """Return the OTA answer's ``firmware`` block for a waiting install.

        Offered once, on a URL valid for minutes, and never with ``force``
        (which re-flashes at every boot).
        """
        install = self._install
        if (
            install is None
            or install.phase is not Phase.WAITING
            or not is_plain_version(install.version)
        ):
            return None
        url = self._serve(install, mint, Phase.OFFERED, OFFER_LIFETIME)
        return firmware_block(install.version, url)

    def _serve(
        self, install: _Install, mint: Mint, phase: Phase, fetch_within: float
    ) -> str:
        """Mint the image's one-time URL; the device must fetch it in time."""
        url, install.revoke = mint(
            install.image,
            lambda count: self._fetched(install, count),
            lambda: self._broke(install),
        )
        install.phase = phase
        self._arm(
            install,
            fetch_within,
            Outcome.EXPIRED if phase is Phase.OFFERED else Outcome.FAILED,
            Reason.NOT_FETCHED,
        )
        self._changed()
        return url

    # --- what the device does ---------------------------------------------

    @callback
    def _fetched(self, install: _Install, count: int) -> None:
        if install is not self._install:
            return
        before = self.percent
        install.fetched = count
        if count < len(install.image):
            install.phase = Phase.FETCHING
            self._arm(install, FETCH_STALL_TIMEOUT, Outcome.FAILED, Reason.STALLED)
        else:
            install.phase = Phase.FETCHED
            install.always_on = self._link() is True
            install.link_dropped = False
            self._arm(
                install,
                RESTART_TIMEOUT if install.always_on else CHECK_IN_TIMEOUT,
                Outcome.FAILED,
                Reason.REFUSED,
            )
        if self.percent != before or install.phase is Phase.FETCHED:
            self._changed()

    @callback
    def _broke(self, install: _Install) -> None:
        """End the install: the download stopped before its last byte."""
        if install is self._install:
            self._end(install, Outcome.FAILED, Reason.BROKE)

    @callback
    def link_lost(self) -> None:
        """Learn that the device's link dropped (it restarts, or went away)."""
        install = self._install
        if install is not None and install.phase is Phase.FETCHED:
            if install.always_on and not install.link_dropped:
                # It restarts: now its boot-time check must come.
                self._arm(install, CHECK_IN_TIMEOUT, Outcome.FAILED, Reason.REFUSED)
            install.link_dropped = True

    @callback
    def checked_in(self, version: str | None) -> None:
        """Learn that the device checked in (OTA check, a new link) on ``version``.

        Once it has fetched the image, the new version ends the install; any
        other means the image did not boot, or was never written.
        """
        install = self._install
        if install is None or install.phase not in (Phase.FETCHING, Phase.FETCHED):
            return
        if version == install.version:
            self._end(install, Outcome.INSTALLED, None)
        elif version:
            self._end(install, Outcome.FAILED, Reason.REFUSED)

    # --- the end ------------------------------------------------------------

    def _arm(
        self, install: _Install, delay: float, outcome: Outcome, reason: Reason
    ) -> None:
        if install.timer is not None:
            install.timer()

        @callback
        def expire(_now: datetime) -> None:
            self._end(install, outcome, reason)

        install.timer = async_call_later(self._hass, delay, expire)

    @callback
    def _end(self, install: _Install, outcome: Outcome, reason: Reason | None) -> None:
        """End ``install`` with ``outcome``; whoever waits learns it."""
        if install is not self._install:
            return
        self.result = Result(install.version, outcome, reason)
        if reason is None:
            LOGGER.info("%s runs firmware %s now", self._name, install.version)
            install.done.set_result(None)
        else:
            installed = self._firmware() or "unknown"
            LOGGER.warning(
                "%s did not install firmware %s: %s; it runs %s",
                self._name,
                install.version,
                _LOGGED[reason],
                installed,
            )
            install.done.set_exception(
                translated_error(
                    reason,
                    self._name,
                    version=install.version,
                    installed=installed,
                    percent=str(self.percent or 0),
                )
            )
        self._forget(install)

    @callback
    def _forget(self, install: _Install) -> None:
        if install.timer is not None:
            install.timer()
        if install.revoke is not None:
            install.revoke()
        if not install.done.done():
            install.done.cancel()
        else:
            # Nobody may be waiting (an offer): the outcome is logged.
            install.done.exception()
        if install is self._install:
            self._install = None
            self._changed()

    @callback
    def shutdown(self) -> None:
        """Let a running install go: the device's entry unloads."""
        if (install := self._install) is not None:
            self._end(install, Outcome.EXPIRED, Reason.STOPPED)
