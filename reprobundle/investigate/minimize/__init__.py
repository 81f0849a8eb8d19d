"""A function's ops cut into modules of their own: `isolate`'s pieces and `minimize`'s smallest piece."""
