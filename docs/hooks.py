"""mkdocs hook: fill the recipe and component tables from the live registry, so
the lists in the docs are never out of date."""

from __future__ import annotations


def _family_table(family: str) -> str:
    import zoo

    rows = ["| name | plugin | capabilities | description |", "|---|---|---|---|"]
    for c in zoo.list_components(family):
        rows.append(f"| `{c.name}` | {c.plugin} | {c.capability_summary()} | {c.description} |")
    return "\n".join(rows)


def _components() -> str:
    import zoo

    out = []
    for family in zoo.list_families():
        members = zoo.list_components(family.name)
        out.append(f"## {family.name}\n\n{family.summary}\n")
        if not members:
            out.append("*No built-in member yet; plugins add them through "
                       f"`{family.hook}`.*\n")
            continue
        out.append("| name | plugin | capabilities | description |\n|---|---|---|---|")
        for c in members:
            out.append(f"| `{c.name}` | {c.plugin} | {c.capability_summary()} | {c.description} |")
        out.append("")
    return "\n".join(out)


def _recipes() -> str:
    import zoo

    rows = ["| recipe | architecture | parameters | description |", "|---|---|---|---|"]
    for name in zoo.list_recipes():
        recipe = zoo.get_recipe(name)
        params = zoo.footprint(zoo.resolve(recipe)).parameters
        rows.append(f"| `{name}` | {recipe.architecture.name} | {params:,} | "
                    f"{recipe.description} |")
    return "\n".join(rows)


def on_page_markdown(markdown, page, config, files):
    import re

    markdown = re.sub(r"<!-- zoo:components (\w+) -->", lambda m: _family_table(m.group(1)),
                      markdown)
    if "<!-- zoo:components -->" in markdown:
        markdown = markdown.replace("<!-- zoo:components -->", _components())
    if "<!-- zoo:recipes -->" in markdown:
        markdown = markdown.replace("<!-- zoo:recipes -->", _recipes())
    return markdown
