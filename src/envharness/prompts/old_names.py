"""`PromptContext`'s field names from when per-step prompts were the browser's, still readable
(with a DeprecationWarning) by prompt builders written against them."""

#: old field name -> its name now
OLD_FIELDS = {"axtree": "text", "axtree_token_budget": "text_token_budget"}
