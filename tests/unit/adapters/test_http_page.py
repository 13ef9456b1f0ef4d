"""bke.adapters.http.page escapes every value it is given (a dashboard shows node names, errors and
spec values that a user or an attacker wrote)."""
from bke.adapters.http.page import Markup, layout, link, table, text


def test_values_are_escaped_and_markup_is_kept():
    evil = '<script>alert("x")</script>'
    t = table(["node", "state"], [[evil, link("/n?a=1&b=\"2\"", evil)]], row_class=["bad"])
    assert "<script>" not in t and "&lt;script&gt;" in t
    assert 'href="/n?a=1&amp;b=&quot;2&quot;"' in t and '<tr class="bad">' in t
    page = layout("dispatcher", evil, t)
    assert page.count("<script>") == 0 and "&lt;script&gt;alert" in page
    assert text(None) == "" and isinstance(text("a"), Markup)


def test_poll_script_keeps_query_parameters_and_cannot_close_its_script():
    from bke.adapters.http.page import poll_script

    s = poll_script('/clusters/a/live?state=Failed&offset=200</script><b>', "live")
    assert s.count("</script>") == 1 and s.endswith("</script>")
    assert "&amp;" not in s and "\\u0026offset=200" in s  # JS decodes \u0026 to & (an entity it would not)
    assert "\\u003c/script\\u003e" in s
