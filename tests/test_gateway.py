"""The gateway's plain parts: per-request control, conversations, and calling OpenAI-compatible
upstreams on loopback (tests/upstream.py) with fallback, pass-through and streaming."""

import asyncio
import json
import time

import pytest

from jeirt_ray.routing.router import RequestError
from jeirt_ray.serving.relay.gateway import (AllFailed, ChatControl, Conversations, Gateway, StreamMeter, ask_for_usage,
                                      estimated_usage, relay)
from jeirt_ray.serving.settings import GatewayConfig, RouterConfig, Upstream

from .conftest import free_port
from .upstream import Upstreams


@pytest.fixture(scope="module")
def ups():
    u = Upstreams()
    u.start("alpha")
    u.start("beta")
    u.start("down503", "--fail", "503")
    u.start("refuses400", "--fail", "400")
    u.start("slow", "--delay", "3")
    u.start("drip", "--drip", "0.4")  # 16 pieces, 0.4 s apart: never idle for a read timeout, 6 s in all
    u.start("big", "--pad", "5000")
    u.start("long", "--pad", "200", "--chunk-delay", "0.1")  # a stream of ~200 words, 0.1 s apart
    u.start("BODY-PLANTED", "--fail", "500")  # its error body names it
    u.start("mute", "--no-usage")  # never reports a stream's usage
    u.start("trickle", "--chunk-delay", "0.5")
    yield u
    u.stop()


class Recorder:
    def __init__(self):
        self.events = []

    def answered(self, llm):
        self.events.append(("answered", llm))

    def fell_back(self, llm, kind):
        self.events.append(("fell_back", llm, kind))

    def first_byte(self, llm, seconds):
        self.events.append(("first_byte", llm))


PAYLOAD = {"messages": [{"role": "user", "content": "What is 2 + 2?"}]}
CFG = GatewayConfig(max_tries=3, connect_timeout_s=1, read_timeout_s=1)


def run(coro):
    return asyncio.run(coro)


def test_fallback_past_dead_failing_and_slow_upstreams(ups):
    async def go():
        rec = Recorder()
        gw = Gateway(rec)
        dead = Upstream(url=f"http://127.0.0.1:{free_port()}/v1")  # nothing listens there
        tries = [("dead", dead), ("down503", Upstream(url=ups.urls["down503"])),
                 ("slow", Upstream(url=ups.urls["slow"])), ("alpha", Upstream(url=ups.urls["alpha"]))]
        answer = await gw.complete(PAYLOAD, tries, GatewayConfig(max_tries=4, connect_timeout_s=1, read_timeout_s=1),
                                   stream=False)
        assert answer.llm == "alpha" and "alpha answers: What is 2 + 2?" in answer.body["choices"][0]["message"]["content"]
        assert [t["model"] for t in answer.tried] == ["dead", "down503", "slow"]
        assert [e[2] for e in rec.events if e[0] == "fell_back"] == ["connect", "http_503", "timeout"]
        # the failed upstreams are now tried last: the next request goes straight to alpha
        again = await gw.complete(PAYLOAD, tries, CFG, stream=False)
        assert again.llm == "alpha" and again.tried == []
        await gw.close()
        # at most max_tries asked: the fourth never is
        fresh = Gateway()
        with pytest.raises(AllFailed) as e:
            await fresh.complete(PAYLOAD, tries, CFG, stream=False)
        assert [t["model"] for t in e.value.tried] == ["dead", "down503", "slow"]
        # an upstream that failed is not asked again in the same request for another LLM it serves
        shared = [("a", Upstream(url=ups.urls["down503"])), ("b", Upstream(url=ups.urls["down503"])),
                  ("alpha", Upstream(url=ups.urls["alpha"]))]
        third = Gateway()
        answer = await third.complete(PAYLOAD, shared, CFG, stream=False)
        assert answer.llm == "alpha" and [t["model"] for t in answer.tried] == ["a"]
        await fresh.close()
        await third.close()
    run(go())


def test_a_4xx_passes_through_and_is_not_retried(ups):
    async def go():
        gw = Gateway()
        tries = [("refuses400", Upstream(url=ups.urls["refuses400"])), ("alpha", Upstream(url=ups.urls["alpha"]))]
        before = ups.calls("alpha")["calls"]
        answer = await gw.complete(PAYLOAD, tries, CFG, stream=False)
        assert answer.status == 400 and b"refuses400 fails with 400" in answer.content and answer.llm == "refuses400"
        assert ups.calls("alpha")["calls"] == before
        await gw.close()
    run(go())


