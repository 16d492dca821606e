"""Tries the plan's candidates in order; falls back on retryable failures.

Connect errors, timeouts, resets, 429, 5xx and 200s that are not JSON move on to the next
candidate; any other 4xx is returned at once (`failures.py` says what each costs the
deployment). A stream falls back only before its first event has been handed to the
client: the first events are read (and checked for an in-stream error, and for JSON)
before the response starts. A stream that breaks later, or sends an event that is not
JSON, ends with a `stream_interrupted` error event.

A whole answer a window cut short (`context/truncation.py`, judged by the gateway's
`judge_cut`) is set aside, like a context-length 400, when a later candidate has a
strictly larger window: the request goes there, and the cut answer is what the client
gets only if nothing later answers.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import orjson

from fleetgate.config.schema import CircuitConfig
from fleetgate.context.truncation import CUT_SHORT_NOTE, Cut
from fleetgate.errors import GatewayError
from fleetgate.execute.context_errors import parse_context_error
from fleetgate.execute.event_check import EndCheck
from fleetgate.execute.failures import (
    classify_exception,
    client_error,
    error_event,
    exhausted_error,
    queue_full_error,
    record_failure,
)
from fleetgate.execute.framing import (
    NDJSON,
    SSE,
    Framing,
    framing_for,
)
from fleetgate.execute.http1 import UpstreamIOError, UpstreamResponse
from fleetgate.execute.outcome import (
    CLIENT_ERROR,
    CONTEXT_EXCEEDED,
    CUT_SHORT,
    INVALID_RESPONSE,
    REDIRECTED,
    STREAM_BROKEN,
    Attempt,
    classify_status,
    error_message,
    parse_retry_after,
    redirect_message,
)
from fleetgate.execute.relay import Tap, relay
from fleetgate.execute.resume import (
    CHAT_KINDS,
    WINDOW,
    Continuation,
    WholeContinuation,
    can_take_over,
    settings_for,
    switched,
)
from fleetgate.execute.resume import ENDPOINTS as RESUMED_ENDPOINTS
from fleetgate.execute.sse import CR
from fleetgate.execute.upstream import UpstreamPool, request_headers
from fleetgate.execute.usage import (
    answer_facts,
    stop_reason,
    stream_facts,
    take_usage,
)
from fleetgate.execute.worker_slots import WorkerSlots
from fleetgate.fleet import Deployment, Fleet
from fleetgate.ingress.profile import RequestProfile
from fleetgate.redact import Redactor
from fleetgate.routing.plan import Candidate, Dropped, RoutePlan
from fleetgate.state.runtime import RuntimeState
from fleetgate.trace_context import new_span_bytes
from fleetgate.translate.registry import Protocols, UnreadableAnswer, Wire


@dataclass(frozen=True, slots=True)
class UpstreamRoute:
    """Where an endpoint goes upstream and how it streams (which kinds serve it, natively
    or translated, is `translate/registry.py`)."""

    path: str  # under the base URL; `/api/...` paths are under the server root (no `/v1`)
    framing: str  # "sse" | "ndjson" | "none"


# endpoint -> its upstream route: the one table of what is sent where
UPSTREAM_PATHS: dict[str, UpstreamRoute] = {
    "chat.completions": UpstreamRoute("/chat/completions", "sse"),
    "completions": UpstreamRoute("/completions", "sse"),
    "embeddings": UpstreamRoute("/embeddings", "none"),
    "messages": UpstreamRoute("/messages", "sse"),
    "responses": UpstreamRoute("/responses", "sse"),
    "ollama.chat": UpstreamRoute("/api/chat", "ndjson"),
    "ollama.generate": UpstreamRoute("/api/generate", "ndjson"),
    "ollama.embed": UpstreamRoute("/api/embed", "none"),
    "ollama.embeddings": UpstreamRoute("/api/embeddings", "none"),
    "ollama.show": UpstreamRoute("/api/show", "none"),
}


def upstream_url(base_url: str, kind: str, route: UpstreamRoute) -> str:
    """An Ollama base URL may name the server root or its `/v1`; both reach both APIs."""
    if kind != "ollama":
        return base_url + route.path
    root = base_url.removesuffix("/v1")
    return root + route.path if route.path.startswith("/api/") else root + "/v1" + route.path


@dataclass(slots=True)
class Outcome:
    """The answer to send back: a whole body, or a stream whose first event is in hand."""

    attempts: list[Attempt]
    candidate: Candidate
    status: int
    content_type: str
    body: bytes | None = None
    stream: AsyncIterator[bytes] | None = None
    # ends the stream's attempt (its connection, its slot) if the stream was never started:
    # an async generator dropped before its first step never runs its own `finally`
    end_stream: Callable[[], None] = lambda: None
    upstream_seconds: float = 0.0  # time spent waiting on upstreams before answering
    extra_headers: dict[str, str] = field(default_factory=dict)
    cut: Cut | None = None  # a window cut this whole answer (judged by `Executor.judge_cut`)
    judged: bool = False  # a stream's end was judged already (by its continuation)
    # where the stream, when it is a plain relay, takes a writer for the client's side
    tap: Tap | None = None


class ChainExhausted(GatewayError):
    """Every candidate failed; carries the attempts for the log."""

    def __init__(self, error: GatewayError, attempts: list[Attempt]) -> None:
        super().__init__(
            error.code,
            error.message,
            param=error.param,
            status=error.status,
            headers=error.headers,
            upstream_body=error.upstream_body,
        )
        self.attempts = attempts


def attempt_row(candidate: Candidate, plan: RoutePlan, index: int) -> Attempt:
    """The request log's row for trying `candidate`, before anything happened."""
    dep = candidate.deployment
    return Attempt(
        index=index,
        deployment_id=dep.id,
        provider_id=dep.provider.id,
        upstream_model=dep.upstream_model,
        scope=candidate.scope,
        params=candidate.params,
        quantization=dep.quantization,
        dropped_params=list(candidate.drop_params) or None,
        preferences=plan.notes.get("preferences"),
        key_label=candidate.key_label,
        virtual_model=candidate.virtual_model,
        tier=candidate.tier,
    )


