"""What scripts/architecture.py and scripts/check-imports.py both read from Swift sources: one definition of an
import line, so the module graph and the unused-import check can never disagree about what a file imports."""
import re

# `import X`, `@testable import X`, `public import X`, `package import X`: group 1 is `@testable ` or empty, group 2
# the module. (`@_exported import` is read apart: it re-exports, it does not use.)
IMPORT = re.compile(r"^\s*(@testable\s+)?(?:public\s+|package\s+)?import\s+(\w+)\s*$", re.M)


def imports(text):
    """(testable, module) for each import line of `text`, in order."""
    return [(bool(match.group(1)), match.group(2)) for match in IMPORT.finditer(text)]
