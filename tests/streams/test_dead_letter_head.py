"""A dead letter's excerpt of a long record redacts only the record's head (4 KiB shown and a
margin), and lets no secret through that redacting the whole record kept out.

Found on the receivers: each refused event was redacted whole before its letter was cut to 4 KiB
(a 700 KB tool output for 4 KiB shown), so a request of large refused events took seconds per
event to answer. The seeded secrets are placed where the head differs from the whole: across
the 4 KiB cut, and (the long ones: PEM blocks, JWTs, base64 blobs) from inside the excerpt to
past the end of the head, inside a refused event's long output as the receivers write it
(JSON text: the output is one escaped string literal, cut open by the head)."""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path

import pytest

from streams.l1 import dead_letter_excerpt
from streams.redaction.text import EXCERPT_MARGIN, redact_excerpt
from tests.fixtures.secrets.battery import leaked
from tests.fixtures.secrets.needles import BATTERY_CASES

LIMIT = 4096
# Real text around the secrets: a Claude Code transcript of marot/spotter, as a tool printed it.
FILLER = (Path(__file__).resolve().parents[1] / "fixtures" / "turn_ends"
          / "491e126e-1e71-469c-ade2-fcc8af567c74.jsonl").read_text()
NEEDLE = 10


def _posted(output: str) -> str:
    """A refused event as the receivers dead-letter it: its JSON text, the output one literal."""
    return json.dumps({"eventId": "e-1", "sessionId": "s-1", "type": "tool.result", "time": "yesterday",
                       "fields": {"toolCallId": "c-1", "output": output}}, ensure_ascii=False)


def _placed(secret_text: str, end_at: int, after: str = FILLER * 2) -> str:
    """``secret_text`` in the output so that, posted (escaped), it ends at ``end_at`` characters
    into the letter's raw text, real text before it and ``after`` it, the whole well past the head."""
    opening = _posted("").index('"output": "') + len('"output": "')
    target = end_at - (len(_escaped(secret_text)) + opening)
    filler = FILLER * 4
    low, high = 0, len(filler)
    while low < high:  # the longest prefix of the filler whose escaped text fits before it
        middle = (low + high + 1) // 2
        low, high = (middle, high) if len(_escaped(filler[:middle])) <= target else (low, middle - 1)
    raw = _posted(filler[:low] + secret_text + after)
    assert raw.index(_escaped(secret_text)) + len(_escaped(secret_text)) in range(end_at - 2, end_at + 1)
    return raw


def _escaped(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)[1:-1]


def _leaks(secret: str, excerpt: str) -> list[str]:
    unescaped = excerpt.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")
    return sorted({secret[i: i + NEEDLE] for i in range(len(secret) - NEEDLE + 1)
                   if secret[i: i + NEEDLE] in excerpt or secret[i: i + NEEDLE] in unescaped})


# One case of each of the battery's formats, its context taken in turn (prose, env dump, JSON,
# YAML, a URL, a command line, a markdown table, a wrapped line, an assignment).
CONTEXTS = sorted({case.context for case in BATTERY_CASES})
CASES = []
for _number, _format_id in enumerate(sorted({case.format_id for case in BATTERY_CASES})):
    _of_format = [case for case in BATTERY_CASES if case.format_id == _format_id]
    CASES.append(next((case for case in _of_format if case.context == CONTEXTS[_number % len(CONTEXTS)]), _of_format[0]))


