"""The receivers' request bodies: ``Content-Encoding`` and what is wrong with a body that is not
JSON.

OTLP/HTTP servers must accept gzip (the OpenTelemetry SDK exporter with ``compression=gzip``
and the Collector's ``otlphttp`` exporter, gzip by default, send nothing else), and an exporter
does not retry a 400: a compressed body read as plain bytes loses its spans. So
``POST /v1/traces`` and ``POST /v1/events`` decode ``gzip`` (``x-gzip``), ``deflate`` (zlib, or
raw deflate as some clients send it) and ``identity``, in the order the header lists them;
any other coding is a 415. The API's guard bounds the bytes received by
``USL_API_MAX_BODY_BYTES``; the decoded body is bounded by the same limit as it is inflated
(413), so a small body that inflates to gigabytes costs at most that much memory.
"""

from __future__ import annotations

import json
import zlib

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from planner.exceptions import PlannerError, QueryError
from streams.importers.base import BOM

__all__ = ["CODINGS", "decode_body", "json_error", "read_body", "without_bom"]

#: The content codings a receiver decodes (``x-gzip`` is gzip's old name, RFC 9110).
CODINGS = ("gzip", "deflate", "identity")
_GZIP_MAGIC = b"\x1f\x8b"
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The request's body as its ``Content-Encoding`` header says to decode it."""
    raw = await request.body()
    header = request.headers.get("content-encoding", "")
    if not header.strip() or header.strip().lower() == "identity":
        if raw.startswith(_GZIP_MAGIC):
            # Read as it was labelled, it was "not valid JSON" or a protobuf "Wire format was
            # corrupt", neither saying the one thing to change. No JSON text and no protobuf
            # message begins with these bytes (0x1f is no JSON character, and no protobuf key).
            raise QueryError("the request body is gzip-compressed but was sent without Content-Encoding: gzip",
                             hint="Send the header Content-Encoding: gzip with it (a proxy in between may "
                                  "have dropped it), or send the body uncompressed.")
        return raw
    return await run_in_threadpool(decode_body, raw, header, max_bytes)


def decode_body(raw: bytes, header: str, max_bytes: int) -> bytes:
    """``raw`` decoded by every coding of ``header`` (last applied, first undone).

    Raises UnsupportedMediaType (415) for a coding not in :data:`CODINGS`, QueryError (400) for
    bytes that are not what their coding says, PayloadTooLarge (413) past ``max_bytes``."""
    from planner.api import UnsupportedMediaType

    codings = [coding.strip().lower() for coding in header.split(",") if coding.strip()]
    unknown = [coding for coding in codings if coding != "identity" and coding not in _WBITS]
    if unknown:
        raise UnsupportedMediaType(
            f"Content-Encoding {unknown[0]!r} is not supported; this receiver decodes {', '.join(CODINGS)}",
            hint="Send the body uncompressed or gzip-compressed (OTLP exporters: compression=gzip).")
    body = raw
    for coding in reversed(codings):
        if coding != "identity":
            body = _inflate(body, coding, max_bytes)
    return body


def _inflate(data: bytes, coding: str, max_bytes: int) -> bytes:
    """``data`` inflated, at most ``max_bytes`` of it: the whole is never held past the limit."""
    out = bytearray()
    wbits = _WBITS[coding]
    while True:
        inflater = zlib.decompressobj(wbits)
        try:
            # max_length is at least 1 here: 0 would mean "no limit".
            out += inflater.decompress(data, max_bytes + 1 - len(out))
            while inflater.unconsumed_tail and len(out) <= max_bytes:
                out += inflater.decompress(inflater.unconsumed_tail, max_bytes + 1 - len(out))
        except zlib.error as exc:
            if coding == "deflate" and wbits > 0 and not out:
                wbits = -zlib.MAX_WBITS  # raw deflate, without the zlib header RFC 9110 asks for
                continue
            raise _not_coded(coding, str(exc).removeprefix("Error -3 while decompressing data: ")) from None
        if len(out) > max_bytes:
            raise _too_large(max_bytes)
        if not inflater.eof:
            raise _not_coded(coding, "the compressed data ends early")
        data = inflater.unused_data
        if not data:
            return bytes(out)
        if coding == "deflate" or wbits < 0:
            raise _not_coded(coding, "bytes follow the end of the compressed data")
        # gzip: another member follows (concatenated gzip files are one gzip stream)


def _not_coded(coding: str, detail: str) -> QueryError:
    return QueryError(f"the request body is not valid {coding} data (Content-Encoding: {coding}): {detail}",
                      hint=f"Send the body compressed with {coding}, or without a Content-Encoding header.")


def _too_large(max_bytes: int) -> PlannerError:
    from planner.api import PayloadTooLarge

    return PayloadTooLarge(f"the request body decompresses to more than {max_bytes} bytes",
                           hint="Send smaller batches; the limit is USL_API_MAX_BODY_BYTES, "
                                "counted after decompression.")


def without_bom(raw: bytes) -> bytes:
    """``raw`` without a leading UTF-8 byte order mark, which RFC 8259 lets a parser ignore and
    Windows tools (PowerShell's ``Out-File``, Notepad) write before the JSON they save: such a
    body was refused as "not valid JSON" with nothing to say why."""
    return raw.removeprefix(BOM)


def json_error(exc: json.JSONDecodeError, what: str = "the request body", hint: str = "") -> QueryError:
    """A 400 that says what is wrong with a body orjson could not read, and where."""
    where = f"line {exc.lineno}, column {exc.colno}"
    if "surrogate" in exc.msg and "UTF-8" not in exc.msg:
        message = (f"{what} holds a lone UTF-16 surrogate escape (\\ud800-\\udfff) at {where}: one stands "
                   "for no character unless a high one is followed by a low one")
    elif "surrogate" in exc.msg or "UTF-8" in exc.msg:
        message = f"{what} is not UTF-8 text (JSON must be UTF-8)"
    elif "depth" in exc.msg or "recursion" in exc.msg:
        message = f"{what} is nested more than 1024 levels deep"
    else:
        message = f"{what} is not valid JSON: {exc.msg} at {where}"
    return QueryError(message, hint=hint or "Send a JSON object with Content-Type: application/json.")
