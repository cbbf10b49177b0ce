"""A user's strings in report.md, report.html and the console's tables are text, never markup
(issue 42, 2.3): a case id `<script>alert(1)</script>` is no script in report.html, an id with
`|` no extra column in report.md's table, and any string at all, put through the report path
(md_table, md_row, md_text, md_code, render_html), gives neither."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sim.report.escape import Md, md_code, md_fence, md_row, md_text, one_line
from sim.report.figures import plot_text
from sim.report.html import md_table, render_html
from sim.scenarios.validate.report import plot_metric
from tests.test_cli import sim

SCRIPT = "<script>alert(1)</script>"
PIPES = "a|b|c"
# what a hostile string is made of: Markdown's and HTML's characters, line breaks, controls
HOSTILE = st.text(
    alphabet=st.sampled_from(list("<>/&;#|`*_[]()!\\-+=~.:1 aZé\n\r\t\x00\x02\x03\x1b\u2028"))
    | st.characters(),
    max_size=40,
)


class Tags(HTMLParser):
    """The elements of a page's body in order, each with its attributes and text."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.text: list[list[str]] = []  # per element opened, the text right inside it
        self.open: list[int] = []  # the elements open, by index

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self.text.append([])
        if tag not in ("img", "br", "hr"):
            self.open.append(len(self.tags) - 1)

    def handle_endtag(self, tag):
        if self.open:
            self.open.pop()

    def handle_data(self, data):
        if self.open:
            self.text[self.open[-1]].append(data)


def body_tags(page: str) -> Tags:
    parser = Tags()
    parser.feed(page[page.index("<body>") + len("<body>") : page.index("</body>")])
    return parser