def test_streaming_relays_the_upstreams_events_and_the_upstream_model_name(ups, monkeypatch):
    monkeypatch.setenv("BETA_KEY", "sk-test-123")

    async def go():
        gw = Gateway()
        up = Upstream(url=ups.urls["beta"], model="beta-2025", api_key_env="BETA_KEY")
        answer = await gw.complete({**PAYLOAD, "stream": True}, [("beta", up)], CFG, stream=True)
        assert answer.media_type == "text/event-stream" and answer.first.startswith(b"data: ")
        raw = b"".join([chunk async for chunk in relay(answer, 60)]).decode()
        events = [e[len("data: "):] for e in raw.split("\n\n") if e.startswith("data: ")]
        assert events[-1] == "[DONE]"
        text = "".join(json.loads(e)["choices"][0]["delta"].get("content", "") for e in events[:-1])
        assert text == "beta answers: What is 2 + 2?"
        seen = ups.calls("beta")
        assert seen["models"][-1] == "beta-2025" and seen["authorization"] == "Bearer sk-test-123"
        # credentials in the URL go as Basic auth, in place of the key (one Authorization header)
        with_user = Upstream(url=ups.urls["beta"].replace("://", "://user:pw@"), api_key_env="BETA_KEY")
        answer = await gw.complete(PAYLOAD, [("beta", with_user)], CFG, stream=False)
        assert answer.llm == "beta" and not answer.tried
        assert ups.calls("beta")["authorization"] == "Basic dXNlcjpwdw=="  # user:pw
        await gw.close()
    run(go())


def test_the_environments_proxy_is_used_unless_no_proxy_names_the_host(ups, monkeypatch):
    dead_proxy = f"http://127.0.0.1:{free_port()}"
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", dead_proxy)

    async def ask():
        gw = Gateway()
        try:
            return await gw.complete(PAYLOAD, [("alpha", Upstream(url=ups.urls["alpha"]))], CFG, stream=False)
        finally:
            await gw.close()
    with pytest.raises(AllFailed) as e:  # through the proxy, which is not there
        run(ask())
    assert "cannot reach the upstream" in e.value.tried[0]["error"]
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    assert run(ask()).llm == "alpha"


