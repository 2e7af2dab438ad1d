"""MkDocs hooks of the documentation site (mkdocs.yml): pages kept outside docs/, and llms.txt.

- A page of the site may live outside docs/ (bench/README.md, beside the benchmarks it
  describes): it is added as a page, and links between it and docs/ are rewritten to the
  site's paths, so that strict validation checks them (and their anchors) like any other.
- The docstrings of the API reference speak Sphinx's roles (``:func:`run_one` ``): the role
  is dropped, the name stays code.
- llms.txt at the root of the repository lists every page of the nav with a line on each, by
  its path in the repository; the site gets a copy with the site's URLs. The build fails when
  the two disagree: a page added to the nav must be added there too.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.structure.nav import Navigation, Section
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parent
#: Pages kept outside docs/: their path in the repository, and their path in the site.
OUTSIDE = {"bench/README.md": "benchmarks.md", "CHANGELOG.md": "changelog.md"}
LLMS = "llms.txt"

_SPHINX_ROLE = re.compile(r":(?:func|class|meth|attr|data|exc|mod|obj):(?=<code>)")
_LINK = re.compile(r"\]\((?P<target>[^)\s#]+\.md)(?P<anchor>#[^)\s]*)?\)")


def _in_repository(src_uri: str) -> str:
    """The path in the repository of the page with this path in the site."""
    return next((repo for repo, site in OUTSIDE.items() if site == src_uri), f"docs/{src_uri}")


def _in_site(repo_path: str) -> str | None:
    """The path in the site of the repository's file, or None if the site has no such page."""
    if repo_path in OUTSIDE:
        return OUTSIDE[repo_path]
    return repo_path.removeprefix("docs/") if repo_path.startswith("docs/") else None


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for repo_path, site_path in OUTSIDE.items():
        files.append(File.generated(config, site_path, abs_src_path=str(ROOT / repo_path)))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    here = posixpath.dirname(_in_repository(page.file.src_uri))
    site_here = posixpath.dirname(page.file.src_uri)

    def rewrite(match: re.Match[str]) -> str:
        target = posixpath.normpath(posixpath.join(here, match["target"]))
        site_path = _in_site(target)
        if site_path is None:
            return match[0]  # left as written: validation reports it if it is broken
        return f"]({posixpath.relpath(site_path, site_here or '.')}{match['anchor'] or ''})"

    return _LINK.sub(rewrite, markdown)


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    return _SPHINX_ROLE.sub("", html)


def _nav_pages(items: list[Any]) -> list[Page]:
    pages: list[Page] = []
    for item in items:
        if isinstance(item, Section):
            pages.extend(_nav_pages(item.children))
        elif isinstance(item, Page):
            pages.append(item)
    return pages


_llms_nav: list[Page] = []


def on_nav(nav: Navigation, config: MkDocsConfig, files: Files) -> Navigation:
    _llms_nav[:] = _nav_pages(nav.items)
    return nav


def on_post_build(config: MkDocsConfig) -> None:
    text = (ROOT / LLMS).read_text()
    listed = [m["target"] for m in _LINK.finditer(text)]
    by_repo_path = {_in_repository(page.file.src_uri): page for page in _llms_nav}
    home = _in_repository("index.md")
    missing = sorted(set(by_repo_path) - set(listed) - {home})
    unknown = sorted(set(listed) - set(by_repo_path))
    if missing or unknown:
        raise PluginError(
            f"{LLMS} and the nav of mkdocs.yml disagree: pages of the nav it does not list: "
            f"{missing or 'none'}; links it has to no page of the nav: {unknown or 'none'}"
        )

    def to_url(match: re.Match[str]) -> str:
        page = by_repo_path[match["target"]]
        return f"]({page.url or './'}{match['anchor'] or ''})"

    Path(config.site_dir, LLMS).write_text(_LINK.sub(to_url, text))
