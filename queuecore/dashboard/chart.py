"""The last hour as bars, laid out here and drawn as inline SVG by the template: a chart
needs no JavaScript library, no build step and nothing fetched from elsewhere."""

from __future__ import annotations

from dataclasses import dataclass

WIDTH = 600
HEIGHT = 120


@dataclass(frozen=True)
class Bar:
    x: float
    width: float
    done_y: float
    done_height: float
    dead_y: float
    dead_height: float
    title: str


@dataclass(frozen=True)
class Chart:
    bars: list[Bar]
    peak: int
    width: int = WIDTH
    height: int = HEIGHT


def bars(done: list[int], dead: list[int]) -> Chart:
    """One bar per minute, oldest on the left: done stacked on dead, scaled to the peak."""
    peak = max([d + f for d, f in zip(done, dead, strict=True)] + [1])
    step = WIDTH / max(len(done), 1)
    laid: list[Bar] = []
    for i, (ok, failed) in enumerate(zip(done, dead, strict=True)):
        dead_height = HEIGHT * failed / peak
        done_height = HEIGHT * ok / peak
        minutes_ago = len(done) - i
        laid.append(
            Bar(
                x=i * step,
                width=max(step - 1, 1),
                dead_y=HEIGHT - dead_height,
                dead_height=dead_height,
                done_y=HEIGHT - dead_height - done_height,
                done_height=done_height,
                title=f"{minutes_ago} min ago: {ok} done, {failed} dead",
            )
        )
    return Chart(laid, peak)
