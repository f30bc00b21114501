"""The compact prompt shows what a form task needs (unnamed inputs, their state) and nothing
a small model copies by mistake; later turns see the page in the same form."""

from __future__ import annotations

from envharness.envs.browsergym.compact_prompt import compact_elements, compact_prompt, compact_tool_result

TREE = """RootWebArea 'Login User Task', focused, url='http://miniwob.local/miniwob/login-user.html'
\t[14] paragraph ''
\t\t[15] LabelText ''
\t\t\tStaticText 'Username'
\t\t[16] textbox '', focused, value='kenda'
\t[18] checkbox 'It's on', checked='false'
\t[20] button 'Login'"""


def test_unnamed_inputs_are_kept_and_unnamed_containers_dropped():
    assert compact_elements(TREE) == [
        "[16] textbox '', value='kenda'",  # focused is dropped: the model copied it into click('16', focused)
        "[18] checkbox 'It's on', checked='false'",
        "[20] button 'Login'",
    ]


def test_first_prompt_lists_the_actions_with_their_syntax_and_the_page():
    messages = compact_prompt({"goal": "Log in as kenda", "axtree_txt": TREE}, None, ["click", "fill"])
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert "fill('bid', 'text')" in messages[0]["content"] and "click('bid')" in messages[0]["content"]
    assert messages[-1]["content"].startswith("Goal: Log in as kenda\nElements:\n[16] textbox ''")


def test_later_turns_see_the_page_in_the_same_form():
    assert compact_tool_result({"axtree_txt": TREE}) == "Elements:\n" + "\n".join(compact_elements(TREE))
    assert compact_tool_result({"axtree_txt": ""}) == "Elements:\n(no elements)"
