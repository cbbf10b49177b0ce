"""report.md beside report.html: the same text as one self-contained page.

The Markdown is rendered with Python-Markdown (tables, fenced code); every image it shows (the
run's PNG and SVG plots) is embedded as a data: URI, and the page carries its own style sheet,
so report.html opens from disk in any browser with no server and no other file. Links to files
beside the report (sweep.csv, another report) stay links.

The page holds what the Markdown says and nothing a user's string could add to it: raw HTML in
the text is shown as text, not passed through (Python-Markdown's html_block and html are left
out), a link goes only to a file beside the report or to the web (http, https, mailto), an
image is a file of the report's folder (embedded, never one from elsewhere) or a data: image,
any other only its alt text. The writers escape a user's
strings for Markdown besides (sim/report/escape.py); this holds report.html safe where one
was missed.
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

import markdown
from markdown.extensions import Extension
from markdown.treeprocessors import Treeprocessor
from markdown.util import AMP_SUBSTITUTE

from sim.report.escape import md_row
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
# a URL's scheme as a browser reads it: after entities are decoded and the whitespace and
# control characters it ignores are dropped (`java&#9;script:` is javascript:)
SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
IGNORED = re.compile(r"[\x00-\x20\x7f]")
WEB = {"http", "https"}
# a link may go to the web; an image is a file of the report's, embedded, or a data: image
KEEP = {"a": ("href", WEB | {"mailto"}), "img": ("src", set())}


def allowed(url: str, schemes: set[str], tag: str) -> bool:
    """Whether a link (tag a) or image (img) may point at `url`: a path with no scheme (a file
    beside the report, an anchor), one of `schemes`, or for an image a data: image."""
    plain = IGNORED.sub("", html.unescape(url.replace(AMP_SUBSTITUTE, "&")))
    scheme = SCHEME.match(plain)
    if scheme is None:
        return True
    name = scheme.group(1).lower()
    return name in schemes or (tag == "img" and plain.lower().startswith("data:image/"))


class SafeUrls(Treeprocessor):
    """Drops a link's target or an image whose URL could run a script or reach past the
    report's files and the web (javascript:, data:text/html, vbscript:, file:)."""

    def run(self, root) -> None:
        for parent in list(root.iter()):
            for el in list(parent):
                if el.tag not in KEEP:
                    continue
                attr, schemes = KEEP[el.tag]
                if allowed(el.get(attr, ""), schemes, el.tag):
                    continue
                if el.tag == "a":  # the link's text stays, as text
                    del el.attrib[attr]
                    el.tag = "span"
                else:  # an image: its alt text in its place
                    alt = el.get("alt", "")
                    index = list(parent).index(el)
                    parent.remove(el)
                    _put_text(parent, index, alt + (el.tail or ""))


def _put_text(parent, index: int, text: str) -> None:
    """Text where the child at `index` was (the previous child's tail, or the parent's text)."""
    if index:
        prev = parent[index - 1]
        prev.tail = (prev.tail or "") + text
    else:
        parent.text = (parent.text or "") + text


class NoRawHtml(Extension):
    """Raw HTML in the Markdown is text (Python-Markdown's html_block preprocessor and html
    inline pattern left out: `<script>` is `&lt;script&gt;`), and SafeUrls after every other
    tree step, the unescaping of `\\(` and the like in URLs included."""

    def extendMarkdown(self, md) -> None:
        md.preprocessors.deregister("html_block")
        md.inlinePatterns.deregister("html")
        md.treeprocessors.register(SafeUrls(md), "safe_urls", -10)


def render_html(text: str, base: Path, title: str | None = None) -> str:
    """The page for Markdown `text` whose images are files relative to `base`."""
    body = markdown.markdown(
        text,
        extensions=["tables", "fenced_code", "sane_lists", NoRawHtml()],
        output_format="html",
    )
    inside = base.resolve()

    def embed(m: re.Match) -> str:
        src = m.group(2)
        path = base / html.unescape(src)
        kind = MIME.get(path.suffix.lower())
        try:  # only a file inside the report's folder, never one from elsewhere
            if src.startswith("data:") or kind is None or not path.is_file():
                return m.group(0)
            if not path.resolve().is_relative_to(inside):
                return m.group(0)
        except (OSError, RuntimeError):  # a name too long, a loop of links: not embedded
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
    """A Markdown table; every cell through md_cell (sim/report/escape.py): a number or `Md`
    as it is, a string escaped, so a `|` or a newline in it never makes another cell or row."""
    lines = [md_row(header), "|" + "---|" * len(header)]
    lines += [md_row(row) for row in rows]
    return "\n".join(lines)
