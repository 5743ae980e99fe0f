"""Size budgets (design.md §11.14): fail when a file passes its line cap without a waiver.

Caps: model files about 300 lines (hard line 320), other modules 500, shaders 250. A waiver is a line `# size-waiver: <why>` in the
file's first 5 lines.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# design.md says "about 300" for a model file: 320 is the hard line
CAPS = [("blazr/models/", 320), ("shaders/", 250), ("blazr/", 500)]


def cap_for(rel: str) -> int | None:
    for prefix, cap in CAPS:
        if rel.startswith(prefix):
            return cap
    return None


def main() -> int:
    over = []
    for path in sorted(list(ROOT.glob("blazr/**/*.py")) + list(ROOT.glob("shaders/**/*.wgsl"))):
        rel = path.relative_to(ROOT).as_posix()
        lines = path.read_text(encoding="utf-8").splitlines()
        cap = cap_for(rel)
        waived = any("size-waiver:" in line for line in lines[:5])
        if cap and len(lines) > cap and not waived:
            over.append(f"{rel}: {len(lines)} lines (cap {cap})")
    for line in over:
        print("over size budget:", line)
    print(f"size check: {len(over)} file(s) over budget")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
