"""MkDocs hooks of the docs site (mkdocs.yml ``hooks:``).

The docs' examples are run by tests/integration/test_docs.py, steered by markers written into the
Markdown: ``<!-- doc-test: skip: REASON -->`` before a block, ``# doc-test: exit=N`` after a
command line. They are for the test harness, not for readers: the site drops them from every
page before it is rendered (the code lines keep everything else).
"""

from __future__ import annotations

import re

# A whole-line HTML comment marker, with the line itself.
_MARKER_LINE = re.compile(r"^[ \t]*<!-- doc-test:[^>]*-->[ \t]*\n", re.M)
# A trailing "# doc-test: ..." comment on a command or code line, with the blanks before it.
_MARKER_TAIL = re.compile(r"[ \t]*# doc-test:[^\n]*", re.M)


def strip_doc_test_markers(markdown: str) -> str:
    """``markdown`` without its doc-test markers."""
    return _MARKER_TAIL.sub("", _MARKER_LINE.sub("", markdown))


def on_page_markdown(markdown: str, **kwargs: object) -> str:
    return strip_doc_test_markers(markdown)