def test_a_missing_api_key_is_a_failure_that_falls_back(ups, monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY", raising=False)

    async def go():
        gw = Gateway()
        tries = [("beta", Upstream(url=ups.urls["beta"], api_key_env="NO_SUCH_KEY")),
                 ("alpha", Upstream(url=ups.urls["alpha"]))]
        answer = await gw.complete(PAYLOAD, tries, CFG, stream=False)
        assert answer.llm == "alpha" and "NO_SUCH_KEY" in answer.tried[0]["error"]
        await gw.close()
    run(go())


def test_control_from_body_and_headers():
    """The body's fields and the x-jeirt-* headers' (validated by their schemas before this)."""
    c = ChatControl.from_request({"policy": "most_likely", "user": "u1"},
                                 {"candidates": ["a", "b"], "min_p": 0.5, "sticky": False})
    assert (c.policy, c.candidates, c.min_p, c.conversation, c.sticky) == ("most_likely", ["a", "b"], 0.5, "u1", False)
    # `user` names an end user: it pins only when asked; a conversation key of its own pins
    assert not ChatControl.from_request({"user": "u1"}, {}).sticky
    assert ChatControl.from_request({"user": "u1", "sticky": True}, {}).sticky
    assert ChatControl.from_request({}, {"conversation": "c1"}).sticky
    assert not ChatControl.from_request({}, {"conversation": "c1", "sticky": False}).sticky
    assert ChatControl.from_request({"min_p": 0.5}, {"min_p": 0.5}).min_p == 0.5  # the same both ways
    with pytest.raises(RequestError, match="policy is given twice, differently: the body's `policy` is "
                                           "'most_likely', the header x-jeirt-policy is 'tuned'"):
        ChatControl.from_request({"policy": "most_likely"}, {"policy": "tuned"})
    with pytest.raises(RequestError, match=r"unknown header\(s\) \['x-jeirt-budget'\]"):
        ChatControl.from_request({}, {}, ["content-type", "x-jeirt-budget"])


def test_conversations_expire_and_stay_bounded():
    c = Conversations(size=2, ttl_s=0.2)
    c.put("a", "x")
    c.put("b", "y")
    c.put("c", "z")
    assert c.get("a") is None and c.get("b") == "y"
    time.sleep(0.25)
    assert c.get("b") is None


def test_router_config_upstreams_are_typed():
    cfg = RouterConfig(upstreams={"a": "http://127.0.0.1:1/v1", "b": {"url": "https://x/v1", "api_key_env": "K"}})
    assert cfg.upstream("a").url.endswith("/v1") and cfg.upstream("b").api_key_env == "K" and cfg.upstream("c") is None
    with pytest.raises(ValueError, match="api_keyenv"):
        RouterConfig(upstreams={"b": {"url": "https://x/v1", "api_keyenv": "K"}})
    with pytest.raises(ValueError, match="max_tries"):
        RouterConfig(gateway={"max_tries": 0})
    # exploring and shadowing need what they build on, said in the error
    with pytest.raises(ValueError, match="explore needs learning: set enabled: true"):
        RouterConfig(learning={"explore": 0.1})
    with pytest.raises(ValueError, match="shadow needs the decision log"):
        RouterConfig(decisions={"enabled": False}, shadow={"share": 0.1})
    with pytest.raises(ValueError, match="shadow.alias 'champion' is the alias served"):
        RouterConfig(shadow={"alias": "champion", "share": 0.1})
    assert RouterConfig(learning={"enabled": True, "explore": 0.1}, shadow={"share": 0.1}).shadow.alias == "challenger"


def test_a_dripping_upstream_is_cut_at_the_try_deadline_and_the_next_llm_answers(ups):
    async def go():
        rec, start = Recorder(), time.perf_counter()
        gw = Gateway(rec)
        tries = [("drip", Upstream(url=ups.urls["drip"])), ("alpha", Upstream(url=ups.urls["alpha"]))]
        answer = await gw.complete(PAYLOAD, tries, GatewayConfig(connect_timeout_s=1, read_timeout_s=2,
                                                                 try_deadline_s=1.5), stream=False)
        assert answer.llm == "alpha" and time.perf_counter() - start < 4
        assert [e[2] for e in rec.events if e[0] == "fell_back"] == ["deadline"]
        # the request's own deadline: nothing is tried once it has passed
        await gw.close()
        gw = Gateway()  # nothing cooling down
        with pytest.raises(AllFailed) as e:
            await gw.complete(PAYLOAD, tries, GatewayConfig(read_timeout_s=2, try_deadline_s=5,
                                                            request_deadline_s=1), stream=False)
        assert "deadline" in e.value.tried[0]["error"] and "request's deadline" in e.value.tried[-1]["error"]
        await gw.close()
    run(go())


def test_an_oversized_answer_is_refused_and_a_long_stream_is_cut(ups):
    async def go():
        gw = Gateway()
        tries = [("big", Upstream(url=ups.urls["big"])), ("alpha", Upstream(url=ups.urls["alpha"]))]
        answer = await gw.complete(PAYLOAD, tries, GatewayConfig(max_answer_bytes=2048), stream=False)
        assert answer.llm == "alpha" and "more than 2048 bytes" in answer.tried[0]["error"]
        streamed = await gw.complete({**PAYLOAD, "stream": True}, [("long", Upstream(url=ups.urls["long"]))], CFG,
                                     stream=True)
        start = time.perf_counter()
        raw = b"".join([chunk async for chunk in relay(streamed, 0.5)]).decode()
        assert time.perf_counter() - start < 2 and "ran past the gateway's limit of 0.5 s" in raw
        await gw.close()
    run(go())


def test_a_streams_usage_is_read_from_its_last_event(ups):
    async def go():
        gw, seen = Gateway(), []

        async def on_end(meter):
            seen.append(meter.usage)
        payload = {**PAYLOAD, "stream": True, "stream_options": {"include_usage": True}}
        answer = await gw.complete(payload, [("alpha", Upstream(url=ups.urls["alpha"]))], CFG, stream=True)
        text = b"".join([chunk async for chunk in relay(answer, 60, on_end)])
        assert seen == [{"prompt_tokens": 1, "completion_tokens": 7, "total_tokens": 1}]  # 'alpha answers: What is 2 + 2?'
        assert b'"usage"' in text  # the client asked for it: passed on
        await gw.close()
    run(go())


def test_every_stream_is_asked_for_its_usage_and_a_client_that_did_not_ask_never_sees_it(ups):
    """Budgets cannot be skipped by streaming: the gateway always asks for usage, and strips the
    usage-only event from the stream of a client that did not ask for it."""
    payload, asked = ask_for_usage({**PAYLOAD, "stream": True})
    assert payload["stream_options"] == {"include_usage": True} and not asked
    assert ask_for_usage({"stream_options": {"include_usage": True}})[1]

    async def go():
        gw, seen = Gateway(), []

        async def on_end(meter):
            seen.append(meter.usage)
        answer = await gw.complete(payload, [("alpha", Upstream(url=ups.urls["alpha"]))], CFG, stream=True)
        text = b"".join([chunk async for chunk in relay(answer, 60, on_end, strip_usage=True)])
        await gw.close()
        return text, seen
    text, seen = run(go())
    assert seen == [{"prompt_tokens": 1, "completion_tokens": 7, "total_tokens": 1}]
    assert b'"usage"' not in text and text.endswith(b"data: [DONE]\n\n") and b" answers:" in text


def test_a_stream_without_usage_is_counted_here_and_marked_estimated(ups):
    async def go():
        gw, seen = Gateway(), []

        async def on_end(meter):
            seen.append((meter.usage, meter.answer_text()))
        payload, _ = ask_for_usage({**PAYLOAD, "stream": True})
        answer = await gw.complete(payload, [("mute", Upstream(url=ups.urls["mute"]))], CFG, stream=True)
        b"".join([chunk async for chunk in relay(answer, 60, on_end, strip_usage=True)])
        await gw.close()
        return seen
    [(usage, text)] = run(go())
    assert usage is None and text == "mute answers: What is 2 + 2?"
    counted = estimated_usage("What is 2 + 2?", text)
    assert counted["estimated"] and counted["prompt_tokens"] >= 5 and counted["completion_tokens"] >= 8


def test_a_client_that_leaves_mid_stream_is_still_charged(ups):
    """The spend record runs to its end when the client disconnects (the generator is closed, or
    its task cancelled, midway)."""
    async def go():
        import asyncio
        gw, seen = Gateway(), []

        async def on_end(meter):
            await asyncio.sleep(0.05)  # a key store that takes its time
            seen.append(meter.answer_text())
        payload, _ = ask_for_usage({**PAYLOAD, "stream": True})
        for leave in ("close", "cancel"):
            answer = await gw.complete(payload, [("trickle", Upstream(url=ups.urls["trickle"]))], CFG, stream=True)
            stream = relay(answer, 60, on_end, strip_usage=True)

            async def read_two():
                await anext(stream)
                await anext(stream)
                await asyncio.sleep(5)
            task = asyncio.ensure_future(read_two())
            await asyncio.sleep(0.5)
            if leave == "close":
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                await stream.aclose()
            else:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                reader = asyncio.ensure_future(anext(stream))
                await asyncio.sleep(0.01)
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)
            await asyncio.sleep(0.2)
        await gw.close()
        return seen
    seen = run(go())
    # what the trickling upstream had sent when the client left (on a loaded machine, maybe its first word)
    assert len(seen) == 2 and all(t.startswith("trickle") for t in seen)


