"""Inline SVG bar charts for the dashboard: server-rendered, no JavaScript, every text escaped.

A chart is ``role="img"`` with a ``<title>`` and a ``<desc>`` (what a screen reader says), and each
bar carries its own ``<title>`` (what a mouse hover shows: the bucket and its values).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

WIDTH, HEIGHT = 640, 170
LEFT, RIGHT, TOP, BOTTOM = 44, 8, 10, 24


@dataclass(frozen=True)
class ChartSeries:
    """One stacked series: its name (in hovers and the legend), a CSS class for its colour, its values."""

    name: str
    css: str
    values: Sequence[float]


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5 or 5 times a power of ten that is at least ``value`` (an axis's top)."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if step * power >= value:
            return float(step * power)
    return float(10 * power)  # pragma: no cover  (the loop always returns)


def _number(value: float) -> str:
    return f"{value:g}" if value < 1e6 else f"{value:.3g}"


def bar_chart(
    *,
    chart_id: str,
    title: str,
    description: str,
    labels: Sequence[str],
    series: Sequence[ChartSeries],
    tick_every: int | None = None,
) -> SafeString:
    """Render stacked bars, one per label; ``tick_every`` labels the x axis every that many bars.

    ``chart_id`` must be unique on the page (it names the title and description for ``aria-labelledby``).
    """
    if any(len(s.values) != len(labels) for s in series):
        raise ValueError("every series needs one value per label")
    count = max(len(labels), 1)
    plot_width, plot_height = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    totals = [sum(s.values[i] for s in series) for i in range(len(labels))]
    top = nice_ceiling(max(totals, default=0))
    slot = plot_width / count
    gap = min(2.0, slot * 0.2)
    parts: list[SafeString] = [
        format_html(
            '<svg class="wakes-chart" viewBox="0 0 {} {}" role="img" aria-labelledby="{}-title {}-desc">'
            '<title id="{}-title">{}</title><desc id="{}-desc">{}</desc>',
            WIDTH,
            HEIGHT,
            chart_id,
            chart_id,
            chart_id,
            title,
            chart_id,
            description,
        )
    ]
    for fraction in (0.0, 0.5, 1.0):
        y = TOP + plot_height * (1 - fraction)
        parts.append(
            format_html(
                '<line class="grid" x1="{}" x2="{}" y1="{}" y2="{}"/><text class="axis" x="{}" y="{}" '
                'text-anchor="end">{}</text>',
                LEFT,
                WIDTH - RIGHT,
                f"{y:.1f}",
                f"{y:.1f}",
                LEFT - 4,
                f"{y + 3:.1f}",
                _number(top * fraction),
            )
        )
    for index, label in enumerate(labels):
        x = LEFT + index * slot
        bottom = float(TOP + plot_height)
        rects: list[SafeString] = []
        for s in series:
            value = s.values[index]
            if value <= 0:
                continue
            height = plot_height * value / top
            bottom -= height
            rects.append(
                format_html(
                    '<rect class="{}" x="{}" y="{}" width="{}" height="{}"/>',
                    s.css,
                    f"{x + gap / 2:.2f}",
                    f"{bottom:.2f}",
                    f"{max(slot - gap, 0.5):.2f}",
                    f"{height:.2f}",
                )
            )
        hover = ", ".join(f"{s.name} {_number(s.values[index])}" for s in series)
        parts.append(
            format_html(
                '<g class="bar"><title>{}: {}</title><rect class="hit" x="{}" y="{}" width="{}" height="{}"/>{}</g>',
                label,
                hover,
                f"{x:.2f}",
                TOP,
                f"{slot:.2f}",
                plot_height,
                format_html_join("", "{}", ((rect,) for rect in rects)),
            )
        )
        if tick_every and index % tick_every == 0:
            parts.append(
                format_html(
                    '<text class="axis" x="{}" y="{}" text-anchor="start">{}</text>',
                    f"{x:.1f}",
                    HEIGHT - 6,
                    label,
                )
            )
    parts.append(SafeString("</svg>"))  # a constant, nothing to escape
    return format_html_join("", "{}", ((part,) for part in parts))
