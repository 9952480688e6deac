"""Wake words without Home Assistant: pre-roll clarity, the arbiter, pinyin."""

import asyncio
from collections.abc import Callable
import os

from homeassistant.core import HomeAssistant
import pytest

from custom_components.xiaozhi.protocol.audio.wake import (
    decode_preroll,
    phrase_clarity,
    preroll_clarity,
)
from custom_components.xiaozhi.voice.arbiter import WakeArbiter, WakeClaim
from custom_components.xiaozhi.voice.wake_check import resembles
from simulator.voice import MicEncoder, loudness_at, silence, tone, wake_preroll

Reports = list[tuple[str, bool, dict[str, object]]]


def preroll(loudness: float | None) -> list[bytes]:
    """Return a pre-roll's Opus packets, the phrase at ``loudness`` dBFS."""
    if loudness is None:
        return []
    return MicEncoder().frames(wake_preroll(2.0, loudness))


def test_a_nearer_box_hears_the_phrase_more_clearly() -> None:
    """Clarity follows distance: twice as far is about 6 dB less."""
    near = preroll_clarity(preroll(loudness_at(1.0)))
    far = preroll_clarity(preroll(loudness_at(2.0)))
    assert near is not None
    assert far is not None
    assert abs(near - far - 6.0) <= 1.0


def test_clarity_is_relative_to_the_room() -> None:
    """A louder room makes the same phrase less clear; gain cancels out."""
    phrase = tone(440, 0.8, amplitude=0.1)
    quiet_room = silence(1.2) + phrase
    assert phrase_clarity(quiet_room) is not None
    rng_noise = tone(97, 2.0, amplitude=0.01)
    noisy = bytearray(rng_noise)
    for index, sample in enumerate(phrase):
        noisy[len(noisy) - len(phrase) + index] = sample
    clarity = phrase_clarity(bytes(noisy))
    assert clarity is not None
    assert 15 <= clarity <= 25  # 0.1 against 0.01: 20 dB


def test_too_little_audio_tells_nothing() -> None:
    assert phrase_clarity(silence(0.3)) is None
    assert phrase_clarity(silence(1.0)) is None  # no phrase at all
    assert preroll_clarity([]) is None
    assert decode_preroll([]) == b""


@pytest.mark.parametrize(
    ("heard", "wake_word", "alike"),
    [
        ("你好，小志。", "你好小智", True),  # noqa: RUF001 - as speech-to-text writes
        ("你好小字", "你好小智", True),
        ("嗯，你好小智，今天天气怎么样", "你好小智", True),  # noqa: RUF001
        ("今天天气怎么样", "你好小智", False),
        ("", "你好小智", False),
        ("Hi, E.S.P.", "Hi ESP", True),
        ("Hey Jarvis", "Hey Jarvis", True),
        ("turn on the lights", "Hey Jarvis", False),
        ("Xin chao", "Xin chào", True),
        ("anything", "", True),
        ("anything", "Hey " * 20, True),  # not a wake word: not judged
    ],
)
def test_what_sounds_like_the_wake_word(
    heard: str, wake_word: str, alike: bool
) -> None:
    assert resembles(heard, wake_word) is alike


def test_checks_leave_the_environment_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """pypinyin skips its phrases, and a check changes no environment variable.

    The variable is set once, when the module is imported; a check runs in
    an executor thread, where changing the environment would race others.
    """
    monkeypatch.delenv("PYPINYIN_NO_PHRASES")
    assert resembles("你好小志", "你好小智")
    assert "PYPINYIN_NO_PHRASES" not in os.environ
    from pypinyin.constants import PHRASES_DICT  # after the module set the variable

    assert PHRASES_DICT == {}


def claim(
    name: str,
    reports: Reports,
    *,
    deliberate: bool = False,
    loudness: float | None = None,
) -> WakeClaim:
    """Return a claim of the box ``name`` whose pre-roll has ``loudness``."""
    packets = preroll(loudness)
    return WakeClaim(
        device_id=name,
        name=name,
        deliberate=deliberate,
        preroll=lambda: packets,
        report=lambda won, data: reports.append((name, won, data)),
    )


@pytest.fixture
def arbiter(hass: HomeAssistant) -> Callable[..., WakeArbiter]:
    """Return a factory of arbiters for Home Assistant."""

    def make(window: float = 0.05) -> WakeArbiter:
        return WakeArbiter(hass, preroll_clarity, window)

    return make


