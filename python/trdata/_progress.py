"""The one progress bar of trdata (plain stderr, no dependency): ``trdata pack``/``verify``, the synthetic
dataset's generation and the bench harness draw it."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["ProgressBar", "progress_callback"]


class ProgressBar:
    """A one-line progress bar on stderr. On a terminal it redraws in place (at most ~10×/s); otherwise it
    prints one line when done, so logs stay readable."""

    WIDTH = 28

    def __init__(
        self,
        total: int,
        label: str,
        unit: str = "img",
        stream: Any = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        """``clock``: the seconds the rate divides by (the bench harness passes the clock it times with, so the
        bar's rate and the measurement agree)."""
        self.clock = clock
        self.total = max(1, int(total))
        self.label = label
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.done = 0
        #: Units since ``start``, which the rate shown divides: ``done`` unless ``update_to`` says otherwise (a
        #: bar that restarts every epoch of a ``--seconds`` run still shows the run's rate).
        self.counted = 0
        self.start = self.clock()
        self._last_draw = 0.0
        self._closed = False
        self._draw(force=True)

    def update(self, n: int = 1) -> None:
        self.update_to(self.done + n)

    def update_to(self, done: int, counted: int | None = None) -> None:
        """Show ``done`` of ``total``; the rate is ``counted`` (default: ``done``) per second since ``start``."""
        self.done = min(int(done), self.total)
        self.counted = self.done if counted is None else int(counted)
        self._draw()

    def _line(self) -> str:
        frac = self.done / self.total
        filled = int(frac * self.WIDTH)
        elapsed = self.clock() - self.start
        rate = self.counted / elapsed if elapsed > 0 else 0.0
        bar = "█" * filled + "░" * (self.WIDTH - filled)
        return (
            f"{self.label:<40} {bar} {self.done:>6}/{self.total} {self.unit} "
            f"{rate:8.0f} {self.unit}/s {elapsed:6.1f}s"
        )

    def _draw(self, force: bool = False) -> None:
        if not self.tty:
            return
        now = self.clock()
        if not force and now - self._last_draw < 0.1 and self.done < self.total:
            return
        self._last_draw = now
        self.stream.write("\r" + self._line())
        self.stream.flush()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.tty:
            self._draw(force=True)
            self.stream.write("\n")
        else:
            self.stream.write(self._line() + "\n")
        self.stream.flush()


def progress_callback(
    enabled: bool, label: str, unit: str, *, draw_at_zero: bool = True
) -> tuple[Callable[[int, int], None], Callable[[], None]]:
    """A ``progress(done, total)`` callback for the core (the bar is made on its first call, so nothing is drawn
    when the core never reports), and a function closing the bar. ``draw_at_zero=False``: a first report of
    ``done == 0`` draws nothing yet (the synthetic dataset reports 0 when it is already cached)."""
    bar: ProgressBar | None = None

    def report(done: int, total: int) -> None:
        nonlocal bar
        if not enabled or (bar is None and done == 0 and not draw_at_zero):
            return
        if bar is None:
            bar = ProgressBar(total, label, unit=unit)
        bar.update_to(done)

    def close() -> None:
        if bar is not None:
            bar.close()

    return report, close