def test_every_battery_format_across_the_cut_leaks_nothing_redacting_the_whole_kept_out() -> None:
    weaker = []
    for case in CASES:
        raw = _placed(case.text, LIMIT + len(_escaped(case.text)) // 2)  # across the 4 KiB cut
        assert len(raw) > LIMIT + EXCERPT_MARGIN
        whole = redact_excerpt(raw)[:LIMIT]
        excerpt = dead_letter_excerpt(raw)
        assert len(excerpt) <= LIMIT
        if set(leaked(case.secret, excerpt, case.framing)) - set(leaked(case.secret, whole, case.framing)):
            weaker.append((case.format_id, case.context))
    assert weaker == []


PEM_BODY = base64.b64encode(random.Random(7).randbytes(12_000)).decode()
PEM = ("-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(PEM_BODY[i: i + 64] for i in range(0, len(PEM_BODY), 64))
       + "\n-----END RSA PRIVATE KEY-----")
JWT_HEADER = "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9."
JWT = (JWT_HEADER + base64.urlsafe_b64encode(json.dumps(
    {"sub": "1234567890", "roles": ["admin"] * 1500}).encode()).decode().rstrip("=") + ".Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5")
KEY_FILE_B64 = base64.b64encode(PEM.encode()).decode()  # LS0tLS1CRUdJTi… on one line


@pytest.mark.parametrize(("secret", "start_at"), [
    (PEM, LIMIT - 300),  # from inside the excerpt to past the end of the head
    (PEM, LIMIT - 20),  # starting at the cut
    (JWT, LIMIT - 1000),
    (KEY_FILE_B64, 200),
], ids=["pem-inside", "pem-at-cut", "jwt", "key-file-base64"])
def test_a_secret_longer_than_the_margin_leaves_no_part_in_the_excerpt(secret: str, start_at: int) -> None:
    assert len(secret) > EXCERPT_MARGIN
    excerpt = dead_letter_excerpt(_placed(f" {secret} ", start_at + len(_escaped(secret))))
    # The key material; of the JWT its claims and signature (its header is RS256's, public).
    material = "".join(line for line in secret.splitlines() if "-----" not in line).removeprefix(JWT_HEADER)
    assert _leaks(material, excerpt) == []
    assert excerpt.startswith('{"eventId": "e-1"')  # what is no secret stays


@pytest.mark.parametrize(("printed", "secret"), [
    ("HOME=/home/alice\nPATH=/usr/bin\nLANG=C\nFOO_URL=zz9Qm7vT2xLp9Rz4Kd8W\n", "zz9Qm7vT2xLp9Rz4Kd8W"),
    ("<bash-input>openssl rand -hex 32</bash-input>\n<bash-stdout>9c1e4b7a2f6d08e3b5a17c4f2d9e6b30</bash-stdout>",
     "9c1e4b7a2f6d08e3b5a17c4f2d9e6b30"),
], ids=["env-dump", "printed-key"])
def test_an_output_the_head_cuts_open_is_read_decoded_as_the_whole_record_is(printed: str, secret: str) -> None:
    """The output literal runs on past the head: closed there, it is read decoded, its escaped
    line breaks as lines, as the whole record's literal is. Left open, an environment dump and a
    key a command printed (rules that read lines) stayed in the excerpt."""
    raw = _placed(printed, LIMIT - 10)
    assert secret in raw[:LIMIT] and secret not in redact_excerpt(raw)[:LIMIT]
    assert secret not in dead_letter_excerpt(raw)


def test_only_the_head_of_a_long_record_is_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The excerpt of a 1 MB record costs what its head costs, whatever the record's size."""
    import streams.redaction.text as text

    seen: list[int] = []
    real = text.redact_text

    def redact_text(value: str, policy=None):  # type: ignore[no-untyped-def]
        seen.append(len(value))
        return real(value, policy)

    monkeypatch.setattr(text, "redact_text", redact_text)
    raw = _posted(FILLER * 48)
    assert len(raw) > 1_000_000
    assert dead_letter_excerpt(raw).startswith('{"eventId": "e-1"')
    assert seen and max(seen) <= LIMIT + EXCERPT_MARGIN + 1


def test_a_short_record_is_redacted_whole_as_before() -> None:
    raw = _placed("DATABASE_URL=postgres://app:Tr0ub4dorXq7Lm2Zp@db:5432/app\n", 3000)[: LIMIT + EXCERPT_MARGIN]
    assert dead_letter_excerpt(raw) == redact_excerpt(raw)[:LIMIT]


@pytest.mark.parametrize("filler", ["\n", "\x01"], ids=["cut-in-backslash-n", "cut-in-u-escape"])
def test_a_head_cut_inside_an_escape_still_closes_its_literal(filler: str) -> None:
    """The head may end inside an escape (``\\`` of ``\\n``, ``\\u00`` of ``\\u0001``): a quote
    after it would be escaped, the literal left open and read undecoded."""
    printed = "<bash-input>openssl rand -hex 32</bash-input>\n<bash-stdout>9c1e4b7a2f6d08e3b5a17c4f2d9e6b30</bash-stdout>"
    head_end = LIMIT + EXCERPT_MARGIN
    for shift in range(8):  # the one shift that cuts the escape where this case wants it
        raw = _placed(printed, LIMIT - 10, after="." * shift + filler * 20_000)
        cut_escape = raw[head_end - 1] == "\\" if filler == "\n" else raw[head_end - 4: head_end - 2] == "\\u"
        if cut_escape:
            break
    assert cut_escape
    assert "9c1e4b7a2f6d08e3b5a17c4f2d9e6b30" in raw[:LIMIT]
    assert "9c1e4b7a2f6d08e3b5a17c4f2d9e6b30" not in dead_letter_excerpt(raw)
