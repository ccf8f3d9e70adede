"""Two small inline-SVG plots, drawn here so the HTML page needs nothing from anywhere:
a line plot on a log2 x axis (all-reduce bus bandwidth vs message size) and grouped bars
(latency percentiles per series)."""

from __future__ import annotations

import math
from html import escape

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f")
WIDTH, HEIGHT = 640, 340
LEFT, RIGHT, TOP, BOTTOM = 64, 150, 30, 52


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    exponent = math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if step * 10 ** exponent >= value:
            return step * 10 ** exponent
    return 10 ** (exponent + 1)


def _tick(value: float) -> str:
    return f"{value:,.0f}" if value >= 1000 else f"{value:.3g}"


def _size_label(n: float) -> str:
    for unit in ("B", "K", "M", "G"):
        if n < 1024 or unit == "G":
            return f"{n:g}{unit}"
        n /= 1024
    return f"{n:g}"


def _frame(plot_id: str, title: str, x_label: str, y_label: str, y_max: float,
           width: int = WIDTH) -> list[str]:
    inner_h = HEIGHT - TOP - BOTTOM
    parts = [
        f'<svg id="{escape(plot_id)}" class="plot" xmlns="http://www.w3.org/2000/svg" '
        f'width="{width}" height="{HEIGHT}" viewBox="0 0 {width} {HEIGHT}" role="img" '
        f'aria-label="{escape(title)}">',
        f'<title>{escape(title)}</title>',
        f'<text x="{LEFT}" y="18" font-size="14" font-weight="bold">{escape(title)}</text>',
        f'<line class="axis" x1="{LEFT}" y1="{TOP + inner_h}" x2="{width - RIGHT}" '
        f'y2="{TOP + inner_h}" stroke="#333"/>',
        f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + inner_h}" '
        f'stroke="#333"/>',
        f'<text x="{(LEFT + width - RIGHT) / 2}" y="{HEIGHT - 8}" font-size="12" '
        f'text-anchor="middle">{escape(x_label)}</text>',
        f'<text x="14" y="{TOP + inner_h / 2}" font-size="12" text-anchor="middle" '
        f'transform="rotate(-90 14 {TOP + inner_h / 2})">{escape(y_label)}</text>',
    ]
    for i in range(5):
        value = y_max * i / 4
        y = TOP + inner_h - inner_h * i / 4
        parts.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{width - RIGHT}" y2="{y:.1f}" '
                     f'stroke="#ddd"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" font-size="10" '
                     f'text-anchor="end">{_tick(value)}</text>')
    return parts


def _legend(parts: list[str], labels: list[str], width: int = WIDTH) -> None:
    for i, label in enumerate(labels):
        y = TOP + 14 + i * 18
        x = width - RIGHT + 12
        parts.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" '
                     f'fill="{PALETTE[i % len(PALETTE)]}"/>')
        parts.append(f'<text class="legend" x="{x + 14}" y="{y}" font-size="11">'
                     f'{escape(label[:22])}</text>')


def line_plot_log2(plot_id: str, title: str, x_label: str, y_label: str,
                   series: list[tuple[str, list[tuple[float, float]]]]) -> str:
    """Lines over a log2 x axis; each point is a <circle class="point"> with a <title>."""
    points = [p for _, pts in series for p in pts if p[0] > 0]
    if not points:
        return ""
    xs = [math.log2(x) for x, _ in points]
    x_min, x_max = min(xs), max(xs)
    if x_max == x_min:
        x_min, x_max = x_min - 1, x_max + 1
    y_max = _nice_max(max(y for _, y in points))
    inner_w, inner_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def sx(x: float) -> float:
        return LEFT + inner_w * (math.log2(x) - x_min) / (x_max - x_min)

    def sy(y: float) -> float:
        return TOP + inner_h - inner_h * y / y_max

    parts = _frame(plot_id, title, x_label, y_label, y_max)
    ticks = sorted({x for x, _ in points})
    step = max(1, math.ceil(len(ticks) / 8))
    for x in ticks[::step]:
        parts.append(f'<text x="{sx(x):.1f}" y="{TOP + inner_h + 16}" font-size="10" '
                     f'text-anchor="middle">{_size_label(x)}</text>')
    for i, (label, pts) in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        pts = sorted(p for p in pts if p[0] > 0)
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        parts.append(f'<polyline class="series" fill="none" stroke="{color}" stroke-width="2" '
                     f'points="{path}"/>')
        for x, y in pts:
            parts.append(f'<circle class="point" cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" '
                         f'fill="{color}"><title>{escape(label)}: {_size_label(x)} → '
                         f'{y:.4g}</title></circle>')
    _legend(parts, [label for label, _ in series])
    parts.append("</svg>")
    return "\n".join(parts)


