"""Names from when eval's observation budget was the browser's, kept so users' commands and
earlier run folders still work: the `--axtree-tokens` flag and config.json's key."""

#: The flag users know for `EvalConfig.observation_tokens`.
OBSERVATION_TOKENS_FLAG = "--axtree-tokens"
#: Field name -> config.json key, where the file keeps an older name (run folders resume).
FILE_KEYS = {"observation_tokens": "axtree_tokens"}