def test_an_upstream_that_dies_mid_stream_ends_the_answer_with_an_error_event(ups):
    """Once bytes went out no fallback is possible: the client gets what came, then one event that
    says the upstream broke off (not that the gateway's time limit cut it), and the stream ends."""
    async def go():
        ups.start("dies", "--pad", "200", "--chunk-delay", "0.05")
        gw = Gateway()
        answer = await gw.complete({**PAYLOAD, "stream": True}, [("dies", Upstream(url=ups.urls["dies"]))], CFG,
                                   stream=True)
        chunks, start = [], time.perf_counter()
        async for chunk in relay(answer, 60):
            chunks.append(chunk)
            if len(chunks) == 3:
                ups.kill("dies")
        await gw.close()
        return b"".join(chunks).decode(), time.perf_counter() - start
    raw, seconds = run(go())
    events = [e for e in raw.split("\n\n") if e]
    assert seconds < 5 and len(events) >= 4 and "dies" in events[0]
    error = json.loads(events[-1].removeprefix("data: "))["error"]
    assert error["type"] == "upstream_error" and "broke off the stream" in error["message"], error


def test_the_stream_meter_keeps_events_whole_across_chunks():
    meter = StreamMeter(strip_usage=True)
    event = b'data: {"choices": [{"delta": {"content": "hi"}}]}\n\n'
    usage = b'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}\n\n'
    out = meter.feed(event[:10]) + meter.feed(event[10:] + usage[:7]) + meter.feed(usage[7:] + b"data: [DONE]\n\n")
    assert out == event + b"data: [DONE]\n\n" and meter.usage["prompt_tokens"] == 3 and meter.answer_text() == "hi"
    assert StreamMeter().feed(usage) == usage  # kept where the client asked


def test_upstream_failures_name_neither_the_url_nor_the_body(ups):
    """An upstream URL may carry credentials and an error body may echo them: neither reaches
    what a failure says (the 502's body, the log)."""
    async def go():
        port = ups.urls["BODY-PLANTED"].split(":")[2].split("/")[0]
        tries = [("failing", Upstream(url=f"http://user:URL-PLANTED@127.0.0.1:{port}/v1")),
                 ("dead", Upstream(url=f"http://user:URL-PLANTED@127.0.0.1:{free_port()}/v1"))]
        gw = Gateway()
        with pytest.raises(AllFailed) as e:
            await gw.complete(PAYLOAD, tries, CFG, stream=False)
        await gw.close()
        return str(e.value)
    said = run(go())
    assert "answered 500" in said and "cannot reach the upstream" in said
    assert "PLANTED" not in said
