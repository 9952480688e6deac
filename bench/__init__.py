"""Benchmarks of the xiaozhi integration in a real Home Assistant.

How to reproduce::

    scripts/bench              # full run: about five minutes on 2 CPUs
    scripts/bench --smoke      # tiny sizes, to check that everything works
    scripts/bench --only toolcall,handshake --profile   # with cProfile output
    scripts/bench --only scale --sizes 500 --devices inline
    scripts/bench --help

``scripts/bench`` prepares ``.venv`` (``scripts/setup``) and runs
``python -m bench``. It prints a table and writes every figure to
``bench/results.json``; ``tests/test_bench_smoke.py`` runs ``--smoke`` so the
benchmarks keep working (it checks that figures come out, never their values).

What runs: a real Home Assistant in the benchmark's process (the test
machinery of pytest-homeassistant-custom-component builds it, with empty
registries and a throw-away configuration directory) serving its own HTTP
server on a free loopback port, with the integration loaded from
``custom_components``. Devices are :class:`bench.device.FastDevice` clients:
they speak the firmware's WebSocket protocol and answer every request at once
with canned replies taken from the simulator (the firmware's built-in tools
and status document), so what is measured is Home Assistant's side.

Every figure comes with a baseline measured in the same run on the same
machine, and the variants of a measurement are interleaved in rounds, so
other load on the machine shifts both alike:

* tool call (:mod:`bench.toolcall`): ``async_call_tool`` against a raw
  aiohttp WebSocket round trip; the ``xiaozhi.call_tool`` action against a
  no-op action of the same shape plus the raw round trip;
* handshake (:mod:`bench.handshake`): device connect to all of its entities
  registered with states, minus the device's reply round trips;
* scale (:mod:`bench.scale`): 10, 100 and 500 devices with keep-alive: event
  loop lag against the idle loop, memory per device, connect rate against a
  bare aiohttp server, a burst of concurrent tool calls, and lost replies;
* voice (:mod:`bench.voice`): CPU of the audio path per second of audio, the
  delay the integration adds to a conversation (speech-to-text's text to
  ``tts start``, the reply's first bytes to its first frame), and 20
  conversations at once against simulated devices that play in real time
  (event-loop lag, frames the devices dropped). Its engines and agent are
  the test suite's fakes, so only the integration's share is measured;
* wake word arbitration (:mod:`bench.arbitration`): what picking one box of
  an area adds to the winner's start (listen start to speech-to-text's first
  audio) against the same box alone in its area, with and without
  ``listen detect``; then 20 areas of three boxes waking at once over MQTT +
  UDP: event-loop lag, whether the nearest box answered, the others back to
  idle within a second, and every frame a winner said reaching
  speech-to-text.

Absolute times depend on the machine; the ratios are what to compare.
"""
