"""The report's HTML page: tables as preformatted text, figures as <img> next to their captions."""

from __future__ import annotations

import html
from dataclasses import dataclass, field


@dataclass
class Section:
    """One part of the page: a heading, lines of text, preformatted tables and figures (file, caption)."""

    title: str
    lines: list[str] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)
    figures: list[tuple[str, str]] = field(default_factory=list)


_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 1400px; margin: 2em auto;
       padding: 0 1em; color: #222; line-height: 1.45; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 2em; border-bottom: 1px solid #ddd; }
pre { background: #f6f8fa; padding: 0.8em 1em; border-radius: 6px; overflow-x: auto; font-size: 0.92em; }
figure { margin: 1.2em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.92em; margin-top: 0.3em; } .note { color: #555; font-size: 0.9em; }
"""


def render_page(title: str, sections: list[Section], *, notes: list[str] | None = None) -> str:
    """A self-contained HTML page (figures are referenced by relative file name)."""
    e = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{e(title)}</h1>",
    ]
    for section in sections:
        parts.append(f"<h2>{e(section.title)}</h2>")
        parts.extend(f"<p>{e(line)}</p>" for line in section.lines)
        parts.extend(f"<pre>{e(table)}</pre>" for table in section.tables)
        for file, caption in section.figures:
            parts.append(
                f'<figure><img src="{e(file, quote=True)}" alt="{e(caption, quote=True)}">'
                f"<figcaption>{e(caption)}</figcaption></figure>"
            )
    parts.extend(f'<p class="note">{e(n)}</p>' for n in (notes or []))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
