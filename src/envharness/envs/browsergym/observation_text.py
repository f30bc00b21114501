"""BrowserGym's text views of a page, from the raw CDP trees that `observation` extracts.

Ported from BrowserGym 0.14.3 (``browsergym/core/observation.py`` and ``browsergym/utils/obs.py``,
https://github.com/ServiceNow/BrowserGym, Copyright ServiceNow, Apache License 2.0), with the
defaults that BrowserGym's agents and OpenEnv's BrowserGym server use:
``flatten_axtree_to_str(axtree)`` and ``prune_html(flatten_dom_to_str(dom))``.
Their output is character for character BrowserGym's on the same trees.

One deliberate difference, made in `drop_inline_text_boxes`: Chromium newer than the one
BrowserGym was built for (Playwright 1.44's Chromium 125) adds ``InlineTextBox`` children under
every ``StaticText`` of the full AXTree; BrowserGym prints each of them as an extra line that
repeats the text. We remove those nodes before flattening, which gives the text that BrowserGym
prints on its own Chromium.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

BID_ATTR = "bid"
VIS_ATTR = "browsergym_visibility_ratio"
SOM_ATTR = "browsergym_set_of_marks"

IGNORED_AXTREE_ROLES = ("LineBreak",)
IGNORED_AXTREE_PROPERTIES = ("editable", "readonly", "level", "settable", "multiline", "invalid", "focusable")
_BID_DATA = re.compile(r"^browsergym_id_([a-zA-Z0-9]+)\s?(.*)")


def split_bid_data(value: str) -> tuple[str | None, str]:
    """``"browsergym_id_12 original"`` -> ``("12", "original")``; other strings -> ``(None, value)``."""
    match = _BID_DATA.fullmatch(value)
    return (match.group(1), match.group(2)) if match else (None, value)


# -- accessibility tree --------------------------------------------------------------------------
def drop_inline_text_boxes(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The AXTree nodes without Chromium's ``InlineTextBox`` nodes (see the module docstring)."""
    dropped = {n["nodeId"] for n in nodes if n.get("role", {}).get("value") == "InlineTextBox"}
    if not dropped:
        return nodes
    kept = [n for n in nodes if n["nodeId"] not in dropped]
    for node in kept:
        if "childIds" in node:
            node["childIds"] = [c for c in node["childIds"] if c not in dropped]
    return kept


def take_bids_from_aria(nodes: list[dict[str, Any]]) -> None:
    """Move the bid that the marking script put in ARIA attributes into ``node["browsergym_id"]``."""
    for node in nodes:
        bid = None
        for i, prop in enumerate(node.get("properties", ())):
            if prop["name"] == "roledescription":
                bid, prop["value"]["value"] = split_bid_data(prop["value"]["value"])
                if prop["value"]["value"] == "":
                    del node["properties"][i]
                break
        if "description" in node:
            fallback, node["description"]["value"] = split_bid_data(node["description"]["value"])
            if node["description"]["value"] == "":
                del node["description"]
            bid = bid or fallback
        if bid:
            node["browsergym_id"] = bid


def flatten_axtree_to_str(nodes: list[dict[str, Any]]) -> str:  # noqa: C901 - BrowserGym's, kept as it is
    """BrowserGym's ``flatten_axtree_to_str`` with its default arguments."""
    index = {node["nodeId"]: i for i, node in enumerate(nodes)}

    def dfs(node_idx: int, depth: int, parent_name: str) -> str:  # noqa: C901 - BrowserGym's, kept as it is
        node = nodes[node_idx]
        role = node["role"]["value"]
        name = ""
        skip = False
        tree_str = ""
        if role in IGNORED_AXTREE_ROLES or "name" not in node:
            skip = True
        else:
            name = node["name"]["value"]
            value = node.get("value", {}).get("value") if "value" in node else None
            attributes = []
            for prop in node.get("properties", ()):
                if "value" not in prop or "value" not in prop["value"]:
                    continue
                prop_name, prop_value = prop["name"], prop["value"]["value"]
                if prop_name in IGNORED_AXTREE_PROPERTIES:
                    continue
                if prop_name in ("required", "focused", "atomic"):
                    if prop_value:
                        attributes.append(prop_name)
                else:
                    attributes.append(f"{prop_name}={prop_value!r}")
            if role == "generic" and not attributes:
                skip = True
            if role == "StaticText" and name in parent_name:
                skip = True
            if not skip:
                node_str = role if role == "generic" and not name else f"{role} {name.strip()!r}"
                bid = node.get("browsergym_id")
                if bid is not None:
                    node_str = f"[{bid}] {node_str}"
                if value is not None:
                    node_str += f" value={value!r}"
                if attributes:
                    node_str += ", ".join(["", *attributes])
                tree_str = "\t" * depth + node_str
        for child_id in node.get("childIds", ()):
            if child_id not in index or child_id == node["nodeId"]:
                continue
            child_str = dfs(index[child_id], depth if skip else depth + 1, name)
            if child_str:
                tree_str = f"{tree_str}\n{child_str}" if tree_str else child_str
        return tree_str

    return dfs(0, 0, "") if nodes else ""


