"""report.md beside report.html: the same text as one self-contained page.

The Markdown is rendered with Python-Markdown (tables, fenced code); every image it shows (the
run's PNG and SVG plots) is embedded as a data: URI, and the page carries its own style sheet,
so report.html opens from disk in any browser with no server and no other file. Links to files
beside the report (sweep.csv, another report) stay links.
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

import markdown

from sim.run.outputs import write_text

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 1100px;
       margin: 2em auto; padding: 0 1em; line-height: 1.45; color: #222; }
h1, h2, h3 { line-height: 1.2; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f2f2f2; }
td:first-child, th:first-child { text-align: left; }
img { max-width: 100%; height: auto; border: 1px solid #eee; }
code { background: #f5f5f5; padding: 0 0.2em; }
pre { background: #f5f5f5; padding: 0.6em; overflow-x: auto; }
blockquote { border-left: 4px solid #ddd; margin-left: 0; padding-left: 1em; color: #444; }
"""
MIME = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg", ".gif": "image/gif"}
IMG = re.compile(r'<img([^>]*?)src="([^"]+)"')


def render_html(text: str, base: Path, title: str | None = None) -> str:
    """The page for Markdown `text` whose images are files relative to `base`."""
    body = markdown.markdown(
        text, extensions=["tables", "fenced_code", "sane_lists"], output_format="html"
    )

    def embed(m: re.Match) -> str:
        src = m.group(2)
        path = base / src
        kind = MIME.get(path.suffix.lower())
        if src.startswith("data:") or kind is None or not path.is_file():
            return m.group(0)
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        return f'<img{m.group(1)}src="data:{kind};base64,{data}"'

    body = IMG.sub(embed, body)
    if title is None:
        first = re.search(r"<h1>(.*?)</h1>", body)
        title = re.sub(r"<[^>]+>", "", first.group(1)) if first else "sim report"
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(html.unescape(title))}</title>\n"
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<style>{STYLE}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n"
    )


def write_report(out_dir: Path, text: str, title: str | None = None) -> Path:
    """report.md and report.html in `out_dir` (after the plots the text shows)."""
    path = write_text(out_dir / "report.md", text)
    write_text(out_dir / "report.html", render_html(text, out_dir, title))
    return path


def md_table(rows: list[tuple], header: tuple) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
