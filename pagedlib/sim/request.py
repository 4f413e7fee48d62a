"""One request as the Orca baselines' step loop sees it: lengths, progress and the memory it holds."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, eq=False)
class SimRequest:
    """A request of the simulation. ``generated`` grows by one token per step while it runs.

    ``stored`` is what its K/V cache holds now (prompt + generated tokens), ``need`` what it will hold
    at its end. ``slots`` and ``address`` are set by the pool that admitted it: the slots of its
    reservation and where they start (a buddy address).
    """

    rid: int
    prompt: int
    output: int
    generated: int = 0
    slots: int = 0
    address: int = -1
    finish_step: int = -1
    finish_s: float = -1.0              # the clock (s) at the end of the step that finished it

    @property
    def stored(self) -> int:
        return self.prompt + self.generated

    @property
    def need(self) -> int:
        return self.prompt + self.output

    @property
    def done(self) -> bool:
        return self.generated >= self.output
