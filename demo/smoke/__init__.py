"""A smoke run: a real Home Assistant release, the integration, simulated devices.

``scripts/smoke [--ha VERSION]`` runs ``python -m demo.smoke`` with the
project's venv (where the simulator and this package run), which

1. builds, or takes from ``.smoke/venvs``, a private venv holding
   ``homeassistant==VERSION`` (the newest release by default) and what it
   loads (``venv``, ``ha_requirements``),
2. writes a configuration directory under ``.smoke/runs`` with the
   integration and the demo's speech engines linked in (``config``) and
   serves a firmware release list and zip on 127.0.0.1 (``releases``),
3. starts that Home Assistant with ``--skip-pip``, onboards an owner and
   sets the XiaoZhi server up through the config flow API, then pairs a
   simulated device over WebSocket and one over MQTT + UDP (the server's
   transport setting), has one spoken exchange with each, interrupts the
   demo engines' slow agent with each device's button (barge-in: ``tts
   stop`` at once, then the next question answered) and checks one
   firmware update (``run``),
4. stops everything and fails on any step that failed and on any ``ERROR``
   or traceback in Home Assistant's log (``log``).
"""


class SmokeError(Exception):
    """A step failed; the message says what."""
