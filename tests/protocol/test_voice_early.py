"""Audio that arrives before its turn, firmware that plays sounds, Ogg Opus."""

import io

import av

from custom_components.xiaozhi.protocol.audio.codec import decode_file
from custom_components.xiaozhi.protocol.audio.ogg import encode_ogg_opus
from custom_components.xiaozhi.protocol.audio.preroll import (
    EARLY_WINDOW,
    MAX_HELD,
    MAX_PREROLL,
    PREROLL_PACKETS,
    EarlyAudio,
    HeldAudio,
)
from custom_components.xiaozhi.protocol.mqtt.udp import opus_duration_ms
from simulator.voice import dominant_frequency, tone


def test_the_pre_roll_comes_before_detect() -> None:
    """Over WebSocket: pre-roll, detect, listen start, live audio, in order."""
    early = EarlyAudio()
    for index in range(PREROLL_PACKETS):  # however far apart they came
        early.add(1.0 + index * 0.02, b"pre%d" % index)
    early.mark_detect(1.2)
    early.mark_start(1.2)
    early.add(1.26, b"live1")
    held = early.split()
    assert held.preroll == [b"pre%d" % index for index in range(PREROLL_PACKETS)]
    assert held.live == [b"live1"]
    assert early.split() == held  # split does not forget; clear does
    early.clear()
    assert early.split() == HeldAudio([], [])
    assert not early.started


def test_live_packets_that_overtook_listen_start() -> None:
    """Without a wake word (button): the live run at the end is the turn's."""
    early = EarlyAudio()
    for index in range(5):  # something older, as a burst
        early.add(1.0 + index * 0.0001, b"old%d" % index)
    early.add(1.015, b"live1")  # then one packet per frame
    early.add(1.030, b"live2")
    early.mark_start(1.04)
    early.add(1.09, b"live3")
    held = early.split()
    assert held.preroll == []
    assert held.live == [b"live1", b"live2", b"live3"]


def test_a_pre_roll_overtaken_by_detect() -> None:
    """Over MQTT + UDP the burst can come after detect: still pre-roll."""
    early = EarlyAudio()
    early.mark_detect(1.0)
    early.mark_detect(1.0)  # said twice: the first counts
    early.mark_start(1.0)
    assert early.started
    for index in range(30):
        early.add(1.001 + index * 0.0001, b"pre")
    early.add(1.06, b"live1")
    early.add(1.12, b"live2")
    held = early.split()
    assert held.preroll == [b"pre"] * 30
    assert held.live == [b"live1", b"live2"]


def test_a_pre_roll_split_around_detect() -> None:
    """Part of the burst before detect, its end after it: one pre-roll."""
    early = EarlyAudio()
    for index in range(20):
        early.add(1.0 + index * 0.0001, b"pre")
    early.mark_detect(1.01)
    early.mark_start(1.01)
    for index in range(14):
        early.add(1.02 + index * 0.0001, b"end")
    early.add(1.08, b"live1")  # a frame later
    held = early.split()
    assert held.preroll == [b"pre"] * 20 + [b"end"] * 14
    assert held.live == [b"live1"]


def test_a_pre_roll_takes_no_more_than_two_seconds() -> None:
    """Live packets bunched behind a late pre-roll stay live."""
    early = EarlyAudio()
    early.mark_detect(1.0)
    early.mark_start(1.0)
    for index in range(MAX_PREROLL + 3):
        early.add(1.001 + index * 0.0001, b"%d" % index)
    held = early.split()
    assert len(held.preroll) == MAX_PREROLL
    assert held.live == [b"%d" % index for index in range(MAX_PREROLL, MAX_PREROLL + 3)]


def test_the_first_live_frame_soon_after_detect_stays_live() -> None:
    early = EarlyAudio()
    for index in range(34):
        early.add(1.0 + index * 0.0001, b"pre")
    early.mark_detect(1.01)
    early.mark_start(1.01)
    early.add(1.02, b"live1")
    early.add(1.035, b"live2")
    held = early.split()
    assert held.preroll == [b"pre"] * 34
    assert held.live == [b"live1", b"live2"]


def test_a_few_packets_are_no_pre_roll() -> None:
    """A detect without its pre-roll (no cache) is not ranked as having one."""
    early = EarlyAudio()
    early.add(1.0, b"a")
    early.mark_detect(1.05)
    early.mark_start(1.05)
    early.add(1.1, b"live")
    assert early.split() == HeldAudio([], [b"live"])


def test_old_packets_are_not_part_of_a_new_turn() -> None:
    early = EarlyAudio()
    early.add(1.0, b"a")
    early.add(1.06, b"b")
    early.add(1.12, b"c")
    early.mark_start(1.12 + EARLY_WINDOW + 0.01)
    assert early.split().live == []
    early.clear()
    early.add(1.0, b"a")
    early.add(1.06, b"b")
    early.clear()
    early.mark_start(1.07)
    assert early.split() == HeldAudio([], [])


def test_what_is_held_is_bounded() -> None:
    early = EarlyAudio()
    early.mark_start(0.0)
    for index in range(MAX_HELD + 50):
        early.add(index * 0.06, b"%d" % index)
    live = early.split().live
    assert len(live) == MAX_HELD
    assert live[-1] == b"%d" % (MAX_HELD + 49)


def test_nothing_to_split_before_listen_start() -> None:
    early = EarlyAudio()
    early.add(1.0, b"a")
    assert early.split() == HeldAudio([], [])


def test_ogg_opus_for_the_notify_player() -> None:
    """Mono Ogg Opus, 60 ms packets, as long as the PCM, in tune."""
    pcm = tone(660, 1.5, 24000)
    data = encode_ogg_opus(pcm, 24000)
    assert data.startswith(b"OggS")
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        assert stream.codec_context.name == "opus"
        assert stream.codec_context.channels == 1
        sizes = {
            opus_duration_ms(bytes(packet)) for packet in container.demux(stream)
        } - {None}
    assert sizes == {60.0}
    decoded = b"".join(decode_file(data, 24000))
    assert abs(len(decoded) / 2 / 24000 - 1.5) <= 0.06
    assert abs(dominant_frequency(decoded, 24000) - 660) <= 5
    assert encode_ogg_opus(b"", 24000) == b""  # nothing to play, no file