def cells(page: str) -> list[list[str]]:
    """The text of each body row's cells (the header rows' left out)."""
    bodies = "".join(re.findall(r"<tbody>(.*?)</tbody>", page, re.S))
    rows = re.findall(r"<tr>(.*?)</tr>", bodies, re.S)
    return [[html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", r, re.S)] for r in rows]


def case(cid: str) -> dict:
    return {
        "id": cid,
        "engine": "vllm@0.10.2",
        "hardware": "h100-sxm",
        "model": "llama-3.1-8b",
        "cost_profile": "prior",
        "workload": {
            "closed_loop": {"concurrency": 2, "num_requests": 4, "input_len": 32, "output_len": 4}
        },
        "measured": {"mean_tpot_ms": 5.0},
    }


def test_case_ids_with_a_script_and_pipes_are_text(tmp_path):
    """The issue's two ids, end to end: report.html has no script element and shows the id as
    it is; report.md's worst-cases rows keep their six columns and read the id back."""
    path = tmp_path / "cases.yaml"
    hostile = {"id": "[x](javascript:alert(2))", "model": "nope<img src=x onerror=alert(3)>"}
    cases = [case(SCRIPT), case(PIPES), case("ok") | hostile]
    path.write_text(yaml.safe_dump({"cases": cases}))
    out = tmp_path / "run"
    r = sim("scenario=validate", f"validate.cases={path}", f"hydra.run.dir={out}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    page = (out / "report.html").read_text()
    tags = body_tags(page)
    assert not [t for t, _ in tags.tags if t in ("script", "a")], tags.tags
    assert not [a for t, a in tags.tags if t == "img" and not a["src"].startswith("data:")]
    assert "onerror" not in [k for _, a in tags.tags for k in a]
    worst = [c for c in cells(page) if len(c) == 6 and c[1] == "mean_tpot_ms"]
    assert sorted(c[0] for c in worst) == sorted([SCRIPT, PIPES])
    report = (out / "report.md").read_text()
    worst_md = report[report.index("## Worst cases") :].split("\n\n")[1].splitlines()[2:]
    assert len(worst_md) == 2 and all(_columns(line) == 6 for line in worst_md), worst_md
    failed = [c for c in cells(page) if len(c) == 2]  # the case that could not be simulated
    assert failed[0][0] == hostile["id"] and hostile["model"] in failed[0][1]


def _columns(row: str) -> int:
    """The cells of a Markdown table row, as GitHub and Python-Markdown split it: at a `|`
    that no backslash escapes (a backslash escapes the next character, itself included)."""
    return len(re.findall(r"(?<!\\)(?:\\\\)*\|", row)) - 1


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(HOSTILE, min_size=3, max_size=3), min_size=1, max_size=3))
def test_any_cell_is_one_cell_of_text(rows):
    """md_table: every row has its columns, in report.md and report.html, each cell shows the
    string as it is (on one line), and nothing else is made of it."""
    text = md_table(rows, ("a", "b", "c"))
    lines = text.splitlines()
    assert len(lines) == len(rows) + 2
    assert all(_columns(line) == 3 for line in lines)
    page = render_html(text, base=_nowhere())
    tags = body_tags(page)
    assert {t for t, _ in tags.tags} <= {"table", "thead", "tbody", "tr", "th", "td"}
    shown = cells(page)
    assert shown == [[one_line(c).strip(" ") for c in row] for row in rows]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(HOSTILE)
def test_any_string_in_prose_opens_nothing(s):
    """md_text at a line's start, inside a line, in a heading and in a list item: no heading,
    link, image, code, emphasis, list, quote, rule, raw HTML or script comes of it."""
    x = md_text(s)
    assume(x.strip())  # an empty paragraph (or one of spaces) is no paragraph
    text = f"# Title {x}\n\n{x}\n\nBefore {x} after.\n\n- item {x}\n\n{x}\n"
    tags = body_tags(render_html(text, base=_nowhere()))
    assert [t for t, _ in tags.tags] == ["h1", "p", "p", "ul", "li", "p"], (s, x, tags.tags)
    shown = one_line(s).strip(" ")
    texts = ["".join(t) for t in tags.text]
    assert texts[0] == f"Title {shown}".rstrip() and texts[2] == f"Before {shown} after."


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(HOSTILE)
def test_any_string_as_code_or_fenced_is_code(s):
    """md_code is one code span of the string (or md_text's text where a code span cannot hold
    it); md_fence one code block whatever backticks the string holds."""
    page = render_html(f"Table: {md_code(s)}.\n", base=_nowhere())
    tags = [t for t, _ in body_tags(page).tags]
    assert tags in (["p", "code"], ["p"]), tags
    block = "\n".join(["", *md_fence(s, "bash"), "", "after"])
    tags = [t for t, _ in body_tags(render_html(block, base=_nowhere())).tags]
    assert tags == ["pre", "code", "p"], (s, tags)


def test_the_renderer_drops_raw_html_and_unsafe_urls(tmp_path):
    """Where a writer missed a string: raw HTML is text, a javascript: link (even spelt with
    an entity or a tab) only its text, and an image from outside the report's folder is not
    embedded (the project's own links and images stay)."""
    (tmp_path / "run").mkdir()
    (tmp_path / "secret.png").write_bytes(b"\x89PNG secret")
    (tmp_path / "run" / "plot.png").write_bytes(b"\x89PNG plot")
    text = (
        "<script>alert(1)</script>\n\n<div onclick=x>y</div>\n\n"
        "[a](javascript:alert(1)) [b](java&#9;script:x) [c](JaVaScRiPt:x) [d](data:text/html,x) "
        "[e](sweep.csv) [f](https://ui.perfetto.dev) ![g](../secret.png) ![h](plot.png) "
        "![i](data:text/html,x)\n"
    )
    page = render_html(text, tmp_path / "run")
    tags = body_tags(page).tags
    links = [a.get("href") for t, a in tags if t == "a"]
    assert links == ["sweep.csv", "https://ui.perfetto.dev"]
    images = [a["src"] for t, a in tags if t == "img"]
    assert images == ["../secret.png", "data:image/png;base64,iVBORyBwbG90"]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script" not in page[9:]
    assert "<div" not in page


def test_ordinary_names_are_left_as_they_are():
    """The escapes touch only what Markdown would read as markup: the committed reports' names,
    numbers and comparisons stay byte for byte."""
    for name in (
        "llama-3.1-8b", "max_num_seqs=256", "TTFT <= 200 ms", "-60.2%", "+39.0%", "1.5 GB",
        "meta-llama/Llama-3.1-8B-Instruct", "NVIDIA H100 80GB HBM3", "vllm@0.10.2",
        "reports/h100_sxm.yaml", "AT&T", "p50/p99", "prompt 2044 + output 302 tokens",
    ):  # fmt: skip
        assert md_text(name) == name and md_row([name]) == f"| {name} |"
    assert md_code("h100-sxm") == "`h100-sxm`"
    assert md_row([Md("**no**"), 3, 0.5]) == "| **no** | 3 | 0.5 |"
    assert md_text("# x") == "\\# x" and md_text("1. x") == "1\\. x"
    assert md_text("_a_ *b*") == "\\_a\\_ \\*b\\*"


def test_show_engine_prints_a_gpus_markup_as_text(tmp_path):
    """scenario=show_engine's console table: a GPU display name that is rich markup ("[/]")
    printed as it is (it raised rich's MarkupError, a traceback), and escaped in settings.md."""
    gpu = yaml.safe_load((_repo() / "hardware" / "h100-sxm.yaml").read_text())
    gpu["display_name"] = "[/] [b]H100 | <b>x</b>"
    (tmp_path / "gpu.yaml").write_text(yaml.safe_dump(gpu))
    out = tmp_path / "run"
    gpu_file = tmp_path / "gpu.yaml"
    r = sim("scenario=show_engine", f"hardware={gpu_file}", f"hydra.run.dir={out}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "[/] [b]H100 | <b>x</b>" in r.stdout
    title = (out / "settings.md").read_text().splitlines()[0]
    assert title.endswith("\\[/\\] \\[b\\]H100 \\| &lt;b>x&lt;/b>"), title


def test_a_gpu_named_like_mathtext_is_drawn_as_text(tmp_path):
    """A case's hardware (a GPU file's path) with `$\\frac$` in the validation plot's legend:
    matplotlib read it as mathtext and raised ValueError, a traceback after the simulations."""
    frame = pd.DataFrame(
        {"metric": ["mean_tpot_ms"] * 2, "measured": [5.0, 6.0], "predicted": [5.5, 6.6],
         "band_low": [float("nan")] * 2, "band_high": [float("nan")] * 2,
         "hardware": ["/gpus/h$\\frac$.yaml", "h100-sxm"]}
    )  # fmt: skip
    assert plot_metric(frame, "mean_tpot_ms", tmp_path / "p.png") == "p.png"
    assert plot_text("h$\\frac$ $5") == "h\\$\\frac\\$ \\$5"


def _nowhere() -> Path:
    """The renderer's base: a folder with no files."""
    return Path("/nonexistent-report-folder")


def _repo() -> Path:
    return Path(__file__).resolve().parent.parent
