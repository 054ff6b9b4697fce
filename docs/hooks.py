"""MkDocs hook: serve the figures under results/ and MathJax without copying them into docs/.

Every `results/<folder>/<name>.png` becomes the site file `assets/results/<folder>/<name>.png`, so a page
shows a measured figure with `![...](../assets/results/real-model/recall.png)` (from docs/results/*.md)
while the file itself stays where the run wrote it.

MathJax (npm's `mathjax` 3, unpacked into the git-ignored `.cache/mathjax/` by `make mathjax`, which
`make docs-build` runs) becomes `assets/mathjax/`: its script and fonts are served from the site, so the
equations render with no network. Without it the build stops and says how to fetch it.

With Material's offline plugin on (`make docs-offline`, `OFFLINE=true`: a site to open from file://), the
iframe-worker shim the plugin's search needs (npm's `iframe-worker`, unpacked into `.cache/iframe-worker/`
by `make iframe-worker`) becomes `assets/javascripts/iframe-worker-shim.js`, and every page loads it from
there instead of from unpkg.com, so the search works with no network too.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File
from mkdocs.utils import get_relative_url

ROOT = Path(__file__).resolve().parents[1]
MATHJAX = ROOT / ".cache" / "mathjax" / "es5"
SHIM = ROOT / ".cache" / "iframe-worker" / "shim" / "index.js"
SHIM_URL = "https://unpkg.com/iframe-worker/shim"
"""Where Material's offline plugin links the shim from (its partial `javascripts/iframe-worker` tag)."""
SHIM_SITE = "assets/javascripts/iframe-worker-shim.js"


def _offline(config) -> bool:
    plugin = config.plugins.get("material/offline") or config.plugins.get("offline")
    return bool(plugin is not None and plugin.config.enabled)


def on_files(files, config):
    for png in sorted((ROOT / "results").glob("*/*.png")):
        rel = png.relative_to(ROOT / "results").as_posix()
        files.append(File.generated(config, f"assets/results/{rel}", abs_src_path=str(png)))
    if not (MATHJAX / "tex-mml-chtml.js").is_file():
        raise PluginError(f"MathJax is not in {MATHJAX}: run `make mathjax` (npm pack mathjax@3)")
    for path in sorted(p for p in MATHJAX.rglob("*") if p.is_file()):
        rel = path.relative_to(MATHJAX).as_posix()
        files.append(File.generated(config, f"assets/mathjax/{rel}", abs_src_path=str(path)))
    if _offline(config):
        if not SHIM.is_file():
            raise PluginError(f"iframe-worker's shim is not in {SHIM}: run `make iframe-worker` (npm pack "
                              "iframe-worker), or build with `make docs-offline`")  # fmt: skip
        files.append(File.generated(config, SHIM_SITE, abs_src_path=str(SHIM)))
    return files


def _local_shim(text: str, from_url: str, config) -> str:
    """`text` with the shim's unpkg.com link pointed at the site's copy, relative to the page at `from_url`
    (offline builds only)."""
    if not _offline(config) or SHIM_URL not in text:
        return text
    return text.replace(SHIM_URL, get_relative_url(SHIM_SITE, from_url))


def on_post_page(output, page, config):
    """The offline site's pages load the shim from the site, not from unpkg.com."""
    return _local_shim(output, page.url, config)


def on_post_template(output_content, template_name, config):
    """The same for the site's own templates (404.html, at the site's root)."""
    return _local_shim(output_content, template_name, config)
