"""Full-jitter exponential backoff: retries of many failed jobs spread out instead of
arriving together, and the random source can be pinned in tests (R21)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Backoff:
    base: float = 1.0
    cap: float = 60.0
    rng: Callable[[], float] = field(default=random.random)

    def delay(self, attempts: int) -> float:
        """Seconds to wait after the `attempts`-th attempt failed."""
        # 2 ** 1100 overflows a float; the cap is reached long before that.
        ceiling = min(self.cap, self.base * 2.0 ** min(max(attempts - 1, 0), 1000))
        return self.rng() * ceiling
