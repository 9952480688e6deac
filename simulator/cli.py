"""Command line: run one or more simulated devices until Ctrl-C."""

import argparse
import asyncio
from collections.abc import Sequence
import contextlib
import logging
import signal
import uuid

from .config import DEFAULT_MAC, DeviceConfig, load_tools_file
from .device import SimulatedDevice

_LOGGER = logging.getLogger(__package__)
_CLIENT_ID_NAMESPACE = uuid.UUID("5b1f3a7e-6c55-4d0e-9a3c-2f7f4c1d8e90")


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of ``python -m simulator``."""
    parser = argparse.ArgumentParser(
        prog="python -m simulator",
        description=(
            "Run simulated xiaozhi-esp32 devices against a server: OTA check and "
            "activation, WebSocket hello, MCP tools."
        ),
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--ota-url", help="OTA URL to provision from (POSTed at boot)")
    target.add_argument("--url", help="WebSocket URL to dial directly")
    parser.add_argument("--token", help="WebSocket token (with --url)")
    parser.add_argument("--mac", default=DEFAULT_MAC, help="MAC of the first device")
    parser.add_argument("--board", default="xiaozhi-sim", help="board name")
    parser.add_argument("--firmware", default="2.0.4", help="firmware version")
    parser.add_argument("--tools", metavar="FILE", help="JSON list of extra tools")
    parser.add_argument(
        "--count", type=int, default=1, help="number of devices (MACs increment)"
    )
    parser.add_argument("--camera", action="store_true", help="add a camera")
    parser.add_argument("--no-screen", action="store_true", help="no screen tools")
    parser.add_argument("--battery", action="store_true", help="report a battery")
    parser.add_argument("--protocol-version", type=int, choices=(1, 2, 3), default=1)
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=120.0,
        help="close the link after this many seconds without incoming frames",
    )
    parser.add_argument(
        "--reconnect-delay",
        type=float,
        default=5.0,
        help="reconnect this many seconds after the server closes the link",
    )
    parser.add_argument(
        "--no-reconnect", action="store_true", help="stay offline once closed"
    )
    parser.add_argument(
        "--other-implementation",
        action="store_true",
        help="JSON-RPC errors with codes, tool failures as isError results",
    )
    parser.add_argument(
        "--notifications",
        action="store_true",
        help="send notifications/state_changed when the activity changes",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log every frame (DEBUG)"
    )
    return parser


def increment_mac(mac: str, offset: int) -> str:
    """Return ``mac`` plus ``offset``, as a lowercase colon-separated MAC."""
    parts = mac.lower().split(":")
    if len(parts) != 6 or not all(len(part) == 2 for part in parts):
        raise ValueError(f"Invalid MAC address: {mac}")
    try:
        value = int("".join(parts), 16)
    except ValueError:
        raise ValueError(f"Invalid MAC address: {mac}") from None
    value = (value + offset) % (1 << 48)
    text = f"{value:012x}"
    return ":".join(text[index : index + 2] for index in range(0, 12, 2))


def client_id_for(mac: str) -> str:
    """Return a stable client id (UUID) for a MAC, so restarts keep identity."""
    return str(uuid.uuid5(_CLIENT_ID_NAMESPACE, mac))


def configs_from_args(args: argparse.Namespace) -> list[DeviceConfig]:
    """Build one configuration per device from parsed arguments."""
    if args.count < 1:
        raise ValueError("--count must be at least 1")
    extra_tools = load_tools_file(args.tools) if args.tools else []
    configs = []
    for index in range(args.count):
        mac = increment_mac(args.mac, index)
        configs.append(
            DeviceConfig(
                mac=mac,
                client_id=client_id_for(mac),
                board=args.board,
                firmware=args.firmware,
                ota_url=args.ota_url,
                ws_url=args.url,
                token=args.token,
                protocol_version=args.protocol_version,
                camera=args.camera,
                screen=not args.no_screen,
                battery=args.battery,
                extra_tools=extra_tools,
                idle_timeout=args.idle_timeout,
                reconnect_delay=None if args.no_reconnect else args.reconnect_delay,
                other_implementation=args.other_implementation,
                notifications=args.notifications,
            )
        )
    return configs


async def run_devices(
    configs: Sequence[DeviceConfig],
    *,
    stop: asyncio.Event | None = None,
    install_signal_handlers: bool = True,
) -> None:
    """Run devices until ``stop`` is set (or SIGINT / SIGTERM), then stop them."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    signals: list[signal.Signals] = []
    if install_signal_handlers:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
            signals.append(sig)
    devices = [SimulatedDevice(config) for config in configs]
    try:
        for device in devices:
            device.start()
        await stop.wait()
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
        _LOGGER.info("stopping %d device(s)", len(devices))
        await asyncio.gather(*(device.stop() for device in devices))


def _run(configs: Sequence[DeviceConfig]) -> None:
    """Run the devices on a fresh event loop until interrupted."""
    asyncio.run(run_devices(configs))


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments and run the devices; return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        configs = configs_from_args(args)
    except (TypeError, ValueError, OSError) as err:
        parser.error(str(err))
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    _LOGGER.setLevel(logging.DEBUG if args.verbose else logging.INFO)
    with contextlib.suppress(KeyboardInterrupt):
        _run(configs)
    return 0
