"""A scripted policy behind an OpenAI-compatible endpoint, to watch the reward fail closed.

``POST /v1/chat/completions`` answers with the scripted completion of the family the model name
selects (``scripted/<family>``, e.g. ``scripted/dup``) for the write spec found in the request's
last user message (the fenced ``json`` block of :func:`.tasks.spec_prompt`). A model named
``scripted-tools/<family>`` is the family as a multi-turn tool-calling policy instead: each
answer is the next turn of :func:`.tool_script.scripted_turn` (one ``tool_calls`` entry, or the
final text) for the conversation so far. ``GET /v1/models`` lists both models per family. Any
API key is accepted and none is read: the OpenAI client insists on sending one. Streaming
requests get the same answer as a single server-sent chunk.

Families named in ``garble`` answer plain text ("Saved.") instead of an action report: a
deliberately broken policy for checking that a checker notices a control that does not pay.

Serve it with ``python -m rewardseal_mockmed_extradup.scripted_policy serve --port 0
--ready-file ready.json``; the ready file gets ``{"base_url": "http://127.0.0.1:<port>/v1"}``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from rewardseal.core.errors import ValidationError
from rewardseal_mockmed.extradup import FAMILIES, scripted_completion
from rewardseal_server.serving import write_ready_file

from .tasks import spec_from_prompt
from .tool_script import scripted_turn

__all__ = [
    "GARBLED_ANSWER",
    "MODEL_PREFIX",
    "TOOLS_MODEL_PREFIX",
    "ScriptedPolicyServer",
    "answer_for",
    "answer_message_for",
    "family_of_model",
    "main",
    "model_name",
    "tools_model_name",
]

MODEL_PREFIX = "scripted/"
"""Model names are ``scripted/<family>``."""
TOOLS_MODEL_PREFIX = "scripted-tools/"
"""Tool-calling model names are ``scripted-tools/<family>``."""
GARBLED_ANSWER = "Saved."
"""What a garbled family answers: a sentence, not an action report."""
_MAX_BODY = 4 * 1024 * 1024


def model_name(family: str) -> str:
    """The model name that selects ``family``."""
    return f"{MODEL_PREFIX}{family}"


def tools_model_name(family: str) -> str:
    """The model name that selects ``family`` as a tool-calling policy."""
    return f"{TOOLS_MODEL_PREFIX}{family}"


def family_of_model(model: str) -> str:
    """The ExtraDup family a ``scripted/<family>`` (or ``scripted-tools/<family>``) name selects."""
    family = ""
    for prefix in (MODEL_PREFIX, TOOLS_MODEL_PREFIX):
        if model.startswith(prefix):
            family = model[len(prefix) :]
    if family not in FAMILIES:
        raise ValidationError(
            f"unknown model {model!r}; use one of {[model_name(f) for f in FAMILIES]}"
        )
    return family


def _message_text(content: Any) -> str:
    """The text of a chat message's content (a string or a list of text parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        )
    return ""


def answer_for(body: Mapping[str, Any], garble: Iterable[str] = ()) -> tuple[str, str]:
    """``(model, completion)`` for a chat-completions request body."""
    model = body.get("model")
    if not isinstance(model, str):
        raise ValidationError("the request names no model")
    family = family_of_model(model)
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise ValidationError("the request carries no messages")
    users = [
        _message_text(message.get("content"))
        for message in messages
        if isinstance(message, Mapping) and message.get("role") == "user"
    ]
    if not users:
        raise ValidationError("the request carries no user message")
    spec = spec_from_prompt(users[-1])
    if family in set(garble):
        return model, GARBLED_ANSWER
    return model, scripted_completion(family, spec)


def answer_message_for(
    body: Mapping[str, Any], garble: Iterable[str] = ()
) -> tuple[str, dict[str, Any]]:
    """``(model, assistant message)`` for a request body: a tool-calling turn for a
    ``scripted-tools/`` model (a garbled family answers :data:`GARBLED_ANSWER` and calls
    nothing), else :func:`answer_for`'s completion as the message content."""
    model = body.get("model")
    if isinstance(model, str) and model.startswith(TOOLS_MODEL_PREFIX):
        family = family_of_model(model)
        messages = body.get("messages")
        if not isinstance(messages, list):
            raise ValidationError("the request carries no messages")
        if family in set(garble):
            return model, {"role": "assistant", "content": GARBLED_ANSWER}
        return model, scripted_turn(family, messages)
    model, text = answer_for(body, garble)
    return model, {"role": "assistant", "content": text}


