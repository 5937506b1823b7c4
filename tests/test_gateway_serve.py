"""The gateway through a real Serve deployment, driven by the OpenAI Python SDK (sync and async,
streaming and not) in front of OpenAI-compatible upstreams on loopback; its metrics scraped from
Ray's Prometheus endpoint. One Ray cluster for the module, behind HAProxy (`jeirt serve --ingress
haproxy`: HAProxy straight to the Router replicas; tests/test_serve_app.py runs Serve's own proxy).

The space's 16 LLMs are in three groups of upstream servers, so that no test depends on another's
order: LLMs 0-5 on u0, u1, u2 (the tests that need healthy upstreams ask for these as
candidates), 6-10 on v0, v1, v2 (the fault test kills v1 and v2) and 11-15 on w0, w1, w2 (the load
test kills w1 midway)."""

import asyncio
import re
import time

import httpx
import pytest

from jeirt_ray.encoders import HashingEncoder
from jeirt_ray.experiments.methods import train_space
from jeirt_ray.experiments.prepare import prepare
from jeirt_ray.model.train import TrainConfig

from .conftest import free_port, serving
from .upstream import Upstreams

import openai
NAME = "gateway-test"


@pytest.fixture(scope="module")
def world(tmp_path_factory, synthetic):
    ups = Upstreams()
    for server in ("u0", "u1", "u2", "v0", "v1", "v2", "w0", "w1", "w2"):
        ups.start(server, "--chunk-delay", "0.01")
    prep = prepare(synthetic, HashingEncoder(384), progress=False)
    space = train_space(prep, TrainConfig(kind="jeirt", dim=16, lr=3e-3, max_epochs=40), members=1, progress=False)
    names = space.model_names
    server_of = {n: f"{'u' if i < 6 else 'v' if i < 11 else 'w'}{i % 3}" for i, n in enumerate(names)}
    costs = {n: float(i + 1) for i, n in enumerate(names)}
    decisions = tmp_path_factory.mktemp("decisions")

    def edit(app):
        router = next(d for d in app["deployments"] if d["name"] == "Router")
        router["user_config"].update(upstreams={n: ups.urls[s] for n, s in server_of.items()}, usd_per_call=costs,
                                     gateway={"max_tries": 3, "read_timeout_s": 10, "cooldown_s": 30},
                                     decisions={"path": str(decisions), "log_answers": "text", "flush_s": 0.3})
    metrics_port = free_port()
    try:
        with serving(space, NAME, tmp_path_factory.mktemp("gateway"), edit=edit, cpus=0.5, encoder="hashing",
                     ray_init={"_metrics_export_port": metrics_port}, ingress="haproxy") as url:
            yield {"url": url, "ups": ups, "names": names, "server_of": server_of, "prep": prep, "costs": costs,
                   "metrics": f"http://127.0.0.1:{metrics_port}/metrics", "healthy": names[:6],
                   "faulty": names[6:11], "load": names[11:], "decisions": decisions}
    finally:
        ups.stop()


def client(world):
    return openai.OpenAI(base_url=f"{world['url']}/v1", api_key="unused", max_retries=0, timeout=60)


def question(world, i=0):
    return str(world["prep"].data.texts[i])


def test_sdk_gets_the_upstreams_answer_with_headers(world):
    raw = client(world).chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": question(world)}],
        extra_body={"candidates": world["healthy"]})
    done = raw.parse()
    llm = raw.headers["x-jeirt-model"]
    assert llm in world["healthy"] and done.model == llm  # the upstream was asked for that LLM by name
    assert done.choices[0].message.content == f"{world['server_of'][llm]} answers: {question(world)}"
    assert 0 < float(raw.headers["x-jeirt-p-correct"]) < 1 and raw.headers["x-jeirt-policy"] == "tuned"
    assert raw.headers["x-jeirt-space"] == f"{NAME}/1" and raw.headers["x-jeirt-fallbacks"] == ""
    routing = raw.http_response.json()["routing"]
    assert routing["answered_by"] == llm and routing["ranking"][0] == llm


