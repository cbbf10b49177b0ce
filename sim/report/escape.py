"""A user's strings placed in Markdown read as the text they are.

A case id, a model's name or path, a GPU's display name, an engine argument's value, a swept
value, a trace's path or a refusal's reason (which quotes them) is the user's text. Placed in
report.md as it is, a `|` splits a table's row into more cells, a newline ends the row, a
leading `#` opens a heading, `[x](y)` a link, `![x](y)` an image, a backtick a code span that
swallows what follows, and `<script>` is raw HTML. Every report writer puts such a string
through one of these:

    md_text(s)    prose, a heading, a list item: Markdown's characters escaped, so it renders
                  as the same text in Python-Markdown (report.html) and GitHub's Markdown
    md_code(s)    the same string as a code span, whatever backticks it holds
    md_cell(v)    a table cell (md_table's and every hand-built row's): a number as it is,
                  `Md` as it is, any other string as md_text escapes it inline

`Md` marks a string as Markdown the project wrote (`**no**`, a code span around a setting's
name), which md_cell places as it is; a user's string inside it is escaped where it is put in.
The escapes leave ordinary names byte for byte (`llama-3.1-8b`, `max_num_seqs=256`,
`TTFT <= 200 ms`, `reports/h100_sxm.yaml`): a character is escaped only where Markdown would
read it as markup. report.html does not rely on them alone: sim/report/html.py renders no raw
HTML, no link but to the report's files and the web, no image but the report's own.
`one_line` is the console's: a string on one line, without a terminal's control characters.
"""

from __future__ import annotations

import re
from numbers import Number


class Md(str):
    """Markdown the project wrote: md_cell places it as it is."""

    __slots__ = ()


# control characters (tab aside) and every line boundary str.splitlines knows
_LINES = re.compile(r"\r\n|[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]")
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1b\x1f\x7f-\x84\x86-\x9f]")
_INLINE = re.compile(
    r"[\\`*\[\]|]"  # escapes, code spans, emphasis, links and images, table cells
    r"|(?<![^\W_])_|_(?![^\W_])"  # `_` that can open or close emphasis (not inside a word)
    r"|<(?=[A-Za-z/!?])"  # raw HTML, an autolink, a comment (`<=` and `< 5` stay)
    r"|&(?=#?[A-Za-z0-9]+;)"  # what would be read as an entity (`AT&T` stays)
)
# what opens a block where the text starts a line: a heading (Python-Markdown's needs no space
# after the `#`), a quote, a list item, a rule or setext underline, a fence; "-5%", "+3.1%" and
# "1.5 GB" open nothing and stay
_LEADING = re.compile(r"^(?:([#>]|[-+=](?=[-= ]|$)|~(?=~~))|(\d{1,9})([.)])(?= |$))")
_TRAILING = re.compile(r"#+$")  # the closing `#`s a heading drops
_ENTITY = {"<": "&lt;", "&": "&amp;", "=": "&#61;", "~": "&#126;"}  # not backslash-escapable


def one_line(s: object) -> str:
    """`s` on one line, for Markdown or a terminal: line breaks and tabs become spaces, other
    control characters (a terminal's escape sequences among them) U+FFFD."""
    return _CONTROL.sub("\ufffd", _LINES.sub(" ", str(s)).replace("\t", " "))


def _escape(m: re.Match) -> str:
    c = m.group(0)
    return _ENTITY.get(c, "\\" + c)


def md_inline(value: object) -> str:
    """`value` as text inside a line: nothing in it can end the line or a table's cell, or
    open a code span, emphasis, a link, an image, raw HTML or an entity."""
    return _INLINE.sub(_escape, one_line(value))


def md_text(value: object) -> str:
    """`value` as text anywhere, the start of a line included (a heading's text, a list item,
    prose): md_inline's escapes and those of a line's first characters."""
    # spaces around it are lost where it renders, and four before it would open a code block
    s = _TRAILING.sub(lambda m: "\\#" * len(m.group(0)), md_inline(value).strip(" "))
    lead = _LEADING.match(s)
    if lead and lead.group(1):
        s = _escape(lead) + s[1:]
    elif lead:
        s = lead.group(2) + "\\" + lead.group(3) + s[lead.end() :]
    return s


def md_cell(value: object) -> str:
    """A table cell: a number or `Md` as it is, any other value escaped as md_inline does."""
    if isinstance(value, Md):
        return str(value)
    if isinstance(value, Number) and not isinstance(value, bool):
        return str(value)
    return md_inline(value)


def md_row(cells) -> str:
    """`| a | b |`, every cell through md_cell."""
    return "| " + " | ".join(md_cell(c) for c in cells) + " |"


def md_code(value: object) -> str:
    """`value` as a code span: fenced by one backtick more than its longest run of them. A
    value with `|` is md_text instead: GitHub splits a table's row at a `|` inside a code span,
    and Python-Markdown shows the backslash that would keep it."""
    s = one_line(value)
    if "|" in s or not s.strip():
        return md_text(s)
    runs = [len(r) for r in re.findall(r"`+", s)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def md_fence(code: str, lang: str = "") -> list[str]:
    """A fenced code block holding `code` as it is: its fence one backtick longer than any run
    of them in it, so no line of it closes the block early (GitHub and Python-Markdown alike)."""
    code = _CONTROL.sub("\ufffd", code)
    runs = [len(r) for r in re.findall(r"`+", code)]
    fence = "`" * max(3, max(runs, default=0) + 1)
    return [fence + lang, *code.split("\n"), fence]
