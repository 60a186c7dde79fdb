"""Jinja2 templates: generated configuration files (kwokctl, kind, ...) and HTML reports."""

from __future__ import annotations

from pathlib import Path

import jinja2

_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).parent),
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
)


def render_template(name: str, **values: object) -> str:
    """Render the template `name` of this package; a missing value is an error, not an empty string."""
    return _ENV.get_template(name).render(**values)


_HTML = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).parent),
    undefined=jinja2.StrictUndefined,
    autoescape=True,  # report pages show user text (names, CEL, scheduler messages)
)


def render_html(name: str, **values: object) -> str:
    """Render the HTML template `name` (reports extend report_base.html.j2), every value escaped."""
    return _HTML.get_template(name).render(**values)