# -- DOM snapshot ----------------------------------------------------------------------------------
def pop_bids_from_attribute(snapshot: dict[str, Any], attr: str) -> None:
    """Remove the marking script's bid data from `attr` in the snapshot (BrowserGym's clean-up)."""
    strings = snapshot["strings"]
    try:
        attr_id = strings.index(attr)
    except ValueError:
        return
    done: set[int] = set()
    for document in snapshot["documents"]:
        for node_attrs in document["nodes"]["attributes"]:
            for i in range(0, len(node_attrs), 2):
                if node_attrs[i] != attr_id:
                    continue
                value_id = node_attrs[i + 1]
                if value_id not in done:
                    strings[value_id] = split_bid_data(strings[value_id])[1]
                    done.add(value_id)
                if strings[value_id] == "":
                    del node_attrs[i : i + 2]
                break


def extra_element_properties(
    snapshot: dict[str, Any], scale_factor: float = 1.0
) -> dict[str, dict[str, Any]]:
    """BrowserGym's ``extract_dom_extra_properties``: bid -> visibility, bbox, clickable, set_of_marks."""
    strings = snapshot["strings"]
    ids = {name: strings.index(name) if name in strings else -1 for name in (BID_ATTR, VIS_ATTR, SOM_ATTR)}
    documents = snapshot["documents"]
    parents: dict[int, tuple[int, int] | None] = {0: None}
    abs_pos: dict[int, tuple[float, float]] = {}
    props: dict[int, list[dict[str, Any]]] = {}
    todo = [0]
    while todo:  # depth-first over the frames, as BrowserGym
        doc = todo.pop()
        document = documents[doc]
        children = document["nodes"]["contentDocumentIndex"]
        for node, child_doc in zip(children["index"], children["value"]):
            parents[child_doc] = (doc, node)
            todo.append(child_doc)
        x = y = 0.0
        if parents[doc] is not None:
            parent_doc, parent_node = parents[doc]
            layout = documents[parent_doc]["layout"]
            if parent_node in layout["nodeIndex"]:
                bounds = layout["bounds"][layout["nodeIndex"].index(parent_node)]
                x, y = abs_pos[parent_doc][0] + bounds[0], abs_pos[parent_doc][1] + bounds[1]
        abs_pos[doc] = (x - document["scrollOffsetX"], y - document["scrollOffsetY"])
        nodes = [
            {"bid": None, "visibility": None, "bbox": None, "clickable": False, "set_of_marks": None}
            for _ in document["nodes"]["parentIndex"]
        ]
        for node_idx in document["nodes"]["isClickable"]["index"]:
            nodes[node_idx]["clickable"] = True
        for node_idx, attrs in enumerate(document["nodes"]["attributes"]):
            for i in range(0, len(attrs), 2):
                name_id, value = attrs[i], strings[attrs[i + 1]] if attrs[i + 1] != -1 else None
                if name_id == ids[BID_ATTR]:
                    nodes[node_idx]["bid"] = value
                elif name_id == ids[VIS_ATTR]:
                    nodes[node_idx]["visibility"] = float(value)
                elif name_id == ids[SOM_ATTR]:
                    nodes[node_idx]["set_of_marks"] = value == "1"
        layout = document["layout"]
        for node_idx, bounds, client_rect in zip(
            layout["nodeIndex"], layout["bounds"], layout["clientRects"]
        ):
            nodes[node_idx]["bbox"] = (
                [bounds[0] + abs_pos[doc][0], bounds[1] + abs_pos[doc][1], *bounds[2:]]
                if client_rect
                else None
            )
        props[doc] = nodes
    out: dict[str, dict[str, Any]] = {}
    for doc in parents:  # BrowserGym's order: frames in discovery order
        for node in props[doc]:
            if node["bid"]:
                bbox = [c * scale_factor for c in node["bbox"]] if node["bbox"] else None
                out[node["bid"]] = {
                    "visibility": node["visibility"],
                    "bbox": bbox,
                    "clickable": node["clickable"],
                    "set_of_marks": node["set_of_marks"],
                }
    return out


