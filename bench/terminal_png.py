"""Render a captured terminal screen (text, e.g. `tmux capture-pane -p`) to a PNG: monospace text
on a dark background, one image row per screen line.

    python -m bench.terminal_png docs/img/raylog-top.txt docs/img/raylog-top.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

BACKGROUND = "#1e1e1e"
FOREGROUND = "#d4d4d4"
HEADER = "#4ec9b0"


def render(text: str, out: Path, font_size: float = 10.0) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = text.rstrip("\n").splitlines() or [""]
    columns = max(len(line) for line in lines)
    dpi, pad, line_h = 150, 0.25, 1.25 * font_size / 72
    fig = plt.figure(dpi=dpi)
    probe = fig.text(0, 0, "M" * 100, family="DejaVu Sans Mono", fontsize=font_size)
    char_w = probe.get_window_extent(fig.canvas.get_renderer()).width / 100 / dpi  # inches per glyph
    probe.remove()
    fig.set_size_inches(columns * char_w + 2 * pad, len(lines) * line_h + 2 * pad)
    fig.patch.set_facecolor(BACKGROUND)
    height = fig.get_figheight()
    for i, line in enumerate(lines):
        colour = HEADER if line.startswith(("raylog top", "TOPIC", "GROUP")) else FOREGROUND
        fig.text(pad / fig.get_figwidth(), 1 - (pad + (i + 0.8) * line_h) / height, line, family="DejaVu Sans Mono",
                 fontsize=font_size, color=colour, ha="left", va="baseline")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, facecolor=BACKGROUND)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("text", type=Path)
    parser.add_argument("png", type=Path)
    parser.add_argument("--font-size", type=float, default=10.0)
    args = parser.parse_args()
    render(args.text.read_text(), args.png, args.font_size)


if __name__ == "__main__":
    main()
