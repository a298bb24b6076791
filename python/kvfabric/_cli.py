"""The `kvfabric` console command: the kvfabric binary shipped in the package.

A wheel carries the Go binary as package data (kvfabric/_bin/kvfabric);
pip's console-script wrapper calls main(), which replaces this Python process
with the binary (same pid, same signals, same exit status), so
`kvfabric master`, `kvfabric provider`, `kvfabric doctor`, … behave exactly
as the binary built from cmd/kvfabric.
"""

from __future__ import annotations

import os
import sys


def binary_path() -> str:
    """The path of the packaged kvfabric binary."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bin", "kvfabric")


def main() -> int:
    exe = binary_path()
    if not os.path.exists(exe):
        sys.stderr.write(
            f"kvfabric: the kvfabric binary is not in this installation ({exe}); "
            "reinstall the wheel, or build it with `go build ./cmd/kvfabric`\n"
        )
        return 127
    os.execv(exe, [sys.argv[0], *sys.argv[1:]])
    return 0  # not reached: execv replaced the process or raised


if __name__ == "__main__":
    sys.exit(main())
