"""OpenAI-format response bodies: SSE chunks (one decode step per chunk) and whole responses.

Chunks are assembled from pre-built string parts (no json.dumps per token) and written in batches, so
one process can stream tens of thousands of tokens per second.
"""

from __future__ import annotations

import json
import time
import uuid
import zlib

# Token text: a fixed word cycle (plain ASCII: needs no JSON escaping).
WORDS = [" the", " spark", " serves", " tokens", " at", " a", " steady", " rate", " and", " then", " some", " more"]


def token_text(start: int, n: int) -> str:
    return "".join(WORDS[(start + i) % len(WORDS)] for i in range(n))


TOKEN_IDS = 151_936  # the Qwen3 vocabulary size: /tokenize's ids fall in its range


def token_id(token: str) -> int:
    """A scripted token's id: stable per token text (as /tokenize's ids)."""
    return zlib.crc32(token.encode()) % TOKEN_IDS


def _chunked(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


class Stream:
    """The engine's sink for one request: formats chunks, batches writes, notices a vanished client."""

    def __init__(
        self,
        writer,
        reader,
        model: str,
        prompt_tokens: int,
        chat: bool,
        stream: bool,
        include_usage: bool,
        continuous_usage: bool,
    ):
        self.writer, self.reader = writer, reader
        self.model, self.prompt_tokens, self.chat = model, prompt_tokens, chat
        self.stream, self.include_usage, self.continuous_usage = stream, include_usage, continuous_usage
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.generated = 0
        self.finish: str | None = None
        self.buffer: list[str] = []
        self.dropped = False
        head = json.dumps(
            {
                "id": self.id,
                "object": "chat.completion.chunk" if chat else "text_completion",
                "created": self.created,
                "model": model,
            },
            separators=(",", ":"),
        )[:-1]
        if chat:
            self.pre = head + ',"choices":[{"index":0,"delta":{"content":"'
            self.mid = '"},"logprobs":null,"finish_reason":'
        else:
            self.pre = head + ',"choices":[{"index":0,"text":"'
            self.mid = '","logprobs":null,"finish_reason":'
        self.head = head
        self.script: list[str] | None = None  # the model's own tokens (answers.reply); None: the word cycle
        self.token_ids = False  # return_token_ids: each choice carries its tokens' ids (scripted text only)

    # -- engine side ---------------------------------------------------------------------------
    def emit(self, n: int, finish: str | None) -> None:
        ids = ""
        if self.script is None:
            text = token_text(self.generated, n)
        else:  # any characters: escaped for the pre-built SSE chunk, kept as they are for a whole response
            tokens = self.script[self.generated : self.generated + n]
            text = "".join(tokens)
            if self.stream:
                text = json.dumps(text)[1:-1]
            if self.token_ids:
                ids = ',"token_ids":[' + ",".join(str(token_id(t)) for t in tokens) + "]"
        self.generated += n
        if finish:
            self.finish = finish
        if not self.stream:
            self.buffer.append(text)
            return
        reason = f'"{finish}"' if finish else "null"
        stop = ',"stop_reason":null' if not self.chat else ""
        usage = ""
        if self.continuous_usage:
            usage = f',"usage":{self._usage()}'
        self.buffer.append(f"data: {self.pre}{text}{self.mid}{reason}{stop}{ids}}}]{usage}}}\n\n")
        if finish:
            self.flush()

    def flush(self) -> None:
        if not self.stream or self.dropped or not self.buffer:
            return
        body = "".join(self.buffer)
        self.buffer.clear()
        if self.finish:
            if self.include_usage:
                body += f'data: {self.head},"choices":[],"usage":{self._usage()}}}\n\n'
            body += "data: [DONE]\n\n"
        self.writer.write(_chunked(body.encode()) + (b"0\r\n\r\n" if self.finish else b""))

    def drop(self) -> None:
        """Cut the connection mid-response: no final chunk, no [DONE]."""
        self.dropped = True
        self.writer.transport.abort()

    def gone(self) -> bool:
        return self.dropped or self.writer.transport.is_closing() or self.reader.at_eof()

    # -- the whole response (stream=false) ----------------------------------------------------
    def first_chunk(self) -> bytes:
        """Chat streams open with the assistant role, as vLLM does."""
        if not self.chat:
            return b""
        usage = f',"usage":{self._usage()}' if self.continuous_usage else ""
        role = f'data: {self.head},"choices":[{{"index":0,"delta":{{"role":"assistant","content":""}},"logprobs":null,"finish_reason":null}}]{usage}}}\n\n'
        return _chunked(role.encode())

    def whole(self) -> dict:
        text = "".join(self.buffer)
        if self.chat:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": self.finish,
            }
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": self.finish, "stop_reason": None}
            if self.token_ids and self.script is not None:
                choice["token_ids"] = [token_id(t) for t in self.script[: self.generated]]
        return {
            "id": self.id,
            "object": "chat.completion" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": json.loads(self._usage()),
        }

    def _usage(self) -> str:
        return (
            f'{{"prompt_tokens":{self.prompt_tokens},"total_tokens":{self.prompt_tokens + self.generated},'
            f'"completion_tokens":{self.generated}}}'
        )