def _logged(world, decision_id, timeout_s=10.0):
    """The decision's rows once a replica has written them."""
    from jeirt_ray.feedback.log import filesystem, find
    fs, root = filesystem(str(world["decisions"]))
    deadline = time.monotonic() + timeout_s
    while not (rows := find(fs, root, decision_id)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return rows


def test_every_answer_is_logged_with_who_answered_what_it_cost_and_its_id(world):
    """Whole and streamed answers: the id in the header (and the JSON body's `id`), the log's row
    with the LLM that answered, its tokens, cost and the answer (log_answers: text), no query text."""
    messages = [{"role": "user", "content": question(world, 3)}]
    raw = client(world).chat.completions.with_raw_response.create(
        model="auto", messages=messages, extra_body={"candidates": world["healthy"]})
    whole_id = raw.headers["x-jeirt-request-id"]
    assert raw.parse().id == whole_id
    with client(world).chat.completions.with_streaming_response.create(
            model="auto", messages=messages, stream=True, extra_body={"candidates": world["healthy"]}) as response:
        stream_id = response.headers["x-jeirt-request-id"]
        text = "".join(c.choices[0].delta.content or "" for c in response.parse() if c.choices)
    assert stream_id != whole_id
    for decision_id in (whole_id, stream_id):
        [row] = _logged(world, decision_id)
        llm = row["answered_by"]
        assert row["route"] == "chat" and row["status"] == 200 and llm in world["healthy"]
        assert row["chosen"] == llm and row["tried"] == [] and set(row["candidates"]) == set(world["healthy"])
        assert row["cost_usd"] == world["costs"][llm] and row["completion_tokens"] > 0
        assert row["answer"] == text and row["query"] is None and len(row["embedding"]) == 384


def test_streaming_arrives_chunk_by_chunk_with_the_same_text(world):
    messages = [{"role": "user", "content": question(world, 1)}]
    body = {"candidates": world["healthy"]}
    whole = client(world).chat.completions.create(model="auto", messages=messages, extra_body=body)
    with client(world).chat.completions.with_streaming_response.create(
            model="auto", messages=messages, stream=True, extra_body=body) as response:
        assert response.headers["x-jeirt-model"] == whole.model
        assert response.headers["content-type"].startswith("text/event-stream")
        chunks = [c for c in response.parse() if c.choices]
    assert len(chunks) > 3  # one event per word, relayed as they came
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == whole.choices[0].message.content


def test_the_async_client_streams_and_completes(world):
    async def go():
        aclient = openai.AsyncOpenAI(base_url=f"{world['url']}/v1", api_key="unused", max_retries=0, timeout=60)
        messages = [{"role": "user", "content": question(world, 2)}]
        done = await aclient.chat.completions.create(model="auto", messages=messages,
                                                     extra_body={"candidates": world["healthy"]})
        stream = await aclient.chat.completions.create(model="auto", messages=messages, stream=True,
                                                       extra_body={"candidates": world["healthy"]})
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        await aclient.close()
        return done, text
    done, text = asyncio.run(go())
    assert text == done.choices[0].message.content and text.endswith(question(world, 2))


def test_per_request_control_and_its_errors(world):
    c = client(world)
    msg = [{"role": "user", "content": question(world, 3)}]
    one = world["healthy"][3]
    assert c.chat.completions.create(model="auto", messages=msg, extra_body={"candidates": [one]}).model == one
    cheap = c.chat.completions.create(model="auto", messages=msg, extra_body={
        "candidates": world["healthy"], "max_cost": 2.0})
    assert world["costs"][cheap.model] <= 2.0
    raw = c.chat.completions.with_raw_response.create(model="auto", messages=msg, extra_headers={
        "x-jeirt-policy": "most_likely", "x-jeirt-candidates": ",".join(world["healthy"])})
    assert raw.headers["x-jeirt-policy"] == "most_likely"
    for extra, headers, status, text in [
        ({"candidates": ["gpt-9"]}, {}, 404, "unknown candidate"),
        ({"candidates": world["healthy"], "min_p": 1.0}, {}, 409, "no candidate LLM reaches min_p"),
        ({"candidates": world["healthy"], "max_cost": 0.5}, {}, 409, "costs at most"),
        ({"policy": "tuned"}, {"x-jeirt-policy": "most_likely"}, 409, "policy is given twice"),
        ({"min_p": 2}, {}, 422, "min_p"),
        ({}, {"x-jeirt-budget": "3"}, 422, "unknown header"),
    ]:
        with pytest.raises(openai.APIStatusError) as e:
            c.chat.completions.create(model="auto", messages=msg, extra_body=extra, extra_headers=headers)
        assert e.value.status_code == status and text in e.value.response.text, (extra, e.value.response.text)


def test_a_conversation_keeps_its_llm(world):
    """With a conversation key (`user` and sticky true, or x-jeirt-conversation), every turn goes
    to the LLM of the first; without one, with `user` alone (an end user has many conversations),
    or with sticky false, a turn is routed by its own last message."""
    c = client(world)
    pick = {}
    texts = [str(t) for t in world["prep"].data.texts[:200]]
    for t in texts:
        r = httpx.post(f"{world['url']}/v1/route", json={"query": t, "candidates": world["healthy"]}, timeout=30)
        pick[t] = r.json()["results"][0]["chosen"]
    first = texts[0]
    later = next(t for t in texts if pick[t] != pick[first])
    turn1 = c.chat.completions.create(model="auto", user="conv-1", messages=[{"role": "user", "content": first}],
                                      extra_body={"candidates": world["healthy"], "sticky": True})
    history = [{"role": "user", "content": first}, {"role": "assistant", "content": "..."},
               {"role": "user", "content": later}]
    turn2 = c.chat.completions.create(model="auto", user="conv-1", messages=history,
                                      extra_body={"candidates": world["healthy"], "sticky": True})
    assert turn1.model == turn2.model == pick[first]
    by_header = c.chat.completions.create(model="auto", messages=history, extra_body={"candidates": world["healthy"]},
                                          extra_headers={"x-jeirt-conversation": "conv-2"})
    assert by_header.model == pick[first]  # a conversation key of its own pins without being asked
    end_user = c.chat.completions.create(model="auto", user="conv-1", messages=history,
                                         extra_body={"candidates": world["healthy"]})
    assert end_user.model == pick[later]  # `user` alone names an end user: not pinned
    # a client that sends only the new message: the replica remembers the conversation
    alone = c.chat.completions.create(model="auto", user="conv-1", messages=[{"role": "user", "content": later}],
                                      extra_body={"candidates": world["healthy"], "sticky": True})
    assert alone.model == pick[first] or alone.model == pick[later]  # another replica may not have seen it
    fresh = c.chat.completions.create(model="auto", messages=history, extra_body={"candidates": world["healthy"]})
    assert fresh.model == pick[later]
    unstuck = c.chat.completions.create(model="auto", user="conv-1", messages=history,
                                        extra_body={"candidates": world["healthy"], "sticky": False})
    assert unstuck.model == pick[later]


def test_dead_upstreams_fall_back_and_all_requests_are_answered(world):
    """v1 and v2 killed: every upstream of the faulty group is dead but v0, and 20 of 20 requests
    (half streamed) are answered, by LLMs on v0; the first ones say which LLMs failed."""
    ups, c = world["ups"], client(world)
    ups.kill("v1")
    ups.kill("v2")
    answered, fallbacks = [], []
    for i in range(20):
        msg = [{"role": "user", "content": question(world, 10 + i)}]
        if i % 2:
            with c.chat.completions.with_streaming_response.create(
                    model="auto", messages=msg, stream=True, extra_body={"candidates": world["faulty"]}) as r:
                text = "".join(ch.choices[0].delta.content or "" for ch in r.parse() if ch.choices)
                llm, fell = r.headers["x-jeirt-model"], r.headers["x-jeirt-fallbacks"]
        else:
            raw = c.chat.completions.with_raw_response.create(model="auto", messages=msg,
                                                               extra_body={"candidates": world["faulty"]})
            text, llm, fell = raw.parse().choices[0].message.content, raw.headers["x-jeirt-model"], \
                raw.headers["x-jeirt-fallbacks"]
        assert text.startswith("v0 answers: ") and world["server_of"][llm] == "v0"
        answered.append(llm)
        fallbacks += [f for f in fell.split(",") if f]
    assert len(answered) == 20
    assert all(world["server_of"][f] in ("v1", "v2") for f in fallbacks)


def test_32_concurrent_clients_half_streaming_lose_nothing_when_an_upstream_stops(world):
    """32 SDK clients (every other one streaming), 3 requests each, w1 stopped (SIGTERM: it finishes
    what it serves, as in a rolling restart) once a third of the requests are done: no client
    request fails; the ones that met the stopped upstream fell back and say so. (SIGKILL breaks
    the streams it is serving at that moment: benchmarks/gateway_load.py counts them.)"""
    import threading
    ups, texts = world["ups"], [str(t) for t in world["prep"].data.texts[:96]]
    results, lock, started = [], threading.Lock(), threading.Event()

    def run(k):
        c = client(world)
        for j in range(3):
            text, ok, fell = texts[3 * k + j], False, ""
            try:
                msg, body = [{"role": "user", "content": text}], {"candidates": world["load"]}
                if k % 2:
                    with c.chat.completions.with_streaming_response.create(
                            model="auto", messages=msg, stream=True, extra_body=body) as r:
                        got = "".join(ch.choices[0].delta.content or "" for ch in r.parse() if ch.choices)
                        fell = r.headers["x-jeirt-fallbacks"]
                else:
                    raw = c.chat.completions.with_raw_response.create(model="auto", messages=msg, extra_body=body)
                    got, fell = raw.parse().choices[0].message.content, raw.headers["x-jeirt-fallbacks"]
                ok = got.endswith(text)
            except openai.APIError as e:
                got = repr(e)
            with lock:
                results.append((ok, fell, got))
                if len(results) >= 32:
                    started.set()

    threads = [threading.Thread(target=run, args=(k,)) for k in range(32)]
    for t in threads:
        t.start()
    assert started.wait(120)
    ups.kill("w1", graceful=True)
    for t in threads:
        t.join(300)
    failed = [r for r in results if not r[0]]
    assert len(results) == 96 and not failed, failed[:3]
    fallbacks = [f for _, fell, _ in results for f in fell.split(",") if f]
    assert all(world["server_of"][f] == "w1" for f in fallbacks)
    print(f"load: {len(results)} requests, 0 failed, {len(fallbacks)} fallback(s) from the killed upstream")


def test_metrics_are_scraped_from_rays_endpoint(world):
    c = client(world)
    c.chat.completions.create(model="auto", messages=[{"role": "user", "content": question(world, 5)}],
                              extra_body={"candidates": world["healthy"]})
    wanted = ["ray_jeirt_gateway_requests", "ray_jeirt_upstream_first_byte_seconds", "ray_jeirt_routing_seconds",
              "ray_jeirt_encoder_batch_size"]
    deadline, text = time.monotonic() + 90, ""
    while time.monotonic() < deadline:
        text = httpx.get(world["metrics"], timeout=10).text
        if all(w in text for w in wanted):
            break
        time.sleep(2)
    missing = [w for w in wanted if w not in text]
    assert not missing, f"not exported: {missing}"
    assert re.search(r'ray_jeirt_gateway_requests[^\n]*llm="[^"]+"', text)


def test_the_front_door_is_haproxy(world):
    """The module's requests reach the Routers through HAProxy, not Serve's proxy."""
    import psutil
    port = int(world["url"].rsplit(":", 1)[1])
    listeners = {c.pid for c in psutil.net_connections("tcp") if c.status == "LISTEN" and c.laddr.port == port}
    assert [psutil.Process(p).name() for p in listeners] == ["haproxy"]