class Executor:
    def __init__(self, pool: UpstreamPool, state: RuntimeState) -> None:
        self.pool = pool
        self.state = state
        # told (deployment id, tokens) when a context error states the worker's window
        self.on_context_limit: Callable[[str, int], None] | None = None
        # whether a window cut a whole answer (the attempt's usage, the window assumed)
        self.judge_cut: Callable[[RequestProfile, Deployment, Attempt, int | None], Cut | None]
        self.judge_cut = _no_cut
        self.slots = WorkerSlots()
        self.protocols = Protocols()  # native or translated, per attempt

    async def run(self, plan: RoutePlan, profile: RequestProfile, fleet: Fleet) -> Outcome:
        attempts: list[Attempt] = []
        upstream_seconds = 0.0
        exceeded_window: int | None = None  # set once an upstream said the context is too long
        of = plan.window_of or _declared_window
        queue_full: list[str] = []  # deployments skipped: their worker's queue was full
        kept: Outcome | None = None  # a cut answer set aside for a larger window
        resumed: WholeContinuation | None = None  # how a larger window goes on from it
        for position, candidate in enumerate(plan.candidates):
            dep = candidate.deployment
            if exceeded_window is not None and not _larger(dep, exceeded_window, of):
                plan.dropped.append(
                    Dropped(dep.id, "execute", f"window not larger than {exceeded_window}")
                )
                continue
            sent = profile  # the request this candidate gets
            wire = None
            if resumed is not None and can_take_over(resumed.first, candidate, resumed.settings):
                wire = self.protocols.continuation_wire(
                    resumed.profile, dep, dep.provider.kind in CHAT_KINDS
                )
                if wire is not None:  # it goes on from the cut answer's text
                    sent = resumed.profile
                    candidate = switched(candidate, wire.endpoint)
            if wire is None:
                wire = self.protocols.wire(profile, dep)
            local = wire.local_answer(profile)
            if local is not None:  # the translation answers it (Ollama's load request)
                attempt = attempt_row(candidate, plan, len(attempts))
                attempt.status, attempt.wire = 200, "gateway"  # no upstream call
                attempts.append(attempt)
                outcome = Outcome(attempts, candidate, 200, "application/json", local)
                outcome.upstream_seconds = upstream_seconds
                return outcome
            release, full, queued = await self._admit(candidate, plan)
            upstream_seconds += queued
            if release is None:
                if full:
                    queue_full.append(dep.id)
                continue
            attempt = attempt_row(plan.candidates[position], plan, len(attempts))
            attempt.pool_wait = queued
            attempts.append(attempt)
            cont = self._continuation(plan, profile, fleet, position, candidate)
            started = attempt.began = time.perf_counter()
            outcome = await self._attempt(
                sent, candidate, wire, attempt, started, fleet.circuit, release, cont
            )
            upstream_seconds += time.perf_counter() - started
            if outcome is not None:
                if candidate.virtual_model is not None and candidate.tier is not None:
                    outcome.extra_headers["X-Fleetgate-Tier"] = candidate.tier
                outcome.attempts = attempts
                outcome.upstream_seconds = upstream_seconds
                if outcome.body is None:  # a stream: judged at its end, by the gateway
                    if cont is not None and outcome.stream is not None:
                        outcome.stream = cont.stream(outcome, outcome.stream)
                    return outcome
                if sent is not profile and resumed is not None and kept is not None:
                    merged = resumed.merge(kept.body, outcome.body)
                    if merged is None:  # not a text answer: the cut one stands
                        self._fail(
                            attempt, INVALID_RESPONSE, "a continuation with no text", started
                        )
                        continue
                    attempt.continuation, attempt.inherited_tokens = WINDOW, resumed.produced
                    outcome.body = merged
                outcome.cut = self.judge_cut(sent, dep, attempt, of(dep))
                cut = outcome.cut
                if cut is None or cut.note != CUT_SHORT_NOTE or cut.window is None:
                    return outcome
                if not _larger_later(plan, position, cut.window, of):
                    return outcome
                # a larger window can give the whole answer: this one waits in case none does
                attempt.error_class = CUT_SHORT
                kept = outcome
                exceeded_window = max(cut.window, exceeded_window or 0)
                resumed = WholeContinuation.of(
                    profile, sent, fleet, plan.candidates[position], attempt, outcome.body
                )
                continue
            record_failure(self.state, attempt, fleet.circuit)  # from now: when it was seen
            if attempt.retryable:
                continue
            window = _exceeded_window(attempt, dep, of, self.on_context_limit)
            if attempt.error_class != CONTEXT_EXCEEDED:
                return _cut_or_raise(kept, client_error(attempt), attempts, upstream_seconds)
            if window is not None:
                exceeded_window = max(window, exceeded_window or 0)
            if exceeded_window is None or not _larger_later(plan, position, exceeded_window, of):
                error = exhausted_error(plan, attempts, self.state, fleet.circuit)
                return _cut_or_raise(kept, error, attempts, upstream_seconds)
        if queue_full and not attempts:
            raise ChainExhausted(queue_full_error(plan, queue_full, self.state), attempts)
        error = exhausted_error(plan, attempts, self.state, fleet.circuit)
        return _cut_or_raise(kept, error, attempts, upstream_seconds)

    async def _admit(
        self, candidate: Candidate, plan: RoutePlan
    ) -> tuple[Callable[[], None] | None, bool, float]:
        """A worker slot and the deployment's health let this attempt go: its slot's
        release; None (the reason noted in the plan) when not, whether its queue was
        full, and the seconds it waited for a slot."""
        dep = candidate.deployment
        slot = self.slots.for_provider(dep.provider)
        queued = 0.0
        if slot is not None and not slot.try_take():
            if slot.queue_full():
                plan.dropped.append(Dropped(dep.id, "execute", "worker queue full"))
                return None, True, queued
            waited = time.perf_counter()
            got = await slot.wait(dep.provider.queue_timeout)
            queued = time.perf_counter() - waited
            if not got:
                plan.dropped.append(Dropped(dep.id, "execute", "timed out in worker queue"))
                return None, True, queued
        release = slot.release if slot is not None else _no_slot
        if not self.state.try_begin(dep.id, time.time()):
            release()
            plan.dropped.append(Dropped(dep.id, "execute", "half-open probe in flight"))
            return None, False, queued
        if self.state.health(dep.id).probing and not await self.state.claim_probe(
            dep.id, dep.provider.timeouts.total
        ):
            self.state.abandon_probe(dep.id)
            release()
            plan.dropped.append(
                Dropped(dep.id, "execute", "half-open probe in flight on another replica")
            )
            return None, False, queued
        return release, False, queued

    def _continuation(
        self,
        plan: RoutePlan,
        profile: RequestProfile,
        fleet: Fleet,
        position: int,
        candidate: Candidate,
    ) -> Continuation | None:
        """What may continue this attempt's stream if it ends early (`execute/resume.py`);
        None when nothing can (its stream is then relayed as it always was)."""
        if (
            not profile.stream
            or position + 1 == len(plan.candidates)  # nothing after it
            or profile.endpoint not in RESUMED_ENDPOINTS
        ):
            return None
        settings = settings_for(fleet, candidate)
        if settings.max_continuations == 0 or not (
            settings.after_interruption or settings.after_window
        ):
            return None
        cont = Continuation(
            plan,
            profile,
            fleet,
            position,
            settings,
            NDJSON if profile.endpoint.startswith("ollama.") else SSE,
            self.judge_cut,
            plan.window_of or _declared_window,
            self._continue_at,
        )
        return cont if cont.later(None) else None

    async def _continue_at(
        self,
        candidate: Candidate,
        profile: RequestProfile,
        cont: Continuation,
        reason: str,
        inherited: int,
    ) -> Outcome | None:
        """One continuation attempt: `profile` is the request that continues the answer;
        its stream, whose first events are in hand, or None when the attempt failed."""
        dep = candidate.deployment
        wire = self.protocols.continuation_wire(profile, dep, dep.provider.kind in CHAT_KINDS)
        if wire is None:
            return None
        release, _full, queued = await self._admit(candidate, cont.plan)
        if release is None:
            return None
        assert cont.outcome is not None
        attempts = cont.outcome.attempts
        attempt = attempt_row(candidate, cont.plan, len(attempts))
        attempt.pool_wait = queued
        attempt.continuation, attempt.inherited_tokens = reason, inherited
        attempts.append(attempt)
        candidate = switched(candidate, wire.endpoint)
        started = attempt.began = time.perf_counter()
        outcome = await self._attempt(
            profile, candidate, wire, attempt, started, cont.fleet.circuit, release, cont
        )
        if outcome is None:
            record_failure(self.state, attempt, cont.fleet.circuit)
            return None
        return outcome

    async def _attempt(
        self,
        profile: RequestProfile,
        candidate: Candidate,
        wire: Wire,
        attempt: Attempt,
        started: float,
        circuit: CircuitConfig,
        release: Callable[[], None],
        cont: Continuation | None = None,
    ) -> Outcome | None:
        dep = candidate.deployment
        client = self.pool.client(dep.provider)
        attempt.wire = wire.label
        started_ns = int(started * 1e9)  # the same clock: Ollama's durations count from it
        resp: UpstreamResponse | None = None
        handed_over = False
        trace = profile.trace
        if trace is not None and trace.sampled:  # the upstream joins as this attempt's child
            attempt.span_id = new_span_bytes()
        try:
            while True:
                headers = wire.headers(
                    request_headers(client, dep.provider, candidate.key_label, profile.stream),
                    profile,
                )
                if trace is None:
                    payload = wire.payload(profile, candidate)
                else:  # an unsampled attempt has no span: it passes the request's span id
                    span = attempt.span_id
                    headers = trace.upstream_headers(headers, span.hex() if span else trace.span_id)
                    payload = _traced_payload(wire, profile, candidate, attempt, trace.sampled)
                resp = await client.http.request(
                    "POST",
                    upstream_url(client.base_url, dep.provider.kind, UPSTREAM_PATHS[wire.endpoint]),
                    headers,
                    payload,
                    client.timeouts,
                )
                attempt.pool_wait += resp.pool_wait
                if resp.status < 300:
                    break
                body = client.redactor.bytes(await resp.read())  # it may quote the key
                fallback = self.protocols.refused(wire, profile, dep, resp.status, body)
                if fallback is None:
                    break
                # the host lacks the endpoint (its answer, read whole, freed the
                # connection): speak chat to it instead
                wire = fallback
                attempt.wire = wire.label
            attempt.status = resp.status
            if resp.status >= 300:  # redirects are never followed: see execute/upstream.py
                attempt.error_class = classify_status(resp.status)
                attempt.retry_after = parse_retry_after(resp.headers.get("retry-after"))
                attempt.message = (
                    redirect_message(resp.headers.get("location"))
                    if attempt.error_class == REDIRECTED
                    else error_message(body)
                )
                attempt.upstream_body = body
                attempt.latency = time.perf_counter() - started
                return None
            rewriter = wire.rewriter(dep.upstream_model, profile.model)
            content_type = resp.headers.get("content-type", "application/json")
            framing = framing_for(content_type) if profile.stream else None
            if framing is not None:
                # a continuable answer's check also finds the events that may end it
                ends = None if cont is None else EndCheck(framing, wire.endpoint)
                first = await self._first_events(
                    resp,
                    framing,
                    attempt,
                    started,
                    client.redactor,
                    trace is not None and trace.sampled,
                    ends,
                )
                if first is None:
                    return None
                handed_over = True
                finish = self._stream_end(resp, attempt, started, circuit, release)
                # the first answer's relay, when it is the client's stream, goes on itself
                inline = False
                if cont is not None and cont.outcome is None and wire.passes_through:
                    cont.inline = inline = True
                # a plain relay the client gets as it is may write in the upstream's callback
                tap = Tap() if cont is None else None
                upstream = relay(
                    resp,
                    rewriter,
                    framing,
                    first,
                    attempt,
                    wire.endpoint,
                    finish,
                    None if cont is None or ends is None else (cont, profile, dep, ends),
                    inline,
                    tap,
                )
                stream = wire.stream(upstream, profile.model, profile.body, started_ns)
                return Outcome(
                    attempts=[],
                    candidate=candidate,
                    status=resp.status,
                    content_type=wire.content_type(content_type),
                    stream=stream,
                    end_stream=finish,
                    tap=tap if stream is upstream else None,
                )
            body = await resp.read()
            try:
                data = orjson.loads(body)  # the one parse: validity, usage, and `model`
            except orjson.JSONDecodeError:
                self._fail(
                    attempt,
                    INVALID_RESPONSE,
                    "with a body that is not JSON",
                    "invalid response",
                    started,
                )
                return None
            if not isinstance(data, dict):  # every protocol's answer is a JSON object
                self._fail(
                    attempt,
                    INVALID_RESPONSE,
                    "with a body that is no object",
                    "invalid response",
                    started,
                )
                return None
            try:
                answer = wire.answer(
                    rewriter.json(body, data), profile.model, started_ns, profile.body, data
                )
            except UnreadableAnswer as exc:  # JSON, but not an answer of the wire's protocol
                what = f"with a body that is no answer ({exc})"
                self._fail(attempt, INVALID_RESPONSE, what, "invalid response", started)
                return None
            attempt.latency = time.perf_counter() - started
            attempt.ttft = attempt.latency
            take_usage(attempt, data)
            attempt.finish = stop_reason(data)
            if trace is not None and trace.sampled:
                answer_facts(attempt, data)
            self.state.record_success(
                dep.id, attempt.ttft, attempt.latency, attempt.completion_tokens
            )
            return Outcome(
                attempts=[],
                candidate=candidate,
                status=resp.status,
                content_type=wire.content_type(content_type),
                body=answer,
            )
        except (UpstreamIOError, TimeoutError) as exc:
            self._fail(attempt, *classify_exception(exc), started)
        finally:
            if not handed_over:
                if resp is not None:
                    resp.close()
                self.state.end(dep.id)
                release()
        return None

    async def _first_events(
        self,
        resp: UpstreamResponse,
        framing: Framing,
        attempt: Attempt,
        started: float,
        redactor: Redactor,
        sampled: bool = False,
        ends: EndCheck | None = None,
    ) -> tuple[bytes, bytes, int] | None:
        """Read until the first whole data event: the whole events read so far (as the
        upstream sent them: the relay sets the client's model), the start of the next one,
        and how many data events the first hold. None when the first event is an error,
        when an event is not JSON, or when the stream ends before any event. A `sampled`
        attempt notes what the answer says of itself (its span shows it). With `ends` (a
        continuable answer) the one check of the events also notes where they may end."""
        buffer = b""
        sep = framing.separator
        while chunk := await resp.read_some():
            buffer += chunk
            if CR in buffer:
                buffer = buffer.replace(b"\r\n", b"\n")
            cut = buffer.rfind(sep)
            if cut < 0:
                continue
            whole = buffer[: cut + len(sep)]
            events = self._check_head(whole, framing, attempt, started, redactor, ends)
            if events is None:
                continue  # comments only, so far
            if not events:
                return None
            attempt.ttft = time.perf_counter() - started
            if sampled:
                stream_facts(attempt, whole)
            return whole, buffer[len(whole) :], events
        # the stream ended: what it sent is all there is
        events = self._check_head(buffer, framing, attempt, started, redactor, ends)
        if events:
            attempt.ttft = time.perf_counter() - started
            if sampled:
                stream_facts(attempt, buffer)
            return buffer, b"", events
        if events is None:
            self._fail(
                attempt,
                INVALID_RESPONSE,
                "with a stream that has no event",
                "invalid response",
                started,
            )
        return None

    def _check_head(
        self,
        block: bytes,
        framing: Framing,
        attempt: Attempt,
        started: float,
        redactor: Redactor,
        ends: EndCheck | None = None,
    ) -> int | None:
        """How many data events a stream's first whole events hold when they may go to the
        client (one at least); 0 when they may not (the first is an error event, or an
        event is not JSON); None while no data event has come. Checked by `ends` when
        given (`EndCheck.events`, which notes where the answer may end)."""
        data = framing.first_data(block)
        if data is None:
            return None
        if framing.is_error(data):
            error_event(attempt, redactor.bytes(data))
            attempt.latency = time.perf_counter() - started
            return 0
        events = framing.json_events(block) if ends is None else ends.events(block)
        if events is None:
            self._fail(
                attempt,
                INVALID_RESPONSE,
                "with an event that is not JSON",
                "invalid response",
                started,
            )
            return 0
        return events

    def _stream_end(
        self,
        resp: UpstreamResponse,
        attempt: Attempt,
        started: float,
        circuit: CircuitConfig,
        release: Callable[[], None],
    ) -> Callable[..., None]:
        """What ends a handed-over stream's attempt, once: run by the stream's own end, or
        by whoever drops a stream that never started."""
        ended = False

        def end(completed: bool = False, severe: bool = False, events: int = 0) -> None:
            nonlocal ended
            if ended:
                return
            ended = True
            dep_id = attempt.deployment_id
            attempt.latency = time.perf_counter() - started
            release()
            self.state.end(dep_id)
            resp.close()  # a stream read to its end has freed its connection already
            if completed:
                self.state.record_success(dep_id, attempt.ttft, attempt.latency, events or None)
            elif attempt.error_class == STREAM_BROKEN:
                record_failure(self.state, attempt, circuit, severe=severe)

        return end

    def _fail(
        self, attempt: Attempt, error_class: str, message: str, failure: str, started: float
    ) -> None:
        attempt.error_class = error_class
        attempt.message = message
        attempt.failure = failure
        attempt.latency = time.perf_counter() - started


