"""Where a device's conversation is: the states of its one state machine."""

from enum import StrEnum


class Stage(StrEnum):
    """What the device's voice path does now (``conversation.py``).

    IDLE -> DECIDING (its area picks a box, or the false-wake check runs) ->
    LISTENING (the microphone feeds the pipeline) -> ANSWERING (the user
    has spoken; the agent answers) -> SPEAKING (the reply plays) -> IDLE,
    or ASKING when the agent asked back. Home Assistant's own words are
    ANNOUNCING on the open audio, then ASKING when it waits for an answer.
    """

    IDLE = "idle"
    DECIDING = "deciding"
    LISTENING = "listening"
    ANSWERING = "answering"
    SPEAKING = "speaking"
    ANNOUNCING = "announcing"
    ASKING = "asking"
