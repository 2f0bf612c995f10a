#!/usr/bin/env python3
"""Renders a terminal capture with colours (`tmux capture-pane -e -p`) to a PNG.

    render_ansi.py CAPTURE.ansi OUT.png [COLUMNS ROWS]

Understands the SGR sequences tmux emits: reset, bold, dim, italic, underline, reverse, the
16 basic colours, 256-colour and true-colour foreground/background. One cell per character
(the TUI draws only single-width characters), drawn in DejaVu Sans Mono.
"""
import re
import sys

from PIL import Image, ImageDraw, ImageFont

FONT_PATHS = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf",
    "/usr/share/fonts/TTF/DejaVuSansMono.ttf",
]
BOLD_PATHS = [p.replace("DejaVuSansMono.ttf", "DejaVuSansMono-Bold.ttf") for p in FONT_PATHS]
SIZE = 15

BASIC = [
    (0x1E, 0x1E, 0x1E), (0xCD, 0x31, 0x31), (0x0D, 0xBC, 0x79), (0xE5, 0xE5, 0x10),
    (0x24, 0x72, 0xC8), (0xBC, 0x3F, 0xBC), (0x11, 0xA8, 0xCD), (0xE5, 0xE5, 0xE5),
    (0x66, 0x66, 0x66), (0xF1, 0x4C, 0x4C), (0x23, 0xD1, 0x8B), (0xF5, 0xF5, 0x43),
    (0x3B, 0x8E, 0xEA), (0xD6, 0x70, 0xD6), (0x29, 0xB8, 0xDB), (0xFF, 0xFF, 0xFF),
]
DEFAULT_FG = (0xD4, 0xD4, 0xD4)
DEFAULT_BG = (0x16, 0x18, 0x1C)


def xterm256(n):
    if n < 16:
        return BASIC[n]
    if n < 232:
        n -= 16
        steps = [0, 95, 135, 175, 215, 255]
        return (steps[n // 36], steps[(n // 6) % 6], steps[n % 6])
    v = 8 + (n - 232) * 10
    return (v, v, v)


def load(paths):
    for p in paths:
        try:
            return ImageFont.truetype(p, SIZE)
        except OSError:
            continue
    sys.exit("render_ansi.py: DejaVu Sans Mono not found (apt-get install fonts-dejavu-core)")


class Style:
    def __init__(self):
        self.reset()

    def reset(self):
        self.fg = None
        self.bg = None
        self.bold = self.dim = self.underline = self.reverse = False

    def apply(self, params):
        codes = [int(p) if p else 0 for p in params.split(";")] if params else [0]
        i = 0
        while i < len(codes):
            c = codes[i]
            if c == 0:
                self.reset()
            elif c == 1:
                self.bold = True
            elif c == 2:
                self.dim = True
            elif c == 4:
                self.underline = True
            elif c == 7:
                self.reverse = True
            elif c == 22:
                self.bold = self.dim = False
            elif c == 24:
                self.underline = False
            elif c == 27:
                self.reverse = False
            elif 30 <= c <= 37:
                self.fg = BASIC[c - 30]
            elif 90 <= c <= 97:
                self.fg = BASIC[c - 90 + 8]
            elif 40 <= c <= 47:
                self.bg = BASIC[c - 40]
            elif 100 <= c <= 107:
                self.bg = BASIC[c - 100 + 8]
            elif c == 39:
                self.fg = None
            elif c == 49:
                self.bg = None
            elif c in (38, 48) and i + 1 < len(codes):
                if codes[i + 1] == 5 and i + 2 < len(codes):
                    colour = xterm256(codes[i + 2])
                    i += 2
                elif codes[i + 1] == 2 and i + 4 < len(codes):
                    colour = tuple(codes[i + 2:i + 5])
                    i += 4
                else:
                    colour = None
                if c == 38:
                    self.fg = colour
                else:
                    self.bg = colour
            i += 1

    def colours(self):
        fg = self.fg or DEFAULT_FG
        bg = self.bg or DEFAULT_BG
        if self.dim and self.fg is None:
            fg = (0x80, 0x80, 0x80)
        if self.reverse:
            fg, bg = (self.bg or DEFAULT_BG), (self.fg or DEFAULT_FG)
        return fg, bg


SGR = re.compile(r"\x1b\[([0-9;]*)m|\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Za-z0-9]|\x1b.")


def cells(text):
    """Yields (row, col, char, style-colours, bold, underline)."""
    style = Style()
    for row, line in enumerate(text.split("\n")):
        col = 0
        pos = 0
        while pos < len(line):
            m = SGR.match(line, pos)
            if m:
                if m.group(1) is not None or m.group(0).endswith("m"):
                    style.apply(m.group(1) or "")
                pos = m.end()
                continue
            ch = line[pos]
            pos += 1
            fg, bg = style.colours()
            yield row, col, ch, fg, bg, style.bold, style.underline
            col += 1


def main():
    if len(sys.argv) not in (3, 5):
        sys.exit(__doc__)
    src, out = sys.argv[1], sys.argv[2]
    columns, rows = (int(sys.argv[3]), int(sys.argv[4])) if len(sys.argv) == 5 else (120, 36)
    text = open(src, encoding="utf-8", errors="replace").read()
    regular, bold = load(FONT_PATHS), load(BOLD_PATHS)
    left, top, right, bottom = regular.getbbox("M")
    cw = round(regular.getlength("M"))
    ch = SIZE + 5
    pad = 12
    img = Image.new("RGB", (columns * cw + 2 * pad, rows * ch + 2 * pad), DEFAULT_BG)
    draw = ImageDraw.Draw(img)
    for row, col, c, fg, bg, is_bold, underline in cells(text):
        if row >= rows or col >= columns:
            continue
        x, y = pad + col * cw, pad + row * ch
        if bg != DEFAULT_BG:
            draw.rectangle([x, y, x + cw - 1, y + ch - 1], fill=bg)
        if c in "─│┌┐└┘├┤┬┴┼":
            # Box drawing joins cell to cell: drawn as lines, not glyphs, so no gaps show.
            mx, my = x + cw // 2, y + ch // 2
            if c in "─┌└├┬┴┼┐┘┤":
                l = x if c in "─┐┘┤┬┴┼" else mx
                r = x + cw - 1 if c in "─┌└├┬┴┼" else mx
                draw.line([l, my, r, my], fill=fg)
            if c in "│┌┐├┤┬┼└┘┴":
                t = y if c in "│└┘├┤┴┼" else my
                b = y + ch - 1 if c in "│┌┐├┤┬┼" else my
                draw.line([mx, t, mx, b], fill=fg)
            continue
        if c in "█▉▊▋▌▍▎▏":
            eighths = 8 - "█▉▊▋▌▍▎▏".index(c)
            draw.rectangle([x, y + 2, x + cw * eighths // 8 - 1, y + ch - 3], fill=fg)
            continue
        if c != " ":
            draw.text((x, y + 2), c, font=bold if is_bold else regular, fill=fg)
        if underline:
            draw.line([x, y + ch - 2, x + cw - 1, y + ch - 2], fill=fg)
    img.save(out)


if __name__ == "__main__":
    main()