def _larger_later(
    plan: RoutePlan, position: int, window: int, of: Callable[[Deployment], int | None]
) -> bool:
    """Whether a candidate after `position` has a window strictly larger than `window`."""
    return any(_larger(c.deployment, window, of) for c in plan.candidates[position + 1 :])


def _cut_or_raise(
    kept: Outcome | None, error: GatewayError, attempts: list[Attempt], upstream_seconds: float
) -> Outcome:
    """The chain failed after a cut answer was set aside: that answer is the best there is
    (flagged as cut); without one, the error."""
    if kept is None:
        raise ChainExhausted(error, attempts)
    served = next(a for a in reversed(attempts) if a.error_class == CUT_SHORT)
    served.error_class = None  # the answer served, after all
    kept.attempts = attempts
    kept.upstream_seconds = upstream_seconds
    return kept


def _no_cut(
    _profile: RequestProfile, _dep: Deployment, _attempt: Attempt, _window: int | None
) -> Cut | None:
    """No judge (an executor outside a gateway): no answer is judged cut."""
    return None


def _exceeded_window(
    attempt: Attempt,
    dep: Deployment,
    of: Callable[[Deployment], int | None],
    on_limit: Callable[[str, int], None] | None,
) -> int | None:
    """For a context-length error: the window known to be too small (None: other error).

    Marks the attempt as `context_exceeded`; the window is the larger of the declared one
    and the limit the upstream stated, or None when neither is known (nothing to compare
    a sibling with, so the error returns at once).
    """
    if attempt.error_class != CLIENT_ERROR:
        return None
    exceeded = parse_context_error(attempt.upstream_body)
    if exceeded is None:
        return None
    attempt.error_class = CONTEXT_EXCEEDED
    if exceeded.limit is not None and on_limit is not None:
        on_limit(dep.id, exceeded.limit)  # the worker said its window: trust it at once
    known = [w for w in (of(dep), exceeded.limit) if w is not None]
    return max(known) if known else None


def _larger(dep: Deployment, window: int, of: Callable[[Deployment], int | None]) -> bool:
    own = of(dep)
    return own is not None and own > window


def _declared_window(dep: Deployment) -> int | None:
    return dep.context_window


def _traced_payload(
    wire: Wire, profile: RequestProfile, candidate: Candidate, attempt: Attempt, sampled: bool
) -> bytes:
    """The body sent upstream; a sampled attempt whose body is translated notes how long
    the translation took (its span)."""
    if not sampled or wire.translation is None:
        return wire.payload(profile, candidate)
    began = time.perf_counter()
    payload = wire.payload(profile, candidate)
    attempt.translated = time.perf_counter() - began
    return payload


def _no_slot() -> None:
    """Release for a provider without a concurrency limit."""