def grouped_bars(plot_id: str, title: str, x_label: str, y_label: str, groups: list[str],
                 categories: list[str], values: list[list[float | None]]) -> str:
    """Bars: one group per series (x), one bar per category (percentile) inside a group.
    `values[g][c]` may be None (not measured): no bar is drawn for it."""
    measured = [v for row in values for v in row if v is not None]
    if not groups or not categories or not measured:
        return ""
    y_max = _nice_max(max(measured))
    width = max(WIDTH, LEFT + RIGHT + len(groups) * (len(categories) * 9 + 12))
    inner_w, inner_h = width - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    parts = _frame(plot_id, title, x_label, y_label, y_max, width)
    group_w = inner_w / len(groups)
    bar_w = group_w * 0.8 / len(categories)
    for g, group in enumerate(groups):
        x0 = LEFT + g * group_w + group_w * 0.1
        cx = x0 + group_w * 0.4
        if len(groups) > 6:
            parts.append(f'<text x="{cx:.1f}" y="{TOP + inner_h + 10}" font-size="9" '
                         f'text-anchor="end" transform="rotate(-35 {cx:.1f} {TOP + inner_h + 10})"'
                         f'>{escape(group[:24])}</text>')
        else:
            parts.append(f'<text x="{cx:.1f}" y="{TOP + inner_h + 16}" font-size="10" '
                         f'text-anchor="middle">{escape(group[:24])}</text>')
        for c, category in enumerate(categories):
            value = values[g][c]
            if value is None:
                continue
            h = inner_h * value / y_max
            parts.append(f'<rect class="bar" x="{x0 + c * bar_w:.1f}" '
                         f'y="{TOP + inner_h - h:.1f}" width="{max(bar_w - 1, 1):.1f}" '
                         f'height="{h:.1f}" fill="{PALETTE[c % len(PALETTE)]}">'
                         f'<title>{escape(group)} {escape(category)}: {value:.4g}</title></rect>')
    _legend(parts, categories, width)
    parts.append("</svg>")
    return "\n".join(parts)


