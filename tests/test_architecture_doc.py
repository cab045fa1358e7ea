"""``docs/architecture.md`` describes the code as built (issue 25): every module or folder of corral it
names by path exists, and every package of ``runner`` is named in it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
PATH = re.compile(r"(?<![\w/.-])(runner/[\w/]*[\w]+(?:\.py|/)?)")


def named_paths() -> set[str]:
    return {m.group(1) for m in PATH.finditer(DOC.read_text(encoding="utf-8"))}


def test_every_path_the_architecture_names_exists() -> None:
    missing = sorted(p for p in named_paths() if not (ROOT / p).exists())
    assert missing == [], f"docs/architecture.md names paths that are not in the tree: {missing}"


def test_every_package_is_named_in_the_architecture() -> None:
    named = {p.rstrip("/").removesuffix(".py") for p in named_paths()}
    packages = sorted(
        str(init.parent.relative_to(ROOT))
        for init in (ROOT / "runner").rglob("__init__.py")
        if "__pycache__" not in init.parts
    )
    unnamed = [p for p in packages if p not in named and not any(n.startswith(p + "/") for n in named)]
    assert unnamed == [], f"packages docs/architecture.md never names: {unnamed}"


def test_the_check_sees_paths() -> None:
    assert {"runner/service/plans.py", "runner/registry.py"} <= named_paths()
