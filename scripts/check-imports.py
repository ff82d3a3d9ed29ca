#!/usr/bin/env python3
"""Every import of one of this package's modules is used: the file names at least one symbol the module declares
public or package (a type, a function, a constant, or a member its extensions add). The build's own check
(`--explicit-target-dependency-import-check error`, scripts/test.sh) covers the other half: every import declared.

A name-level check, not the compiler's: it cannot be fooled into passing by an import nothing names, and it
reads only our modules (Foundation and the ecosystem's packages are the compiler's business).

Usage: scripts/check-imports.py [--list]   (exit 1 and one line per unused import)
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swift_sources import imports as swift_imports  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = os.path.join(ROOT, "Sources")
TESTS = os.path.join(ROOT, "Tests")
DECLARATION = re.compile(
    r"^\s*(?:@\w+(?:\([^)]*\))?\s+)*(?:public|package|open)\s+(?:(?:static|final|class|override|mutating|nonisolated|indirect|convenience|required|lazy|weak|unowned|dynamic)\s+)*"
    r"(?:struct|enum|class|actor|protocol|typealias|func|let|var|case|init|subscript)\s*([A-Za-z_]\w*)?",
    re.M)
# What a `@testable import` reaches: internal declarations too (no access modifier, or internal).
INTERNAL_TYPE = re.compile(r"^\s*(?:@\w+(?:\([^)]*\))?\s+)*(?:(?:public|package|open|internal)\s+)?(?:final\s+|indirect\s+)?(?:struct|enum|class|actor|protocol|typealias)\s+([A-Za-z_]\w*)", re.M)
INTERNAL_DECLARATION = re.compile(
    r"^\s*(?:@\w+(?:\([^)]*\))?\s+)*(?:(?:public|package|open|internal)\s+)?(?:(?:static|final|class|override|mutating|nonisolated|indirect|convenience|required|lazy|weak|unowned|dynamic)\s+)*"
    r"(?:struct|enum|class|actor|protocol|typealias|func|let|var|case|init|subscript)\s*([A-Za-z_]\w*)?",
    re.M)
GENERATED = os.sep + "Generated" + os.sep


def swift_files(directory):
    for folder, _, names in os.walk(directory):
        for name in names:
            if name.endswith(".swift"):
                yield os.path.join(folder, name)


TYPE = re.compile(r"^(?:@\w+(?:\([^)]*\))?\s+)*(?:public|package|open)\s+(?:final\s+|indirect\s+)?(?:struct|enum|class|actor|protocol|typealias)\s+([A-Za-z_]\w*)", re.M)


def module_symbols(testable=False):
    """Each of our modules' names another file could spell: its public and package types, its top-level functions
    and constants, and the members its extensions add to other modules' types (`store.console`). Members of its own
    types are reached through those types' names, so they are not counted (a common member name such as `text`
    would otherwise make any import look used)."""
    symbols = {}
    for module in sorted(os.listdir(SOURCES)):
        files = [open(path, encoding="utf-8").read() for path in swift_files(os.path.join(SOURCES, module))]
        type_pattern, declaration = (INTERNAL_TYPE, INTERNAL_DECLARATION) if testable else (TYPE, DECLARATION)
        own_types = {match.group(1) for text in files for match in type_pattern.finditer(text)}
        names = set(own_types)
        for text in files:
            extended = None
            for line in text.splitlines():
                if not line.startswith((" ", "\t")) and line.strip():
                    match = re.match(r"^(?:public\s+|package\s+)?extension\s+([\w.]+)", line)
                    extended = match.group(1).split(".")[-1] if match else None
                    top = declaration.match(line)
                    if top and top.group(1) and not match:
                        names.add(top.group(1))
                    continue
                if extended and extended not in own_types:
                    member = declaration.match(line)
                    if member and member.group(1):
                        names.add(member.group(1))
                    elif member and re.search(r"\binit\b", line):
                        # An initializer added to another module's type is spelled by that type's name.
                        names.add(extended)
                    if re.match(r"^\s*(?:public|package)\s+(?:static\s+)?func\s+[^\w\s(]+", line):
                        names.add("<operator>")
        if names:
            symbols[module] = names
    # A module that re-exports another (`@_exported import`) answers for its names too.
    for module in list(symbols):
        for path in swift_files(os.path.join(SOURCES, module)):
            for match in re.finditer(r"^@_exported\s+import\s+(\w+)", open(path, encoding="utf-8").read(), re.M):
                symbols[module] |= symbols.get(match.group(1), set())
    return symbols


def strip_comments_and_strings(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return text


def main():
    symbols = module_symbols()
    testable = module_symbols(testable=True)
    unused = []
    for directory in (SOURCES, TESTS):
        for path in sorted(swift_files(directory)):
            if GENERATED in path:
                continue
            text = open(path, encoding="utf-8").read()
            body = strip_comments_and_strings(text)
            words = set(re.findall(r"[A-Za-z_]\w*", re.sub(r"^\s*(?:@testable\s+|@_spi\(\w+\)\s+)?(?:public\s+|package\s+)?import\s+\w+", "", body, flags=re.M)))
            for is_testable, module in swift_imports(text):
                names = (testable if is_testable else symbols).get(module)
                if names is None or "<operator>" in names:
                    continue
                if not (names & words):
                    unused.append(f"{os.path.relpath(path, ROOT)}: import {module} is not used")
    # The core library's `BookSeeding` SPI takes a payload as verified without checking it: only the seed tool's
    # module may import it (docs/scale.md, "A synthetic book"); a service that did would skip verification.
    for directory in (SOURCES, TESTS, os.path.join(ROOT, "Benchmarks", "Sources")):
        for path in sorted(swift_files(directory)):
            if os.path.relpath(path, SOURCES).startswith("BookSeeding" + os.sep):
                continue
            if re.search(r"^\s*@_spi\(BookSeeding\)\s+import", open(path, encoding="utf-8").read(), re.M):
                unused.append(f"{os.path.relpath(path, ROOT)}: only Sources/BookSeeding may import the BookSeeding SPI")
    for line in unused:
        print(line)
    if unused:
        print(f"{len(unused)} unused imports of this package's modules", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
