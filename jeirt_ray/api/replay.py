"""A loopback OpenAI-compatible chat endpoint that replays LLMs' recorded answers: `jeirt replay`.

To try onboarding from an endpoint on real answers without running the LLM (and to test and
benchmark it): `ReplayServer(folder)` reads a
dataset folder's `questions.*` and `outputs/<model>.jsonl.gz` (one `{"question_id", "output"}` a
line: mmlu_pro's four recorded LLMs) and answers `POST /v1/chat/completions` for any of those
models with the recorded output of the question whose text ends the user message (the prompt
format of api/endpoint.py: instructions, a blank line, the question; or the question alone, blank
lines and all). It knows the question only
from the text it is sent: of questions with the same text (mmlu_pro has 318 such), it replays the
first one's output. A question without a recorded output gets an empty answer. Faults can be
planted to test a client: `fail(status, times)` answers the next `times` requests with `status`,
`delay_s` holds every answer, `mangle` answers those question ids with text that has no letter,
and `stop()` / `start()` refuse connections in between (the port is kept).
"""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from ..data.tables import read_table


def read_outputs(path: Path) -> dict[str, str]:
    with gzip.open(path, "rt") as f:
        return {rec["question_id"]: rec["output"] or "" for rec in map(json.loads, f)}


class ReplayServer:
    def __init__(self, folder: str | Path, models: list[str] | None = None, api_key: str | None = None,
                 port: int = 0):
        folder = Path(folder)
        questions = next((folder / f"questions{s}" for s in (".parquet", ".csv.gz", ".csv")
                          if (folder / f"questions{s}").exists()), None)
        if questions is None:
            raise FileNotFoundError(f"{folder}: no questions file to replay")
        table = read_table(questions)
        self.by_text: dict[str, str] = {}
        for q, t in zip(table["question_id"], table["text"]):
            self.by_text.setdefault(str(t).strip(), str(q))
        files = sorted((folder / "outputs").glob("*.jsonl.gz"))
        names = [f.name[: -len(".jsonl.gz")] for f in files]
        if models is not None:
            missing = sorted(set(models) - set(names))
            if missing:
                raise FileNotFoundError(f"{folder / 'outputs'}: no recorded outputs of {missing}")
            files = [f for f, n in zip(files, names) if n in models]
        if not files:
            raise FileNotFoundError(f"{folder / 'outputs'}: no recorded outputs (<model>.jsonl.gz) to replay")
        self.outputs = {f.name[: -len(".jsonl.gz")]: read_outputs(f) for f in files}
        self.api_key, self.delay_s, self.mangle = api_key, 0.0, set()
        self.faults: deque[int] = deque()
        self.requests: list[tuple[str, str]] = []  # (model, question id) of every answered request
        self.lock = threading.Lock()
        self.port, self.server, self.thread = port, None, None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def fail(self, status: int, times: int = 1) -> None:
        with self.lock:
            self.faults.extend([status] * times)

    def start(self) -> "ReplayServer":
        replay = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _send(self, status: int, payload: dict, headers: dict | None = None) -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):  # noqa: N802 - the http.server API
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.path.rstrip("/") != "/v1/chat/completions":
                    return self._send(404, {"error": {"message": "not found"}})
                if replay.api_key and self.headers.get("authorization") != f"Bearer {replay.api_key}":
                    return self._send(401, {"error": {"message": "invalid api key"}})
                with replay.lock:
                    fault = replay.faults.popleft() if replay.faults else None
                if fault is not None:
                    return self._send(fault, {"error": {"message": f"planted {fault}"}}, {"retry-after": "0"})
                try:
                    req = json.loads(body)
                    model, content = req["model"], req["messages"][-1]["content"]
                except (ValueError, KeyError, IndexError, TypeError):
                    return self._send(400, {"error": {"message": "expected an OpenAI chat completion request"}})
                if model not in replay.outputs:
                    return self._send(404, {"error": {"message": f"model {model!r} not found"}})
                # the longest tail of the message, from a blank line on, that is a question's text (a
                # question may hold blank lines itself; instructions may come before it)
                parts = str(content).split("\n\n")
                qid = next((q for i in range(len(parts))
                            if (q := replay.by_text.get("\n\n".join(parts[i:]).strip())) is not None), None)
                if qid is None:
                    return self._send(400, {"error": {"message": "unknown question"}})
                if replay.delay_s:
                    time.sleep(replay.delay_s)
                output = replay.outputs[model].get(qid, "")
                if qid in replay.mangle:
                    output = "Not sure, sorry."
                with replay.lock:
                    replay.requests.append((model, qid))
                usage = {"prompt_tokens": len(content) // 4, "completion_tokens": len(output) // 4,
                         "total_tokens": len(content) // 4 + len(output) // 4}
                if req.get("stream"):
                    return self._stream(model, qid, output, usage if (req.get("stream_options") or {}).get(
                        "include_usage") else None)
                self._send(200, {"id": f"replay-{qid}", "object": "chat.completion", "model": model,
                                 "choices": [{"index": 0, "message": {"role": "assistant", "content": output},
                                              "finish_reason": "stop"}],
                                 "usage": {"prompt_tokens": len(content) // 4, "completion_tokens": len(output) // 4,
                                           "total_tokens": len(content) // 4 + len(output) // 4}})

            def _stream(self, model: str, qid: str, output: str, usage: dict | None) -> None:
                """The answer as OpenAI streams it: server-sent chunks of the text, the usage chunk
                when asked for (stream_options.include_usage), then [DONE]."""
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()

                def event(delta: dict, finish=None, **extra) -> bytes:
                    chunk = {"id": f"replay-{qid}", "object": "chat.completion.chunk", "model": model,
                             "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
                    return f"data: {json.dumps(chunk)}\n\n".encode()
                step = max(1, len(output) // 8)
                self.wfile.write(event({"role": "assistant", "content": output[:step]}))
                for i in range(step, len(output), step):
                    self.wfile.write(event({"content": output[i:i + step]}))
                self.wfile.write(event({}, "stop"))
                if usage is not None:
                    chunk = json.loads(event({})[6:])
                    self.wfile.write(f"data: {json.dumps({**chunk, 'choices': [], 'usage': usage})}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):  # a client that hung up: nothing to report
                pass

        self.server = Server(("127.0.0.1", self.port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def __enter__(self) -> "ReplayServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
