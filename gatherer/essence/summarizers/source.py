"""Source-code summarizers: C (function definitions, includes, the leading comment) and
Python (functions, classes, imports, the module docstring).

C is read with regular expressions over the code once comments, strings and preprocessor
lines are blanked and function bodies folded away, so only top-level definitions remain.
Python is read with ``ast``; source that does not parse (Python 2, say) falls back to
matching ``def``, ``class`` and ``import`` lines.
"""

from __future__ import annotations

import ast
import inspect
import re

from gatherer.essence.document import Document, Parts
from gatherer.essence.options import EssenceOptions
from gatherer.essence.summarizers.text_tools import attributes, decode, leading_lines

# --- C -------------------------------------------------------------------------------------

# Comments, and the strings and character constants in which "/*" is not a comment.
_C_COMMENT_OR_STRING = re.compile(
    r"/\*.*?(?:\*/|\Z)|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"?|'(?:\\.|[^'\\\n])*'?", re.DOTALL
)
_C_STRING = re.compile(r"\"(?:\\.|[^\"\\\n])*\"?|'(?:\\.|[^'\\\n])*'?", re.DOTALL)
_C_PREPROCESSOR = re.compile(r"^[ \t]*#(?:\\.|[^\n\\])*", re.MULTILINE | re.DOTALL)
_C_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*[<\"]([^>\"\n]+)[>\"]", re.MULTILINE)
_C_LEADING_COMMENT = re.compile(r"\s*(/\*.*?\*/|(?://[^\n]*(?:\n|\Z)\s*)+)", re.DOTALL)
# Blocks whose contents are top-level too: extern "C" { ... } and C++ namespaces.
_C_OPEN_SCOPE = re.compile(r"\b(?:extern\s*\"\"|namespace(?:\s+[\w:]+)?)\s*\{")
_C_BRACE = re.compile(r"[{}]")
# name(parameters) then C++ qualifiers or K&R parameter declarations, then the body's "{".
# Parameters may hold one level of parentheses: function-pointer parameters. The K&R part
# splits its text at each ";" in one way only, so a header full of declarations cannot make
# a failing match backtrack exponentially.
_C_FUNCTION = re.compile(
    r"((?:[A-Za-z_]\w*\s*::\s*)*~?[A-Za-z_]\w*)\s*\((?:[^;{}()]|\([^;{}()]*\))*\)\s*"
    r"(?:(?:const|noexcept|override|final)\b\s*)*(?:[^;{}()=]*;)*\s*\{"
)
_C_NOT_FUNCTIONS = frozenset(
    {"if", "while", "for", "switch", "return", "sizeof", "do", "else", "case", "catch"}
)


def summarize_c(document: Document, options: EssenceOptions) -> Parts:
    """``Functions`` defined, ``Includes`` and the leading comment as ``Partial-Text``."""
    text = decode(document.content, document.charset)
    code = _C_COMMENT_OR_STRING.sub(_blank_comment, text)
    includes = dict.fromkeys(name.strip() for name in _C_INCLUDE.findall(code))
    code = _C_PREPROCESSOR.sub(" ", _C_STRING.sub('""', code))
    top_level = _fold_bodies(_C_OPEN_SCOPE.sub(" ", code))
    functions = dict.fromkeys(
        "".join(name.split())  # "Foo :: bar" -> "Foo::bar"
        for name in _C_FUNCTION.findall(top_level)
        if name.rpartition(":")[2] not in _C_NOT_FUNCTIONS
    )
    leading = _C_LEADING_COMMENT.match(text)
    return Parts(
        attributes=attributes(
            ("Functions", "\n".join(functions)),
            ("Includes", "\n".join(includes)),
            (
                "Partial-Text",
                leading_lines(_uncomment(leading.group(1)), options.abstract_bytes)
                if leading
                else b"",
            ),
        )
    )


def _blank_comment(match: re.Match[str]) -> str:
    """A comment becomes a space; a string stays, for ``#include "file.h"``."""
    found = match.group()
    return " " if found.startswith("/") else found


