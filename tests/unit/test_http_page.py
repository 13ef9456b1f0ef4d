"""bke.http.page escapes every value it is given (a dashboard shows node names, errors and
spec values that a user or an attacker wrote)."""
from bke.http.page import Markup, layout, link, table, text


def test_values_are_escaped_and_markup_is_kept():
    evil = '<script>alert("x")</script>'
    t = table(["node", "state"], [[evil, link("/n?a=1&b=\"2\"", evil)]], row_class=["bad"])
    assert "<script>" not in t and "&lt;script&gt;" in t
    assert 'href="/n?a=1&amp;b=&quot;2&quot;"' in t and '<tr class="bad">' in t
    page = layout("dispatcher", evil, t)
    assert page.count("<script>") == 0 and "&lt;script&gt;alert" in page
    assert text(None) == "" and isinstance(text("a"), Markup)
