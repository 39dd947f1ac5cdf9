"""Comments and docstrings give the reason, never an issue number: the issues live outside
the repository, so "(issue #19)" tells a reader of the code nothing that a few words would
not say better. setup.py and every Python file of the node, the client and the Spark
connector are scanned: their comments (tokenize) and docstrings (ast); string literals
that are neither are the program's own text and are not looked at."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("disq", "clients", "spark")
# "issue #19", "issues #18 and #19", "PR #114", "(#19)", "(#19, ...)"
ISSUE_NUMBER = re.compile(r"\b(?:issues?|prs?|pull requests?)\s*#\s*\d+|\(#\d+\b",
                          re.IGNORECASE)
DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def python_files() -> list[Path]:
    """setup.py and the Python sources under SCANNED, without caches and hidden
    directories."""
    return [ROOT / "setup.py"] + sorted(
        path for top in SCANNED for path in (ROOT / top).rglob("*.py")
        if not any(part.startswith(".") or part == "__pycache__"
                   for part in path.relative_to(ROOT).parts))


def comments_and_docstrings(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring of a module's source."""
    found = [(token.start[0], token.string)
             for token in tokenize.generate_tokens(io.StringIO(source).readline)
             if token.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, DOCUMENTED):
            docstring = ast.get_docstring(node, clean=False)
            if docstring is not None:
                found.append((node.body[0].lineno, docstring))
    return found


def issue_citations(source: str) -> list[tuple[int, str]]:
    """(line, citation) of every issue number cited in a comment or docstring; a citation
    cut by a line break is found too, on the line where it starts. A source where the
    pattern matches nowhere is not parsed (most files: the scan stays fast)."""
    if not ISSUE_NUMBER.search(source):
        return []
    return [(line + text.count("\n", 0, match.start()), " ".join(match.group(0).split()))
            for line, text in comments_and_docstrings(source)
            for match in ISSUE_NUMBER.finditer(text)]


def test_the_pattern_finds_the_forms_once_used() -> None:
    for cited in ("issue #23", "Issue #19's fields", "issues #18 and #19", "issue  # 7",
                  "(#19)", "(#19, dead letters)", "PR #114", "Disque's issue #212"):
        assert ISSUE_NUMBER.search(cited), cited
    for plain in ("port 7711", "color #333", "# 2 nodes", "jobs #1 to #5", "(a #define)"):
        assert not ISSUE_NUMBER.search(plain), plain


def test_comments_and_docstrings_are_found_but_code_strings_are_not() -> None:
    source = ('"""Module (issue #1)."""\n'
              'class A:\n'
              '    """Class (issue #2)."""\n'
              '    def f(self) -> str:  # a comment (issue #3)\n'
              '        """Method: a line,\n'
              '        then the next (issue\n'
              '        #4)."""\n'
              '        return "a reply that says issue #5"\n')
    assert issue_citations(source) == [(4, "issue #3"), (1, "issue #1"), (3, "issue #2"),
                                       (6, "issue #4")]


def test_no_comment_or_docstring_cites_an_issue_number() -> None:
    files = python_files()
    assert len(files) > 100, "the scan found too few files: is ROOT right?"
    cited = [f"{path.relative_to(ROOT)}:{line}: {citation}" for path in files
             for line, citation in issue_citations(path.read_text(encoding="utf-8"))]
    assert not cited, ("say the reason in a few words instead of the issue number "
                       "(issues live outside the repository):\n" + "\n".join(cited))
