"""Runs a cross-test script under another interpreter (a peer's venv), or exits 77 when it is absent.

usage: with_peer.py PYTHON SCRIPT [ARGS...]

CTest cannot mark a test skipped whose executable does not exist, so the entries that need the
tensorizer 2.12.1 venv (scripts/setup.sh makes it) start here under the base interpreter.
"""

import os
import sys

SKIP_EXIT_CODE = 77


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    python, script, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    if not os.access(python, os.X_OK):
        print(f"skipped: {python} does not exist (scripts/setup.sh makes the peer's venv)")
        return SKIP_EXIT_CODE
    os.execv(python, [python, script, *args])


if __name__ == "__main__":
    sys.exit(main())
