"""The docs build's hook (docs/hooks/reference_check.py), imported as a module for tests."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

HOOKS = Path(__file__).resolve().parent.parent / "docs" / "hooks"


def reference_check() -> ModuleType:
    sys.path.insert(0, str(HOOKS))
    try:
        import reference_check
    finally:
        sys.path.remove(str(HOOKS))
    return reference_check