def _fold_bodies(code: str) -> str:
    """``code`` with everything inside top-level braces removed: ``f(x) { ... }`` becomes
    ``f(x) {}``. Unbalanced closing braces are ignored."""
    kept: list[str] = []
    depth = 0
    start = 0
    for brace in _C_BRACE.finditer(code):
        if brace.group() == "{":
            if depth == 0:
                kept.append(code[start : brace.end()])
            depth += 1
        elif depth > 0:
            depth -= 1
            if depth == 0:
                start = brace.start()
    if depth == 0:
        kept.append(code[start:])
    return "".join(kept)


def _uncomment(comment: str) -> str:
    """The text of a comment block without its ``/*``, ``*/``, ``*`` and ``//`` marks."""
    return "\n".join(
        line.strip().lstrip("/*").rstrip("*/").strip() for line in comment.splitlines()
    )


# --- Python --------------------------------------------------------------------------------

# Bigger modules are generated code; their syntax trees would cost too much memory.
_PY_MAX_PARSE_CHARS = 1 << 20
_PY_DEF = re.compile(r"^[ \t]*(?:async[ \t]+)?def[ \t]+(\w+)", re.MULTILINE)
_PY_CLASS = re.compile(r"^[ \t]*class[ \t]+(\w+)", re.MULTILINE)
_PY_IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+import\b|import[ \t]+([\w.]+(?:[ \t]*,[ \t]*[\w.]+)*))",
    re.MULTILINE,
)
_PY_DOCSTRING = re.compile(r"(?:\s*#[^\n]*)*\s*[rRuU]?(\"\"\"|''')(.*?)\1", re.DOTALL)


def summarize_python(document: Document, options: EssenceOptions) -> Parts:
    """``Functions`` (methods and nested functions as ``Outer.name``), ``Classes``,
    ``Imports`` (module names) and the module docstring as ``Partial-Text``."""
    text = decode(document.content, document.charset)
    module = _parse(text)
    functions, classes, imports, docstring = (
        _read_tree(module) if module is not None else _read_lines(text)
    )
    return Parts(
        attributes=attributes(
            ("Functions", "\n".join(functions)),
            ("Classes", "\n".join(classes)),
            ("Imports", "\n".join(dict.fromkeys(imports))),
            ("Partial-Text", leading_lines(docstring, options.abstract_bytes)),
        )
    )


def _parse(text: str) -> ast.Module | None:
    """The syntax tree of ``text``, or None if it is too big or does not parse."""
    if len(text) > _PY_MAX_PARSE_CHARS:
        return None
    try:
        return ast.parse(text)
    # MemoryError and RecursionError are how CPython's parser reports deeply nested code.
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _read_tree(module: ast.Module) -> tuple[list[str], list[str], list[str], str]:
    """Functions, classes and imports in source order, and the docstring, from a parse."""
    functions: list[str] = []
    classes: list[str] = []
    imports: list[str] = []
    # Depth first with an explicit stack: nesting deep enough to parse cannot overflow it.
    stack: list[tuple[str, ast.AST]] = [("", node) for node in reversed(module.body)]
    while stack:
        prefix, node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            functions.append(prefix + node.name)
            prefix = f"{prefix}{node.name}."
        elif isinstance(node, ast.ClassDef):
            classes.append(prefix + node.name)
            prefix = f"{prefix}{node.name}."
        elif isinstance(node, ast.Import):
            imports.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imports.append("." * node.level + (node.module or ""))
        # Expressions hold no definitions (lambdas are not named); skipping them saves work.
        children = [c for c in ast.iter_child_nodes(node) if not isinstance(c, ast.expr)]
        stack.extend((prefix, child) for child in reversed(children))
    return functions, classes, imports, ast.get_docstring(module) or ""


def _read_lines(text: str) -> tuple[list[str], list[str], list[str], str]:
    """What ``_read_tree`` finds, from ``def``, ``class`` and ``import`` lines."""
    imports: list[str] = []
    for module, names in _PY_IMPORT.findall(text):
        imports.extend([module] if module else (name.strip() for name in names.split(",")))
    docstring = _PY_DOCSTRING.match(text)
    return (
        _PY_DEF.findall(text),
        _PY_CLASS.findall(text),
        imports,
        inspect.cleandoc(docstring.group(2)) if docstring else "",
    )
