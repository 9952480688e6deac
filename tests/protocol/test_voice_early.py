"""Audio that arrives before its turn, firmware that plays sounds, Ogg Opus."""

import io

import av

from custom_components.xiaozhi.protocol.audio.codec import decode_file
from custom_components.xiaozhi.protocol.audio.ogg import encode_ogg_opus
from custom_components.xiaozhi.protocol.audio.preroll import EARLY_WINDOW, EarlyAudio
from custom_components.xiaozhi.protocol.mqtt.udp import opus_duration_ms
from simulator.voice import dominant_frequency, tone


def test_live_packets_after_the_burst_belong_to_the_turn() -> None:
    early = EarlyAudio()
    for index in range(5):  # the wake word's pre-roll: a burst
        early.add(1.0 + index * 0.0001, b"pre%d" % index)
    early.add(1.015, b"live1")  # then one packet per frame
    early.add(1.030, b"live2")
    assert early.take_live(1.04) == [b"live1", b"live2"]
    assert early.take_live(1.04) == []  # taken once


def test_only_the_burst_came_early() -> None:
    early = EarlyAudio()
    for index in range(40):
        early.add(2.0 + index * 0.0001, b"pre")
    assert early.take_live(2.1) == []


def test_old_packets_are_not_part_of_a_new_turn() -> None:
    early = EarlyAudio()
    early.add(1.0, b"a")
    early.add(1.06, b"b")
    early.add(1.12, b"c")
    assert early.take_live(1.12 + EARLY_WINDOW + 0.01) == []
    early.add(1.0, b"a")
    early.add(1.06, b"b")
    early.clear()
    assert early.take_live(1.07) == []


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
