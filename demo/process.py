"""Home Assistant as a child process of the demo."""

import asyncio
import contextlib
import ctypes
from pathlib import Path
import signal
import subprocess
import sys

import aiohttp

from . import RESTART_EXIT_CODE, STOP_TIMEOUT, DemoError, say
from .files import tail


def _die_with_parent() -> None:
    """Have the kernel stop Home Assistant if the demo itself dies."""
    with contextlib.suppress(OSError, AttributeError):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


class HomeAssistantProcess:
    """Home Assistant as a child process, restarted when it asks to be."""

    def __init__(self, config: Path, log: Path, python: str = sys.executable) -> None:
        """Run ``python -m homeassistant`` on ``config``; its output goes to ``log``.

        Nothing runs before start().
        """
        self._config = config
        self._log = log
        self._python = python
        self._proc: asyncio.subprocess.Process | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._stopping = False
        self.exited = asyncio.Event()
        self.exit_code: int | None = None
        self.started = False

    def _command(self) -> list[str]:
        return [
            self._python,
            "-m",
            "homeassistant",
            "--config",
            str(self._config),
            "--skip-pip",
            "--log-no-color",
        ]

    async def _spawn(self) -> None:
        with self._log.open("ab") as log:
            self._proc = await asyncio.create_subprocess_exec(
                *self._command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Not the repository: its custom_components package would hide
                # the configuration's, which also holds the demo engines.
                cwd=self._config,
                # Ctrl-C reaches only the demo, which stops the devices first.
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    async def start(self) -> None:
        """Start Home Assistant; its output goes to the log file."""
        log = self._log
        if log.exists():
            log.replace(log.with_name(log.name + ".1"))
        await self._spawn()
        self.started = True
        self._watcher = asyncio.create_task(self._watch(), name="home assistant")

    async def _watch(self) -> None:
        while self._proc is not None:
            code = await self._proc.wait()
            if self._stopping:
                return
            if code == RESTART_EXIT_CODE:
                say("Home Assistant asked for a restart; starting it again.")
                try:
                    await self._spawn()
                except OSError as err:
                    say(f"Could not start Home Assistant again: {err}")
                    code = 1
                else:
                    continue
            self.exit_code = code
            self.exited.set()
            return

    @property
    def returncode(self) -> int | None:
        """Return the exit code of the last process, once it has exited."""
        return self._proc.returncode if self._proc is not None else None

    @property
    def running(self) -> bool:
        """Return True while the process runs."""
        return self._proc is not None and self._proc.returncode is None

    def kill(self) -> None:
        """Kill the process at once."""
        if self.running and self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()

    async def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Stop gracefully (SIGTERM); kill it if it takes longer than timeout."""
        self._stopping = True
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            async with asyncio.timeout(timeout):
                await proc.wait()
        except TimeoutError:
            say(f"Home Assistant did not stop within {timeout:.0f} s; killing it.")
            self.kill()
            await proc.wait()

    async def async_wait_http(self, session: aiohttp.ClientSession, base: str) -> None:
        """Wait until the web server at ``base`` answers; DemoError if it exits.

        Asks for the frontend's manifest, which needs no login: asking the
        API without a token would show up as a failed login attempt in Home
        Assistant's notifications.
        """
        url = base + "/manifest.json"
        while True:
            self.check()
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.get(
                    url, timeout=aiohttp.ClientTimeout(total=5)
                ) as response:
                    if response.status == 200:
                        return
            await asyncio.sleep(0.5)

    def check(self) -> None:
        """Raise DemoError if Home Assistant has stopped by itself."""
        if self.exited.is_set():
            raise DemoError(
                f"Home Assistant stopped (exit code {self.exit_code}). "
                f"The end of {self._log}:\n{tail(self._log)}"
            )
