"""The OpenAI-compatible HTTP front end (asyncio streams, HTTP/1.1 keep-alive, chunked SSE)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import zlib

from . import answers, calibration
from .engine import Engine, Request
from .options import Options
from .plan import Plan
from .streams import TOKEN_IDS, Stream
from .vlog import API, VllmLog

REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


class HttpError(Exception):
    def __init__(self, status: int, message: str, kind: str = "BadRequestError"):
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


def count_words(text) -> int:
    """Prompt tokens: one per whitespace-separated word (token-id lists count their ids)."""
    if isinstance(text, list):
        if text and isinstance(text[0], int):
            return len(text)
        return sum(count_words(t) for t in text)
    return max(1, len(str(text).split()))


def prompt_words(body: dict) -> list[str]:
    """The prompt's tokens as the prefix cache sees them: its words (chat: every message's, in order)."""
    if isinstance(body.get("messages"), list):
        return [w for m in body["messages"] if isinstance(m, dict) for w in str(m.get("content") or "").split()]
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        return [str(t) for t in prompt]
    return str(prompt or "").split()


class Server:
    def __init__(self, opts: Options, plan: Plan, log: VllmLog, engine: Engine, dev_mode: bool = False):
        self.opts, self.plan, self.log, self.engine = opts, plan, log, engine
        self.cal = calibration.load()
        self.health_hang = opts.sim["health_hang"]
        self.rng = engine.rng
        # vLLM serves its dev routes (/reset_prefix_cache among them) only with VLLM_SERVER_DEV_MODE=1
        self.dev_mode = dev_mode
        eager = bool(opts.given.get("enforce_eager"))
        self.faults = [
            f
            for f in answers.parse_faults(opts.sim.get("wrong_output") or "")
            if f.hits(plan.moe_loaded, plan.spec_tokens > 0, eager)
        ]
        if opts.load_format == "dummy":  # random weights: every answer is noise, as a real server's is
            self.faults.append(answers.Fault("dummy", rate=1.0))

    # -- plumbing -----------------------------------------------------------------------------
    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await self._read_request(reader)
                if request is None:
                    break
                keep = await self._dispatch(request, reader, writer)
                if not keep:
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            if not writer.transport.is_closing():
                with contextlib.suppress(ConnectionError):
                    await writer.drain()
                writer.close()

    async def _read_request(self, reader):
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        lines = head.decode("latin-1").split("\r\n")
        method, path, version = (lines[0].split(" ") + ["", "", ""])[:3]
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name:
                headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
        keep = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        return {"method": method, "path": path.split("?")[0], "headers": headers, "body": body, "keep": keep}

    def _respond(self, writer, status: int, body, content_type="application/json", keep=True) -> None:
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        head = (
            f"HTTP/1.1 {status} {REASONS.get(status, 'OK')}\r\ncontent-type: {content_type}\r\n"
            f"content-length: {len(payload)}\r\n{'' if keep else 'connection: close' + chr(13) + chr(10)}\r\n"
        )
        writer.write(head.encode() + payload)

    def _error(self, writer, err: HttpError, keep: bool) -> None:
        body = {"object": "error", "message": err.message, "type": err.kind, "param": None, "code": err.status}
        self._respond(writer, err.status, body, keep=keep)

    async def _dispatch(self, request, reader, writer) -> bool:
        path, keep = request["path"], request["keep"]
        try:
            if path in ("/v1/completions", "/v1/chat/completions"):
                if request["method"] != "POST":
                    raise HttpError(405, "Method Not Allowed", "MethodNotAllowed")
                return await self._generate(request, reader, writer, chat=path.endswith("chat/completions")) and keep
            if path == "/health":
                await self._health(writer, keep)
            elif path == "/version":
                self._respond(writer, 200, {"version": self.plan.version}, keep=keep)
            elif path == "/v1/models":
                self._respond(writer, 200, self._models(), keep=keep)
            elif path == "/tokenize":
                self._tokenize(request, keep, writer)
            elif path == "/reset_prefix_cache" and self.dev_mode:
                if request["method"] != "POST":
                    raise HttpError(405, "Method Not Allowed", "MethodNotAllowed")
                self.log.info(API, "api_router.py:38", "Resetting prefix cache...")
                ok = self.engine.prefix_cache.reset(busy=bool(self.engine.running))
                self._respond(writer, 200, {"success": ok}, keep=keep)
            elif path == "/metrics":
                self._respond(
                    writer, 200, self.metrics_text().encode(), "text/plain; version=0.0.4; charset=utf-8", keep
                )
            else:
                raise HttpError(404, "Not Found", "NotFoundError")
        except HttpError as err:
            self._error(writer, err, keep)
        await writer.drain()
        return keep

    # -- routes -------------------------------------------------------------------------------
    def _tokenize(self, request, keep: bool, writer) -> None:
        """vLLM's POST /tokenize: {"count", "max_model_len", "tokens", "token_strs"}; a token is a word here."""
        if request["method"] != "POST":
            raise HttpError(405, "Method Not Allowed", "MethodNotAllowed")
        chat = isinstance(self._json(request).get("messages"), list)
        body = self._parse_body(request, chat)
        count = self._prompt_tokens(body, chat)
        words = prompt_words(body)
        tokens = [zlib.crc32(w.encode()) % TOKEN_IDS for w in words][:count] or [0] * count
        strs = words if body.get("return_token_strs") else None
        reply = {"count": count, "max_model_len": self.opts.max_model_len, "tokens": tokens, "token_strs": strs}
        self._respond(writer, 200, reply, keep=keep)

    def _json(self, request) -> dict:
        try:
            body = json.loads(request["body"] or b"{}")
        except json.JSONDecodeError:
            return {}
        return body if isinstance(body, dict) else {}

    async def _health(self, writer, keep: bool) -> None:
        if self.health_hang:
            await asyncio.Event().wait()  # the fault: never answer (the client times out)
        if self.engine.dead:
            self._respond(writer, 503, b"", keep=keep)
        else:
            self._respond(writer, 200, b"", keep=keep)

    def _models(self) -> dict:
        name = self.opts.served_model_name
        return {
            "object": "list",
            "data": [
                {
                    "id": name,
                    "object": "model",
                    "created": int(time.time()),
                    "owned_by": "vllm",
                    "root": self.opts.model,
                    "parent": None,
                    "max_model_len": self.opts.max_model_len,
                    "permission": [{"id": "modelperm-sim", "object": "model_permission", "allow_sampling": True}],
                }
            ],
        }

    def _parse_body(self, request, chat: bool) -> dict:
        try:
            body = json.loads(request["body"] or b"{}")
        except json.JSONDecodeError as exc:
            raise HttpError(400, f"Invalid JSON body: {exc}") from None
        if not isinstance(body, dict):
            raise HttpError(400, "The request body must be a JSON object")
        if body.get("model", self.opts.served_model_name) != self.opts.served_model_name:
            raise HttpError(404, f"The model `{body.get('model')}` does not exist.", "NotFoundError")
        if chat and not isinstance(body.get("messages"), list):
            raise HttpError(400, "messages: Field required")
        if not chat and "prompt" not in body:
            raise HttpError(400, "prompt: Field required")
        return body

    def _prompt_tokens(self, body: dict, chat: bool) -> int:
        if not chat:
            return count_words(body["prompt"])
        per_message = self.cal["chat_template_tokens"]
        return sum(count_words(m.get("content") or "") + per_message for m in body["messages"] if isinstance(m, dict))

    def _max_tokens(self, body: dict, prompt_tokens: int, chat: bool) -> int:
        room = self.opts.max_model_len - prompt_tokens
        value = body.get("max_completion_tokens") or body.get("max_tokens")
        if value is None:
            value = room if chat else self.cal["default_max_tokens"]
        if not isinstance(value, int) or value < 1:
            raise HttpError(400, f"max_tokens must be at least 1, got {value}.")
        if value > room:
            raise HttpError(
                400,
                (
                    f"This model's maximum context length is {self.opts.max_model_len} tokens. However, you "
                    f"requested {prompt_tokens + value} tokens ({prompt_tokens} in the messages, {value} in "
                    f"the completion). Please reduce the length of the messages or completion."
                ),
            )
        return value

    async def _generate(self, request, reader, writer, chat: bool) -> bool:
        if self.engine.dead:
            raise HttpError(503, "The engine is dead.", "EngineDeadError")
        body = self._parse_body(request, chat)
        prompt_tokens = self._prompt_tokens(body, chat)
        max_tokens = self._max_tokens(body, prompt_tokens, chat)
        low, high = self.cal["natural_output_tokens"]
        stop_at = max_tokens + 1 if body.get("ignore_eos") else self.rng.randint(low, high)
        options = body.get("stream_options") or {}
        stream = Stream(
            writer,
            reader,
            self.opts.served_model_name,
            prompt_tokens,
            chat,
            bool(body.get("stream")),
            bool(options.get("include_usage")),
            bool(options.get("continuous_usage_stats")),
        )
        if stream.stream:
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
                b"transfer-encoding: chunked\r\n\r\n" + stream.first_chunk()
            )
        kind, script = self._script(body, chat, max_tokens)
        if script is not None:
            stream.script = script
            stream.token_ids = bool(body.get("return_token_ids"))
            if kind == "answer":  # the answer ends the completion
                stop_at = min(stop_at, len(script))
            elif kind == "garbage":  # a broken kernel runs on to max_tokens
                stop_at = max_tokens + 1
        req = Request(
            prompt_tokens=prompt_tokens, max_tokens=max_tokens, stop_at=stop_at, sink=stream, words=prompt_words(body)
        )
        self.engine.submit(req)
        assert req.done is not None  # submit() gives every request its future
        outcome = await req.done
        if outcome == "abort":
            writer.transport.abort()
            return False
        if not stream.stream:
            self._respond(writer, 200, stream.whole(), keep=request["keep"])
        await writer.drain()
        return True

    def _script(self, body: dict, chat: bool, max_tokens: int) -> tuple[str, list[str] | None]:
        """(kind, tokens) the fake model says to a completion prompt (answers.py): "answer" to a question it can
        compute, "text" continuing other text, "garbage" when the wrong-output fault hits this server; None for the
        plain word cycle (chat, token ids, and streamed text not asking for token ids: the load driver's path keeps
        its pre-built chunks, fast; the long-decode check asks for token ids)."""
        prompt = body.get("prompt")
        if chat or not isinstance(prompt, str):
            return "", None
        if any(f.rate and answers.wrong(prompt, f.rate) for f in self.faults):
            return "garbage", answers.garbage(prompt, max_tokens)
        said = answers.answer_tokens(prompt, max_tokens)
        if said is not None:
            return "answer", said
        if body.get("stream") and not body.get("return_token_ids"):
            return "", None
        said = answers.reply(prompt, max_tokens, self.plan.moe_loaded)
        late = min((f.late for f in self.faults if f.late), default=0)
        if late and said is not None:
            return "text", answers.gone_bad(prompt, late, said, max_tokens)
        return "text", said

    # -- /metrics -------------------------------------------------------------------------------
    def metrics_text(self) -> str:
        e, c = self.engine, self.engine.counters
        labels = f'engine="0",model_name="{self.opts.served_model_name}"'
        out = []

        def metric(name, kind, help_text, samples):
            out.append(f"# HELP {name} {help_text}\n# TYPE {name} {kind}")
            for extra, value in samples:
                out.append(f"{name}{{{labels}{extra}}} {float(value)}")

        metric(
            "vllm:num_requests_running",
            "gauge",
            "Number of requests in model execution batches.",
            [("", len(e.running))],
        )
        metric(
            "vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", [("", len(e.waiting))]
        )
        metric("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", [("", e.kv_usage())])
        metric(
            "vllm:num_preemptions_total",
            "counter",
            "Cumulative number of preemption from the engine.",
            [("", c.preemptions)],
        )
        metric(
            "vllm:prefix_cache_queries_total",
            "counter",
            "Prefix cache queries, in terms of number of queried tokens.",
            [("", e.prefix_cache.queries)],
        )
        metric(
            "vllm:prefix_cache_hits_total",
            "counter",
            "Prefix cache hits, in terms of number of cached tokens.",
            [("", e.prefix_cache.hits)],
        )
        metric("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", [("", c.prompt_tokens)])
        metric(
            "vllm:generation_tokens_total",
            "counter",
            "Number of generation tokens processed.",
            [("", c.generation_tokens)],
        )
        metric(
            "vllm:request_success_total",
            "counter",
            "Count of successfully processed requests.",
            [(f',finished_reason="{r}"', n) for r, n in c.success.items()],
        )
        if e.rate.spec_tokens:
            metric("vllm:spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts.", [("", c.drafts)])
            metric(
                "vllm:spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens.", [("", c.draft_tokens)]
            )
            metric(
                "vllm:spec_decode_num_accepted_tokens_total",
                "counter",
                "Number of accepted tokens.",
                [("", c.accepted_tokens)],
            )
            metric(
                "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                "counter",
                "Accepted tokens per draft position.",
                [(f',position="{i}"', n) for i, n in enumerate(c.accepted_per_pos)],
            )
        return "\n".join(out) + "\n"
