"""The face a device shows for a reply (its ``llm`` emotion)."""

from typing import Final

# Emoji an agent puts in its reply, and the face they stand for.
_EMOJI_EMOTIONS: Final = {
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
