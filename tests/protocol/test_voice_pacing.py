"""Audio that arrives before its turn: the pre-roll burst or live packets."""

from custom_components.xiaozhi.protocol.voice import EARLY_WINDOW, EarlyAudio


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