def flatten_dom_to_str(snapshot: dict[str, Any]) -> str:  # noqa: C901 - BrowserGym's, kept as it is
    """BrowserGym's ``flatten_dom_to_str`` with its default arguments (HTML with ``bid`` first)."""
    from bs4 import BeautifulSoup

    strings = snapshot["strings"]

    def text(idx: int) -> str | None:
        return None if idx == -1 else strings[idx]

    def parse_document(doc_idx: int) -> str:
        nodes = snapshot["documents"][doc_idx]["nodes"]
        children: dict[int, list[int]] = defaultdict(list)
        for node_idx, parent_idx in enumerate(nodes["parentIndex"]):
            if parent_idx != -1:
                children[parent_idx].append(node_idx)
        frames = dict(zip(nodes["contentDocumentIndex"]["index"], nodes["contentDocumentIndex"]["value"]))

        def dfs(node_idx: int, parent_skipped: bool) -> str:
            node_type = nodes["nodeType"][node_idx]
            value = text(nodes["nodeValue"][node_idx])
            before = after = ""
            skip = False
            if node_type == 3:
                if not parent_skipped and value is not None:
                    before = value
            elif node_type == 4:
                if not parent_skipped and value is not None:
                    before = f"<!CDATA[[{value}]]>"
            elif node_type in (7, 8, 9, 10, 11):
                skip = True
            else:
                tag = text(nodes["nodeName"][node_idx]).lower().strip()
                attributes, bid = [], None
                attrs = nodes["attributes"][node_idx]
                for i in range(0, len(attrs), 2):
                    name, attr_value = text(attrs[i]), text(attrs[i + 1])
                    if name == BID_ATTR:
                        bid = attr_value
                    elif name not in (VIS_ATTR, SOM_ATTR):
                        attributes.append(name if attr_value is None else f'{name}="{attr_value}"')
                if bid is not None:
                    attributes.insert(0, f'bid="{bid}"')
                before = f"<{tag}" + " ".join(["", *attributes]) + ">"
                after = f"</{tag}>"
            html = before
            if node_idx in frames:
                html += parse_document(frames[node_idx])
            for child_idx in children[node_idx]:
                html += dfs(child_idx, skip)
            return html + after

        return BeautifulSoup(dfs(0, False), "lxml").prettify()

    return parse_document(0)


def prune_html(html: str) -> str:
    """BrowserGym's ``prune_html``: drop comments, scripts and styles, unwrap bare structural tags."""
    from bs4 import BeautifulSoup

    html = re.sub(r"\n", " ", html)
    html = re.sub(r"<!--(.*?)-->", "", html, flags=re.MULTILINE)
    soup = BeautifulSoup(html, "lxml")
    for tag in reversed(soup.find_all()):
        if tag.name in ("html", "body"):
            tag.unwrap()
        elif tag.name in ("style", "link", "script", "br"):
            tag.decompose()
        elif tag.name in ("div", "span", "i", "p") and len(tag.attrs) == 1 and tag.has_attr("bid"):
            if not tag.contents:
                tag.decompose()
            else:
                tag.unwrap()
    return soup.prettify()
