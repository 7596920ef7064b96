"""The ids and the text of an HTML page: where its links' anchors can land."""

from __future__ import annotations

from html.parser import HTMLParser


class Ids(HTMLParser):
    """The ids and the text of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.ids |= {value for name, value in attrs if name == "id" and value}

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(page: str) -> Ids:
    parser = Ids()
    parser.feed(page)
    return parser
