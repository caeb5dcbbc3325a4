"""Secrets a user seeds into real sessions never survive redaction (policy 2.7).

Real transcripts nobody on the team wrote (``tests/fixtures/turn_ends``: a Claude Code turn of
marot/spotter; ``tests/fixtures/importers/openai_chat``), with secrets of many kinds spliced
into the places a user or a tool puts them: the prompt, a Bash command, a tool's output (as a
string and as text blocks), the assistant's prose, its thinking, an OpenAI tool call's
arguments (a JSON string inside JSON), the session's cwd and git branch, and Claude Code's
``!`` shell mode. Each file goes through its importer and :func:`redact_event`, as the
pipeline does; no 10 characters of any secret may be left in an indexed event or a
tool-results record, and the words around them (``FAILED``) stay.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from streams.importers.claude_code import iter_claude_code
from streams.importers.openai_chat import iter_openai_chat
from streams.redaction import redact_event

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CLAUDE_CODE = FIXTURES / "turn_ends" / "491e126e-1e71-469c-ade2-fcc8af567c74.jsonl"
OPENAI_CHAT = FIXTURES / "importers" / "openai_chat" / "conversations.jsonl"
NEEDLE = 10

AWS_SECRET = "zOQQ2l+ZkAFezmkyGKNGupcIDCEhbMJrQ5tJ3uvZ"
TWILIO_SID, TWILIO_TOKEN = "AC0b3f5e8a9c2d4e6f8a1b3c5d7e9f0a2b", "05ce4249dcaa315bba76d66907c321cc"
SENTRY_KEY = "04aa1632dd1b63ed2ae2b1e327782170"
OKTA = "00Y_xHP9l8-ZXlt81N2mu_jNmIM2SslMYPuqQIYOSy"
OP_PASSWORD = "qerwvbkaRjaBi5VPqC"
SHELL_PASSWORD = "Xk9pLm2QrT7vBn4W"
RU_KEY = "OQYoYzl1Q5OIYHdFUoMuZWDV6kCJ3BLTzapEFWIn"
GITHUB = "ghp_R8x2Lq9ZkV3mT7wY1pN4sB6dF0hJ5cX8aE2u"
STRIPE = "sk_live_51HxYzAbCdEfGhIjKlMnOpQrStUv2024Qq"
PG_PASSWORD = "Tr0ub4dorXq7Lm2Zp"
PRIVATE_KEY_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7Qx9fK2mZpL0vTq8Rw3yN"
SECRETS = [AWS_SECRET, TWILIO_TOKEN, SENTRY_KEY, OKTA, OP_PASSWORD, SHELL_PASSWORD, RU_KEY, GITHUB, STRIPE,
           PG_PASSWORD, PRIVATE_KEY_BODY]

PROMPT = (f"Deploy it. Creds: $ aws configure get aws_secret_access_key\n{AWS_SECRET}\n"
          f"Вот мой ключ API: {RU_KEY} — не публикуй его.")
COMMAND = (f"curl -X POST https://api.twilio.com/2010-04-01/Accounts/{TWILIO_SID}/Messages.json "
           f"-u {TWILIO_SID}:{TWILIO_TOKEN} && curl -H 'Authorization: SSWS {OKTA}' https://acme.okta.com/api/v1/users")
OUTPUT = (f"SENTRY_DSN=https://{SENTRY_KEY}@o123456.ingest.sentry.io/4504\n$ op item get 'Prod DB' --fields password\n"
          f"{OP_PASSWORD}\nexport GITHUB_TOKEN={GITHUB}\nFAILED tests/test_deploy.py::test_push - AssertionError")
PROSE = f"I set STRIPE_SECRET_KEY={STRIPE}\nPASSED and the db is postgres://app:{PG_PASSWORD}@db.internal:5432/app"
THINKING = json.dumps({"private_key": f"-----BEGIN PRIVATE KEY-----\n{PRIVATE_KEY_BODY}\n-----END PRIVATE KEY-----\n"})


def _claude_code(tmp_path: Path) -> Path:
    lines = [json.loads(line) for line in CLAUDE_CODE.read_text().splitlines()]
    template = next(line for line in lines if line.get("type") == "user" and isinstance(line["message"].get("content"), str))
    spliced: list[dict[str, Any]] = []
    results = 0
    for line in lines:
        line = json.loads(json.dumps(line))
        if "cwd" in line:
            line["cwd"], line["gitBranch"] = f"/srv/deploy-{STRIPE}", f"rotate/{GITHUB}"
        content = line.get("message", {}).get("content") if isinstance(line.get("message"), dict) else None
        if line.get("type") == "user" and isinstance(content, str):
            line["message"]["content"] = content + "\n\n" + PROMPT
        blocks: list[dict[str, Any]] = content if isinstance(content, list) else []
        for block in blocks:
            if block.get("type") == "tool_use" and block.get("name") == "Bash":
                block["input"]["command"] = COMMAND
            elif block.get("type") == "tool_result":
                block["content"] = OUTPUT if results % 2 else [{"type": "text", "text": OUTPUT}]
                results += 1
            elif block.get("type") == "text":
                block["text"] += "\n\n" + PROSE
        if any(block.get("type") == "text" for block in blocks):
            blocks.append({"type": "thinking", "thinking": "the key file: " + THINKING, "signature": "x"})
        spliced.append(line)
    for number, text in enumerate(["<bash-input>printenv DB_PASSWORD</bash-input>",
                                   f"<bash-stdout>{SHELL_PASSWORD}</bash-stdout><bash-stderr></bash-stderr>"]):
        spliced.append({**template, "uuid": f"00000000-0000-0000-0000-00000000b00{number}",
                        "parentUuid": spliced[-1].get("uuid"), "message": {"role": "user", "content": text}})
    path = tmp_path / CLAUDE_CODE.name
    path.write_text("".join(json.dumps(line) + "\n" for line in spliced))
    return path


def _openai_chat(tmp_path: Path) -> Path:
    lines = OPENAI_CHAT.read_text().splitlines(keepends=True)
    spliced = []
    for line in lines:
        try:
            conversation = json.loads(line)
        except json.JSONDecodeError:
            spliced.append(line)  # the fixture's own broken record, kept as it is
            continue
        spliced.append(json.dumps(_seeded(conversation)) + "\n")
    path = tmp_path / OPENAI_CHAT.name
    path.write_text("".join(spliced))
    return path


def _seeded(conversation: Any) -> Any:
    if isinstance(conversation, dict) and isinstance(conversation.get("messages"), list):
        conversation["title"] = f"rotate {STRIPE}"
        for message in (m for m in conversation["messages"] if isinstance(m, dict)):
            for call in message.get("tool_calls") or ():
                try:
                    arguments = json.loads(call["function"]["arguments"])
                except json.JSONDecodeError:
                    arguments = {"raw": call["function"]["arguments"]}
                arguments.update(cmd=COMMAND, password=PG_PASSWORD, note=PROMPT)
                call["function"]["arguments"] = json.dumps(arguments)
            if message.get("role") == "tool":
                message["content"] = OUTPUT
            elif message.get("role") == "user":
                message["content"] = f"{message['content']} {PROMPT}"
    return conversation


def _redacted(events: list[dict[str, Any]]) -> str:
    out = []
    for event in events:
        result = redact_event(event)
        out.append(json.dumps(result.event, ensure_ascii=False))
        if result.tool_result is not None:
            out.append(json.dumps(result.tool_result, ensure_ascii=False))
    return "\n".join(out)


def _leaks(blob: str) -> list[str]:
    return sorted({secret[:12] for secret in SECRETS for i in range(len(secret) - NEEDLE + 1)
                   if secret[i: i + NEEDLE] in blob})


def test_secrets_seeded_into_a_real_claude_code_turn_never_survive(tmp_path: Path) -> None:
    events = [result.event for result in iter_claude_code(_claude_code(tmp_path), label="t") if hasattr(result, "event")]
    raw = json.dumps(events, ensure_ascii=False)
    assert not set(SECRETS) - {s for s in SECRETS if s in raw.replace("\\n", "\n")}  # all planted
    redacted = _redacted(events)
    assert _leaks(redacted) == []
    assert "FAILED tests/test_deploy.py::test_push" in redacted and "\\nPASSED and the db" in redacted


def test_secrets_seeded_into_real_openai_chat_runs_never_survive(tmp_path: Path) -> None:
    events = [result.event for result in iter_openai_chat(_openai_chat(tmp_path), label="t") if hasattr(result, "event")]
    assert any(event["type"] == "tool.call" for event in events)
    redacted = _redacted(events)
    assert _leaks(redacted) == []
    assert "FAILED tests/test_deploy.py::test_push" in redacted
