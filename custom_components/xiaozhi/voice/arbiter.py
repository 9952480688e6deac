"""One answer per wake word: boxes of one area that wake together pick one.

Boxes in the same Home Assistant area are a group. The first box of a group
to start a conversation opens a round of :data:`ARBITRATION_WINDOW`; every
box of the group that starts within it takes part, and one answers:

- a box that started without a wake word (its button, or a board whose wake
  word engine keeps no pre-roll) started on purpose: the first such box wins
  at once, without waiting for the window to end;
- otherwise the box whose pre-roll holds the wake phrase most clearly (the
  nearest one) wins when the window ends;
- a box that sent a wake word without a pre-roll comes last.

The others stand down. Boxes in other areas, or in none, never take part.
When a round had more than one box, each is told the outcome (events).
"""

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from homeassistant.core import HomeAssistant

from ..const import LOGGER

# Two boxes in one room detect one wake word a few tens of milliseconds
# apart, and Wi-Fi adds up to a hundred or two more. A third of a second
# covers both; the winner's audio is held meanwhile, so nothing it hears is
# lost, and a streaming speech-to-text catches up at once.
ARBITRATION_WINDOW: Final = 0.3


@dataclass(slots=True, eq=False, kw_only=True)
class WakeClaim:
    """One box's start of a conversation, waiting for its group's decision."""

    device_id: str
    name: str
    # Started without a wake word (button, or a board without a pre-roll).
    deliberate: bool
    # The box's pre-roll as it is at the decision (taken on the event loop).
    preroll: Callable[[], list[bytes]]
    # Fires the box's outcome event (won, stood down) once the round closes.
    report: Callable[[bool, dict[str, object]], None]
    clarity: float | None = None
    at: float = 0.0
    decision: asyncio.Future[bool] = field(init=False)


type Measure = Callable[[list[bytes]], float | None]


class _Round:
    """The boxes of one group that started within one window."""

    def __init__(self, group: str) -> None:
        self.group = group
        self.claims: list[WakeClaim] = []
        self.winner: WakeClaim | None = None
        self.closer: asyncio.TimerHandle | None = None
        self.decider: asyncio.Task[None] | None = None


class WakeArbiter:
    """Decides, per area, which box answers a wake word that several heard."""

    def __init__(
        self,
        hass: HomeAssistant,
        measure: Measure,
        window: float = ARBITRATION_WINDOW,
    ) -> None:
        """Decide for ``hass``; ``measure`` rates a pre-roll (run in the executor)."""
        self._hass = hass
        self._loop = hass.loop
        self._measure = measure
        self.window = window
        self._rounds: dict[str, _Round] = {}

    def claim(self, group: str, claim: WakeClaim) -> asyncio.Future[bool]:
        """Enter a box's start in its group's round; resolve True if it answers."""
        now = self._loop.time()
        claim.at = now
        claim.decision = self._loop.create_future()
        round_ = self._rounds.get(group)
        if round_ is None:
            round_ = self._rounds[group] = _Round(group)
            round_.closer = self._loop.call_at(now + self.window, self._close, round_)
        round_.claims.append(claim)
        if round_.winner is not None or round_.decider is not None:
            self._resolve(claim, won=False)  # decided already: too late
        elif claim.deliberate:
            self._decide(round_, claim)
        return claim.decision

    def withdraw(self, claim: WakeClaim) -> None:
        """Take back a claim whose box went away before the decision."""
        if claim.decision.done() and not claim.decision.cancelled():
            return  # decided: it took part
        # (A box whose wait was cancelled cancelled its decision with it.)
        for round_ in self._rounds.values():
            if claim in round_.claims:
                round_.claims.remove(claim)
        claim.decision.cancel()

    def _close(self, round_: _Round) -> None:
        """End the round's window: decide, unless decided already."""
        round_.closer = None
        if round_.winner is None and round_.decider is None:
            round_.decider = self._hass.async_create_background_task(
                self._async_decide(round_), f"xiaozhi wake word round in {round_.group}"
            )
        else:
            self._finish(round_)

    async def _async_decide(self, round_: _Round) -> None:
        """Rate every pre-roll, then let the clearest wake phrase answer."""
        rated = [claim for claim in round_.claims if not claim.decision.done()]
        if len(rated) > 1:
            prerolls = [claim.preroll() for claim in rated]
            levels = await asyncio.gather(
                *(
                    self._hass.async_add_executor_job(self._measure, preroll)
                    for preroll in prerolls
                )
            )
            for claim, level in zip(rated, levels, strict=True):
                claim.clarity = level
        live = [claim for claim in round_.claims if not claim.decision.done()]
        if live:
            self._decide(round_, min(live, key=_rank))
        self._finish(round_)

    def _decide(self, round_: _Round, winner: WakeClaim) -> None:
        round_.winner = winner
        for claim in round_.claims:
            self._resolve(claim, won=claim is winner)

    def _finish(self, round_: _Round) -> None:
        """Forget the round; tell its boxes the outcome when they were several."""
        if self._rounds.get(round_.group) is round_:
            del self._rounds[round_.group]
        winner = round_.winner
        if winner is None or len(round_.claims) < 2:
            return
        losers = [claim for claim in round_.claims if claim is not winner]
        LOGGER.debug(
            "Wake word in area %s: %s answers; %s stood down",
            round_.group,
            winner.name,
            ", ".join(claim.name for claim in losers),
        )
        winner.report(
            True,
            {
                "area_id": round_.group,
                "clarity": _rounded(winner.clarity),
                "stood_down": [claim.device_id for claim in losers],
            },
        )
        for claim in losers:
            claim.report(
                False,
                {
                    "area_id": round_.group,
                    "clarity": _rounded(claim.clarity),
                    "winner": winner.device_id,
                    "winner_name": winner.name,
                },
            )

    @staticmethod
    def _resolve(claim: WakeClaim, *, won: bool) -> None:
        if not claim.decision.done():
            claim.decision.set_result(won)

    def shutdown(self) -> None:
        """Stop deciding: every open round ends without a winner."""
        for round_ in self._rounds.values():
            if round_.closer is not None:
                round_.closer.cancel()
            if round_.decider is not None:
                round_.decider.cancel()
            for claim in round_.claims:
                if not claim.decision.done():
                    claim.decision.cancel()
        self._rounds.clear()


def _rank(claim: WakeClaim) -> tuple[int, float, float]:
    """Sort key among wake words, best first: clearest, then earliest.

    (A start on purpose never gets here: it is decided as it comes.)
    """
    if claim.clarity is not None:
        return (0, -claim.clarity, claim.at)
    return (1, 0.0, claim.at)


def _rounded(clarity: float | None) -> float | None:
    return None if clarity is None else round(clarity, 1)
