"""Write the worker's HTTP OpenAPI document to docs/openapi.json, or check it (``--check``).

The document is what ``GET /openapi.json`` serves (rewardseal_worker.http.routes);
tests/worker/test_http_face.py fails when the checked-in copy drifts from it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rewardseal_worker.http.routes import openapi_document

TARGET = Path(__file__).resolve().parents[1] / "docs" / "openapi.json"


def render() -> str:
    """The document as committed: indented, keys in the served order, a final newline."""
    return json.dumps(openapi_document(), indent=2) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if docs/openapi.json differs")
    args = parser.parse_args()
    text = render()
    if args.check:
        if not TARGET.exists() or TARGET.read_text() != text:
            print(f"{TARGET} is out of date: run python tools/openapi.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