def promotion_diagram(diagram_id: str, nodes: list[dict]) -> str:
    """The promotion path as boxes joined by arrows. Each node: `name`, `where` (registry or
    place), `digest` (short), `state` (`verified`, `not-verified`: read back and not as sent,
    `unverified`, `wrong`, `pass`, `fail`),
    `note` (one short line: attestations…). Class `diagram`, not `plot`: no data points."""
    if not nodes:
        return ""
    box_w, box_h, gap, pad = 210, 104, 44, 10
    width = pad * 2 + len(nodes) * box_w + (len(nodes) - 1) * gap
    height = box_h + pad * 2 + 22
    colors = {"verified": ("#e6f4e6", "#176b17", "✓ read back, verified"),
              "pass": ("#e6f4e6", "#176b17", "✓ runs the pinned digest"),
              "not-verified": ("#fde8eb", "#b00020", "✗ read back: not as sent"),
              "unverified": ("#f5f5f5", "#777", "○ pushed, not read back"),
              "wrong": ("#fde8eb", "#b00020", "✗ serves another digest"),
              "fail": ("#fde8eb", "#b00020", "✗ not the pinned digest")}
    parts = [f'<svg id="{escape(diagram_id)}" class="diagram" xmlns="http://www.w3.org/2000/svg" '
             f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="promotion path">',
             '<title>promotion path</title>',
             '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
             'markerHeight="7" orient="auto"><path d="M0,0L10,5L0,10z" fill="#555"/></marker>'
             '</defs>']
    for i, node in enumerate(nodes):
        x = pad + i * (box_w + gap)
        y = pad
        fill, stroke, label = colors.get(node.get("state", "unverified"), colors["unverified"])
        parts.append(f'<g class="endpoint" data-state="{escape(node.get("state", ""))}">'
                     f'<rect x="{x}" y="{y}" width="{box_w}" height="{box_h}" rx="8" '
                     f'fill="{fill}" stroke="{stroke}" stroke-width="2"/>'
                     f'<text x="{x + 10}" y="{y + 22}" font-size="15" font-weight="bold">'
                     f'{escape(node["name"][:24])}</text>'
                     f'<text x="{x + 10}" y="{y + 40}" font-size="11" fill="#555">'
                     f'{escape(node.get("where", "")[:32])}</text>'
                     f'<text x="{x + 10}" y="{y + 58}" font-size="11" '
                     f'font-family="monospace">{escape(node.get("digest", "")[:26])}</text>'
                     f'<text x="{x + 10}" y="{y + 76}" font-size="12" fill="{stroke}">'
                     f'{escape(label)}</text>'
                     f'<text x="{x + 10}" y="{y + 94}" font-size="10" fill="#555">'
                     f'{escape(node.get("note", "")[:36])}</text>'
                     f'<title>{escape(node.get("title", node["name"]))}</title></g>')
        if i:
            ax = x - gap + 4
            parts.append(f'<line class="hop" x1="{ax}" y1="{y + box_h / 2}" x2="{x - 4}" '
                         f'y2="{y + box_h / 2}" stroke="#555" stroke-width="2" '
                         f'marker-end="url(#arrow)"/>')
    parts.append("</svg>")
    return "\n".join(parts)


def hbars(plot_id: str, title: str, rows: list[tuple[str, float, float | None, str]],
          x_max: float = 1.0, unit: str = "%") -> str:
    """Horizontal bars, one per row (label, value, floor or None, css status) on 0..x_max; a
    floor is a dashed tick. Used for goodput per bench round."""
    if not rows:
        return ""
    left, bar_h, width = 190, 22, WIDTH
    height = TOP + len(rows) * (bar_h + 8) + 30
    inner_w = width - left - 70
    parts = [f'<svg id="{escape(plot_id)}" class="plot" xmlns="http://www.w3.org/2000/svg" '
             f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="{escape(title)}">', f'<title>{escape(title)}</title>',
             f'<text x="{LEFT}" y="18" font-size="14" font-weight="bold">{escape(title)}</text>']
    for i, (label, value, floor, status) in enumerate(rows):
        y = TOP + i * (bar_h + 8)
        w = inner_w * max(0.0, min(value / x_max, 1.0))
        color = {"PASS": "#2ca02c", "FAIL": "#d62728", "ERROR": "#d62728"}.get(status, "#ff7f0e")
        parts.append(f'<text x="{left - 8}" y="{y + 15}" font-size="11" text-anchor="end">'
                     f'{escape(label[:28])}</text>')
        parts.append(f'<rect x="{left}" y="{y}" width="{inner_w}" height="{bar_h}" '
                     f'fill="#f0f0f0"/>')
        parts.append(f'<rect class="bar" x="{left}" y="{y}" width="{max(w, 1):.1f}" '
                     f'height="{bar_h}" fill="{color}"><title>{escape(label)}: '
                     f'{value * 100:.1f}{unit}</title></rect>')
        parts.append(f'<text x="{left + inner_w + 6}" y="{y + 15}" font-size="11">'
                     f'{value * 100:.0f}{unit}</text>')
        if floor is not None:
            fx = left + inner_w * min(floor / x_max, 1.0)
            parts.append(f'<line x1="{fx:.1f}" y1="{y - 2}" x2="{fx:.1f}" y2="{y + bar_h + 2}" '
                         f'stroke="#000" stroke-dasharray="3,2"><title>floor '
                         f'{floor * 100:.0f}{unit}</title></line>')
    parts.append("</svg>")
    return "\n".join(parts)
