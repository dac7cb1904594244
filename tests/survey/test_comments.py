"""Comments taken out of manifests before the survey reads URLs: Gradle's (Groovy and
Kotlin) and XML's, with every line kept where it was and strings left alone."""

from __future__ import annotations

import time

from sandbridge.survey.comments import without_c_comments, without_xml_comments

GRADLE = """repositories {
  /* maven { url "https://block.test/m2" }
     still the comment */ maven { url "https://after-block.test/m2" }
  maven { url "https://slash-in-string.test/*x*/" } // https://line-comment.test
  exclude "**/*.tmp"; maven { url 'https://after-glob.test/m2' }
  def s = \"\"\"a string /* that is
  no comment */\"\"\"; maven { url "https://after-triple.test" }
  x = 'it\\'s' // https://after-escape-comment.test
  y = "unclosed /* at the line's end
  maven { url "https://next-line.test" }//https://tight-comment.test
}
"""


def test_gradle_comments_are_blanked_and_strings_kept_line_for_line() -> None:
    out = without_c_comments(GRADLE)
    lines = out.splitlines()
    assert len(lines) == len(GRADLE.splitlines())
    for kept in (
        "after-block.test",
        "slash-in-string.test/*x*/",
        "after-glob.test",
        "after-triple.test",
        "next-line.test",
    ):
        assert kept in out, kept
    for gone in ('block.test/m2"', "line-comment.test", "escape-comment", "tight-comment"):
        assert gone not in out.replace("after-block.test/m2", ""), gone
    assert lines[2].strip() == 'maven { url "https://after-block.test/m2" }'
    assert lines[9].strip() == 'maven { url "https://next-line.test" }'


def test_an_unclosed_block_comment_runs_to_the_end() -> None:
    out = without_c_comments('a\n/* maven { url "https://x.test" }\nb\n')
    assert out == "a\n\n\n"


def test_xml_comments_are_blanked_line_for_line() -> None:
    text = "<a>\n<!-- <url>https://c.test</url>\n-->\n<url>https://u.test</url>\n<!-- open"
    assert without_xml_comments(text) == "<a>\n\n\n<url>https://u.test</url>\n"


def test_hostile_texts_take_linear_time() -> None:
    """Megabytes of openers, quotes and escapes: each character is passed once (a
    quadratic scan would take minutes here)."""
    size = 4 * 1024 * 1024
    texts = [
        "/*" * (size // 2),
        "/" * size,
        '"' * size,
        "'\\" * (size // 2),
        ("x = 'unclosed" + "a" * 1000 + "\n") * (size // 1014),
        '"""' + "a" * size,
        "<!--" * (size // 4),
    ]
    start = time.monotonic()
    for text in texts:
        without_c_comments(text)
        without_xml_comments(text)
    assert time.monotonic() - start < 20
