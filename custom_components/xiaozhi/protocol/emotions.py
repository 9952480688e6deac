"""The face a device shows for a reply (its ``llm`` emotion)."""

from typing import Final

# Emoji an agent puts in its reply, and the face they stand for.
_EMOJI_EMOTIONS: Final = {
    "😶": "neutral",
    "😊": "happy",
    "🙂": "happy",
    "😀": "happy",
    "😃": "happy",
    "😄": "laughing",
    "😆": "laughing",
    "😂": "laughing",
    "🤣": "laughing",
    "😜": "funny",
    "🤪": "silly",
    "😢": "sad",
    "😞": "sad",
    "😭": "crying",
    "😠": "angry",
    "😡": "angry",
    "😍": "loving",
    "🥰": "loving",
    "❤": "loving",
    "😳": "embarrassed",
    "😲": "surprised",
    "😮": "surprised",
    "😱": "shocked",
    "🤔": "thinking",
    "😉": "winking",
    "😎": "cool",
    "😌": "relaxed",
    "😋": "delicious",
    "😘": "kissy",
    "😏": "confident",
    "😴": "sleepy",
    "😕": "confused",
}


def emotion_for(text: str, *, failed: bool = False, acted: bool = False) -> str:
    """Return the face for a reply.

    An emoji in the reply says it best; otherwise a failed request is
    ``confused``, an action done ``happy``, anything else ``neutral``.
    """
    for char in text:
        if (emotion := _EMOJI_EMOTIONS.get(char)) is not None:
            return emotion
    if failed:
        return "confused"
    return "happy" if acted else "neutral"


# The emoji of each face, for clients that show the ``llm`` frame's text.
_EMOTION_EMOJI: Final = {
    emotion: emoji for emoji, emotion in reversed(_EMOJI_EMOTIONS.items())
}


def emoji_for(emotion: str) -> str:
    """Return an emoji for a face (the neutral one for a face without)."""
    return _EMOTION_EMOJI.get(emotion, "😶")