def _completion(model: str, message: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI ``chat.completion`` object carrying the assistant ``message``."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": dict(message),
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def _chunk(model: str, message: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI ``chat.completion.chunk`` carrying all of ``message`` and the stop reason."""
    delta = dict(message)
    if delta.get("tool_calls"):
        delta["tool_calls"] = [
            {"index": index, **call} for index, call in enumerate(delta["tool_calls"])
        ]
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "delta": delta,
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
            }
        ],
    }


class _Handler(BaseHTTPRequestHandler):
    """One request; the server carries the garbled families."""

    server: _PolicyHTTPServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the scripted server logs nothing per request."""

    def _send_json(self, status: int, payload: Mapping[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, status: int, message: str) -> None:
        self._send_json(
            status, {"error": {"message": message, "type": "invalid_request_error", "code": None}}
        )

    def do_GET(self) -> None:
        """``/v1/models``: one model per family."""
        if self.path.rstrip("/") != "/v1/models":
            self._send_error(404, f"no route {self.path}")
            return
        models = [
            {"id": name(f), "object": "model", "created": 0, "owned_by": "rewardseal"}
            for name in (model_name, tools_model_name)
            for f in FAMILIES
        ]
        self._send_json(200, {"object": "list", "data": models})

    def do_POST(self) -> None:
        """``/v1/chat/completions``: the selected family's scripted completion."""
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send_error(404, f"no route {self.path}")
            return
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 < length <= _MAX_BODY:
            self._send_error(400, "the request body is empty or too large")
            return
        try:
            body = json.loads(self.rfile.read(length))
            if not isinstance(body, Mapping):
                raise ValidationError("the request body must be a JSON object")
            model, message = answer_message_for(body, self.server.garble)
        except ValueError as exc:
            self._send_error(400, f"the request body is not JSON: {exc}")
            return
        except ValidationError as exc:
            self._send_error(400, exc.message)
            return
        if body.get("stream") is True:
            events = f"data: {json.dumps(_chunk(model, message))}\n\ndata: [DONE]\n\n".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(events)))
            self.end_headers()
            self.wfile.write(events)
            return
        self._send_json(200, _completion(model, message))


class _PolicyHTTPServer(ThreadingHTTPServer):
    """The HTTP server, holding the families that answer garbage."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], garble: frozenset[str]) -> None:
        super().__init__(address, _Handler)
        self.garble = garble


class ScriptedPolicyServer:
    """The scripted policy on a background thread; a context manager that stops it on exit."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, garble: Iterable[str] = ()):
        chosen = frozenset(garble)
        unknown = sorted(chosen - set(FAMILIES))
        if unknown:
            raise ValidationError(f"cannot garble unknown families {unknown}")
        self._server = _PolicyHTTPServer((host, port), chosen)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port."""
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, ``http://<host>:<port>/v1``."""
        host = str(self._server.server_address[0])
        return f"http://{host}:{self.port}/v1"

    def start(self) -> ScriptedPolicyServer:
        """Serve on a daemon thread (idempotent) and return ``self``."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever, name="scripted-policy", daemon=True
            )
            self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve on the calling thread until :meth:`request_stop`, then close the socket."""
        try:
            self._server.serve_forever()
        finally:
            self._server.server_close()

    def request_stop(self) -> None:
        """Ask :meth:`serve_forever` to return; safe from a signal handler (does not wait)."""
        threading.Thread(target=self._server.shutdown, daemon=True).start()

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> ScriptedPolicyServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """``serve``: run the scripted policy until SIGINT or SIGTERM."""
    parser = argparse.ArgumentParser(description="the scripted ExtraDup policy server")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve /v1/chat/completions and /v1/models")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=0)
    serve.add_argument("--ready-file", type=Path, default=None)
    serve.add_argument(
        "--garble",
        action="append",
        default=[],
        choices=FAMILIES,
        help="a family that answers plain text instead of its report (repeatable)",
    )
    args = parser.parse_args(argv)
    server = ScriptedPolicyServer(args.host, args.port, args.garble)

    def _stop(signum: int, frame: FrameType | None) -> None:
        server.request_stop()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    if args.ready_file is not None:
        write_ready_file(args.ready_file, {"base_url": server.base_url, "port": server.port})
    print(f"scripted policy serving on {server.base_url}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
