"""Audio that arrives before its turn, firmware that plays sounds, Ogg Opus."""

import io

import av

from aioxiaozhi.audio.codec import decode_file
from aioxiaozhi.audio.ogg import encode_ogg_opus
from aioxiaozhi.audio.preroll import (
    LIVE_GAP,
    MAX_HELD,
    MAX_PREROLL,
    EarlyAudio,
    Heard,
    HeldAudio,
)
from aioxiaozhi.mqtt.udp import opus_duration_ms
from aioxiaozhi.testing.voice import dominant_frequency, tone


def _udp(early: EarlyAudio, sequence: int, received: float, payload: bytes) -> None:
    early.add(payload, Heard(sequence, received))


def _preroll(
    early: EarlyAudio, count: int = 33, first: int = 1, at: float = 1.0
) -> None:
    """The firmware's pre-roll: ``count`` packets, back to back (kernel time)."""
    for index in range(count):
        _udp(early, first + index, at + index * 0.001, b"pre%d" % index)


def test_the_pre_roll_comes_before_detect() -> None:
    """Over WebSocket: pre-roll, detect, listen start, live audio, in order."""
    early = EarlyAudio()
    for index in range(40):  # however far apart they came: the last 2 s
        early.add(b"pre%d" % index, None)
    early.mark_detect()
    assert early.preroll == [b"pre%d" % index for index in range(6, 40)]
    early.mark_start()
    early.add(b"live1", None)
    held = early.split()
    assert held.preroll == [b"pre%d" % index for index in range(6, 40)]
    assert held.live == [b"live1"]
    assert early.after_start(b"live2", None) == [b"live2"]
    early.clear()
    assert early.split() == HeldAudio([], [])


def test_a_websocket_start_without_detect_drops_what_came_before() -> None:
    """In order, audio before a listen start without a wake word is old."""
    early = EarlyAudio()
    early.add(b"old", None)
    early.mark_start()
    early.add(b"live", None)
    assert early.split() == HeldAudio([], [b"live"])


def test_a_udp_pre_roll_before_detect() -> None:
    """The burst, then live packets a frame apart after the warm-up."""
    early = EarlyAudio()
    _preroll(early)
    early.mark_detect()
    _udp(early, 34, 1.2, b"live1")  # overtook listen start
    early.mark_start()
    _udp(early, 35, 1.26, b"live2")
    held = early.split()
    assert held.preroll == [b"pre%d" % index for index in range(33)]
    assert held.live == [b"live1", b"live2"]
    assert early.after_start(b"live3", Heard(36, 1.32)) == [b"live3"]


def test_a_pre_roll_read_after_listen_start() -> None:
    """A busy server reads detect and start first: the burst is still kept out.

    When the event loop got to a packet does not matter, only the kernel's
    receive time and the sequence.
    """
    early = EarlyAudio()
    early.mark_detect()
    early.mark_start()
    assert early.split() == HeldAudio([], [])
    turn: list[bytes] = []
    for index in range(33):
        turn += early.after_start(
            b"pre%d" % index, Heard(index + 1, 1.0 + index * 0.001)
        )
    assert turn == []
    turn += early.after_start(b"live1", Heard(34, 1.2))
    turn += early.after_start(b"live2", Heard(35, 1.26))
    assert turn == [b"live1", b"live2"]
    assert early.preroll == [b"pre%d" % index for index in range(33)]


def test_a_pre_roll_split_around_listen_start() -> None:
    """Part of the burst before the start, its end (and a reordered packet) after."""
    early = EarlyAudio()
    _preroll(early, count=20)
    early.mark_detect()
    early.mark_start()
    assert early.split() == HeldAudio([b"pre%d" % index for index in range(20)], [])
    turn = early.after_start(b"late", Heard(21, 1.025))
    turn += early.after_start(b"reordered", Heard(5, 1.2))  # sent before the tail
    turn += early.after_start(b"live", Heard(22, 1.2))
    assert turn == [b"live"]
    assert len(early.preroll) == 22


def test_a_pre_roll_takes_no_more_than_two_seconds() -> None:
    """Live packets bunched right behind a pre-roll stay live."""
    early = EarlyAudio()
    _preroll(early, count=MAX_PREROLL + 3)
    early.mark_detect()
    early.mark_start()
    held = early.split()
    assert len(held.preroll) == MAX_PREROLL
    assert held.live == [
        b"pre%d" % index for index in range(MAX_PREROLL, MAX_PREROLL + 3)
    ]


def test_leftovers_from_before_the_pre_roll_are_not_live() -> None:
    """Packets of the last turn that came late were sent before the burst."""
    early = EarlyAudio()
    _udp(early, 1, 0.0, b"old1")
    _udp(early, 2, 0.06, b"old2")
    _preroll(early, first=3, at=3.0)
    early.mark_detect()
    early.mark_start()
    _udp(early, 36, 3.2, b"live")
    held = early.split()
    assert len(held.preroll) == 33
    assert held.live == [b"live"]


def test_a_few_packets_are_no_pre_roll() -> None:
    """A detect without its pre-roll: what came a frame apart is live."""
    early = EarlyAudio()
    _udp(early, 1, 1.0, b"a")
    _udp(early, 2, 1.06, b"b")
    early.mark_detect()
    early.mark_start()
    held = early.split()
    assert held == HeldAudio([], [b"a"])
    assert early.preroll == []
    # b waited to be told apart; the next packet, a frame later, settles it.
    assert early.after_start(b"c", Heard(3, 1.12)) == [b"b", b"c"]
    assert early.after_start(b"d", Heard(4, 1.18)) == [b"d"]


def test_a_start_without_a_wake_word_keeps_the_last_run() -> None:
    """A button: live packets that overtook listen start are the turn's.

    Older ones (long before the run) are left over; a bunch of live packets
    is no pre-roll without a detect.
    """
    early = EarlyAudio()
    _udp(early, 1, 0.0, b"old")
    for index in range(4):  # bunched on the way
        _udp(early, index + 2, 1.0 + index * 0.001, b"live%d" % index)
    _udp(early, 6, 1.0 + LIVE_GAP, b"live4")
    early.mark_start()
    assert early.split() == HeldAudio([], [b"live%d" % index for index in range(5)])
    assert early.after_start(b"live5", Heard(7, 1.6)) == [b"live5"]


def test_what_is_held_is_bounded() -> None:
    early = EarlyAudio()
    early.mark_start()
    for index in range(MAX_HELD + 50):
        early.add(b"%d" % index, None)
    live = early.split().live
    assert len(live) == MAX_HELD
    assert live[-1] == b"%d" % (MAX_HELD + 49)
    early.clear()
    _preroll(early)
    for index in range(MAX_HELD + 50):
        _udp(early, 34 + index, 1.2 + index * 0.06, b"%d" % index)
    early.mark_detect()
    early.mark_start()
    assert len(early.split().live) == MAX_HELD


def test_nothing_to_split_before_listen_start() -> None:
    early = EarlyAudio()
    early.add(b"a", None)
    assert early.split() == HeldAudio([], [])


def test_a_forgotten_detect_leaves_no_pre_roll() -> None:
    """A detect that belonged to no start: what came before it is no pre-roll."""
    early = EarlyAudio()
    early.add(b"old", None)
    early.mark_detect()
    assert early.preroll == [b"old"]
    early.forget_detect()
    assert early.preroll == []
    early.mark_start()
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
