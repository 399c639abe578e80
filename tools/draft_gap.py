"""Where a draft head loses acceptance: the command the docs cite, kept as an entry
point to `sglang_cast.training.gap` (``--help`` lists every flag)."""

from sglang_cast.training.gap import main

if __name__ == "__main__":
    main()
