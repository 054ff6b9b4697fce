"""Which tables and code blocks of the docs site scroll sideways at 1280 px (issue 47's measure, every page).

    python benchmarks/site_tables.py              # build the site, load each page, list what scrolls
    python benchmarks/site_tables.py --width 1440

Builds the site as `make docs-build` does (strict, MathJax from `make mathjax`'s .cache/) into a temporary
folder, loads every page in headless Chromium with the network off, and prints, per page, the tables and
code blocks whose content is wider than their box (the measurement of `tests/test_pages.py`, which holds
the pages it names to none). Needs `chromium` on the PATH.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        allow_abbrev=False, prog="python benchmarks/site_tables.py", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--width", type=int, default=1280, help="window width in px (default 1280)")
    a = p.parse_args(argv)
    sys.path.insert(0, str(ROOT / "tests"))
    import test_pages  # the measurement itself (measure_site), one definition

    if test_pages.CHROMIUM is None:
        print("site_tables: no chromium on the PATH", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT / "src")}
        cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(site)]
        subprocess.run(cmd, cwd=ROOT, env=env, check=True)
        pages = sorted(
            str(f.parent.relative_to(site)) for f in site.rglob("index.html") if f.parent != site
            and not any(part in ("assets", "search") for part in f.relative_to(site).parts)
        )  # fmt: skip
        wide_pages = wide_tables = 0
        for page in pages:
            m = test_pages.measure_site(site, page, Path(tmp), width=a.width)
            if m["scroll"] > a.width or m["tables"] or m["code"]:
                wide_pages += 1
                wide_tables += len(m["tables"])
                print(f"{page}: page {m['scroll']} px; tables scrolling {len(m['tables'])}, code blocks "
                      f"{len(m['code'])}")  # fmt: skip
                for t in m["tables"]:
                    print("    table: " + " | ".join(t.split("\n")[:5]))
        print(f"{len(pages)} pages at {a.width} px: {wide_tables} tables scroll sideways, on {wide_pages} "
              "pages")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
