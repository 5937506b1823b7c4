"""An OpenAI-compatible chat-completions server for gateway tests and benchmarks, on loopback:
`python tests/upstream.py --port N --name NAME [--fail 503] [--delay S] [--chunks K]`.

It answers POST /v1/chat/completions as OpenAI's API does: a chat.completion JSON, or with
`"stream": true` server-sent events, one `chat.completion.chunk` per word (`--chunk-delay` apart)
and `data: [DONE]`. The text names the server and echoes the last user message, so a test can
tell who answered. `--fail CODE` answers that status instead; `--delay S` waits before the
first byte; `--drip S` sends a non-streamed answer in 16 pieces S seconds apart; `--pad N` adds
N characters to every answer; a stream asked with `stream_options.include_usage` ends with a
usage chunk, as OpenAI's does, and a JSON answer has its `usage` (`--no-usage`: neither, as some
servers do). `--replies FILE.json` scripts it, as a judge: {ending: reply}, the reply of the
longest ending that ends the last user message (a number: answered as that HTTP status), else
the echo. `GET /calls` counts the completions it was asked for, and `/headers` shows the last
request's Authorization header (to check API keys are sent)."""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import time

import httpx

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse


def make_app(name: str, fail: int | None = None, delay: float = 0.0, chunk_delay: float = 0.0, drip: float = 0.0,
             pad: int = 0, report_usage: bool = True, replies: dict[str, str | int] | None = None) -> FastAPI:
    app = FastAPI()
    endings = sorted(replies or {}, key=len, reverse=True)
    state = {"calls": 0, "authorization": None, "models": []}

    @app.get("/calls")
    async def calls():
        return state

    @app.post("/v1/chat/completions")
    async def complete(request: Request):
        body = await request.json()
        state["calls"] += 1
        state["authorization"] = request.headers.get("authorization")
        state["models"].append(body.get("model"))
        if delay:
            await asyncio.sleep(delay)
        if fail:
            return JSONResponse({"error": {"message": f"{name} fails with {fail}", "type": "test"}}, status_code=fail)
        last = next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")
        text = f"{name} answers: {last}" + (" " + "x" * pad if pad else "")
        scripted = next((replies[e] for e in endings if last.endswith(e)), None)
        if isinstance(scripted, int):
            return JSONResponse({"error": {"message": f"{name} scripted {scripted}", "type": "test"}},
                                status_code=scripted)
        if scripted is not None:
            text = scripted
        created, cid = int(time.time()), f"chatcmpl-{name}-{state['calls']}"
        usage = {"prompt_tokens": 1, "completion_tokens": len(text.split()), "total_tokens": 1}
        if not body.get("stream") and drip:
            whole = json.dumps({"id": cid, "object": "chat.completion", "created": created, "model": body.get("model"),
                                "choices": [{"index": 0, "finish_reason": "stop",
                                             "message": {"role": "assistant", "content": text}}], "usage": usage})

            async def pieces():
                step = len(whole) // 16 + 1
                for i in range(0, len(whole), step):
                    yield whole[i:i + step]
                    await asyncio.sleep(drip)
            return StreamingResponse(pieces(), media_type="application/json")
        if not body.get("stream"):
            return {"id": cid, "object": "chat.completion", "created": created, "model": body.get("model"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": text}}],
                    **({"usage": usage} if report_usage else {})}

        async def events():
            words = text.split(" ")
            for i, word in enumerate(words):
                delta = {"role": "assistant", "content": word} if i == 0 else {"content": " " + word}
                chunk = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": body.get("model"),
                         "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
                yield f"data: {json.dumps(chunk)}\n\n"
                if chunk_delay:
                    await asyncio.sleep(chunk_delay)
            end = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": body.get("model"),
                   "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
            yield f"data: {json.dumps(end)}\n\n"
            if report_usage and (body.get("stream_options") or {}).get("include_usage"):
                yield f"data: {json.dumps({**end, 'choices': [], 'usage': usage})}\n\n"
            yield "data: [DONE]\n\n"
        return StreamingResponse(events(), media_type="text/event-stream")

    return app


class Upstreams:
    """OpenAI-compatible servers as subprocesses on loopback, killed at the end."""

    def __init__(self):
        self.procs: dict[str, subprocess.Popen] = {}
        self.urls: dict[str, str] = {}

    def start(self, name: str, *args: str) -> str:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.procs[name] = subprocess.Popen([sys.executable, __file__, "--port", str(port), "--name", name,
                                             *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(f"{url}/calls", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            raise RuntimeError(f"upstream {name} did not start")
        self.urls[name] = f"{url}/v1"
        return self.urls[name]

    def kill(self, name: str, graceful: bool = False) -> None:
        """SIGKILL (the streams it is serving break off), or with `graceful` SIGTERM: uvicorn
        finishes what it is serving and takes no new connection, as a rolling restart would."""
        if graceful:
            self.procs[name].terminate()
            self.procs[name].wait(60)
        else:
            self.procs[name].kill()
            self.procs[name].wait(10)

    def calls(self, name: str) -> dict:
        return httpx.get(self.urls[name][:-3] + "/calls", timeout=5).json()

    def stop(self):
        for p in self.procs.values():
            p.kill()
            p.wait(10)


def main():
    import uvicorn
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--fail", type=int, default=None)
    ap.add_argument("--delay", type=float, default=0.0)
    ap.add_argument("--chunk-delay", type=float, default=0.0)
    ap.add_argument("--drip", type=float, default=0.0)
    ap.add_argument("--pad", type=int, default=0)
    ap.add_argument("--no-usage", action="store_true")
    ap.add_argument("--replies", default=None)
    a = ap.parse_args()
    replies = json.loads(open(a.replies).read()) if a.replies else None
    uvicorn.run(make_app(a.name, a.fail, a.delay, a.chunk_delay, a.drip, a.pad, not a.no_usage, replies),
                host="127.0.0.1", port=a.port, log_level="warning")


if __name__ == "__main__":
    main()