async def test_the_clearest_wins_when_the_window_ends(
    arbiter: Callable[..., WakeArbiter],
) -> None:
    reports: Reports = []
    judge = arbiter()
    far = judge.claim("hall", claim("far", reports, loudness=-40.0))
    bare = judge.claim("hall", claim("bare", reports))
    near = judge.claim("hall", claim("near", reports, loudness=-15.0))
    assert await near
    assert not await far
    assert not await bare
    assert [(name, won) for name, won, _ in reports] == [
        ("near", True),
        ("far", False),
        ("bare", False),
    ]
    assert reports[0][2]["stood_down"] == ["far", "bare"]
    assert reports[2][2]["clarity"] is None


async def test_deliberate_starts_win_at_once_and_late_claims_lose(
    arbiter: Callable[..., WakeArbiter],
) -> None:
    reports: Reports = []
    judge = arbiter(window=0.2)
    loud = judge.claim("hall", claim("loud", reports, loudness=-5.0))
    button = judge.claim("hall", claim("button", reports, deliberate=True))
    assert loud.done()
    assert button.done()
    assert button.result()
    assert not loud.result()
    second = judge.claim("hall", claim("second", reports, deliberate=True))
    assert second.done()
    assert not second.result()
    elsewhere = judge.claim("bedroom", claim("elsewhere", reports, loudness=-40.0))
    assert await elsewhere  # alone in its own area's round
    await asyncio.sleep(0.25)
    assert ("button", True) in [(name, won) for name, won, _ in reports]
    assert {name for name, won, _ in reports if not won} == {"loud", "second"}
    assert "elsewhere" not in {name for name, _, _ in reports}


async def test_a_box_that_goes_away_takes_no_part(
    arbiter: Callable[..., WakeArbiter],
) -> None:
    reports: Reports = []
    judge = arbiter()
    gone_claim = claim("gone", reports, loudness=-5.0)
    gone = judge.claim("hall", gone_claim)
    stays = judge.claim("hall", claim("stays", reports, loudness=-40.0))
    judge.withdraw(gone_claim)
    assert gone.cancelled()
    assert await stays
    assert reports == []  # one box in the end: nothing to tell
    judge.withdraw(gone_claim)  # twice: nothing happens


async def test_a_box_whose_wait_is_cancelled_takes_no_part(
    arbiter: Callable[..., WakeArbiter],
) -> None:
    """Its link closed while it waited: it is not reported as stood down."""
    reports: Reports = []
    judge = arbiter()
    gone_claim = claim("gone", reports, loudness=-5.0)

    async def wait() -> bool:
        return await judge.claim("hall", gone_claim)

    waiting = asyncio.create_task(wait())
    await asyncio.sleep(0)
    stays = judge.claim("hall", claim("stays", reports, loudness=-40.0))
    waiting.cancel()
    await asyncio.sleep(0)
    judge.withdraw(gone_claim)
    assert await stays
    await asyncio.sleep(0.1)
    assert reports == []


async def test_a_round_everyone_left_decides_nothing(
    arbiter: Callable[..., WakeArbiter],
) -> None:
    reports: Reports = []
    judge = arbiter()
    only = claim("only", reports, loudness=-20.0)
    judge.claim("hall", only)
    judge.withdraw(only)
    await asyncio.sleep(0.1)
    assert reports == []
    assert await judge.claim("hall", claim("next", reports))  # a new round


async def test_shutdown_ends_every_round(arbiter: Callable[..., WakeArbiter]) -> None:
    reports: Reports = []
    judge = arbiter()
    waiting = judge.claim("hall", claim("a", reports, loudness=-20.0))
    decided = judge.claim("study", claim("b", reports, deliberate=True))
    judge.shutdown()
    assert waiting.cancelled()
    assert decided.result()
    await asyncio.sleep(0.1)
    assert reports == []


async def test_shutdown_while_rating(arbiter: Callable[..., WakeArbiter]) -> None:
    reports: Reports = []
    judge = arbiter(window=0.0)
    first = judge.claim("hall", claim("a", reports, loudness=-20.0))
    second = judge.claim("hall", claim("b", reports, loudness=-10.0))
    await asyncio.sleep(0)  # the window ended: rating runs in the executor
    judge.shutdown()
    assert first.cancelled()
    assert second.cancelled()
