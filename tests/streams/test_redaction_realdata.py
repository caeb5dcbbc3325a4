"""Secrets a user seeds into real sessions never survive redaction (policy 2.8).

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


# Policy 2.8: shapes real agents produce, as a new user's adversarial round seeded them into the
# same real turn: Claude Code's Read tool showing a .env file (`     2→NAME=value`), kubectl get
# secret -o yaml (base64 data of names that say nothing), docker inspect's Env array, vault kv get,
# terraform output -json, heroku config, az storage keys, an htpasswd file, SQL Server / redis /
# gh secret flags, PowerShell's Set-Item Env: and SetEnvironmentVariable, Write / Edit inputs of
# JSON and YAML configs, an OAuth redirect, a password made from a word; and a line cut inside a
# token, which is rejected and dead-lettered.
def _b64(text: str) -> str:
    import base64
    return base64.b64encode(text.encode()).decode()


SIGNER, DOCKER_SIGNER = "Sg7Ye3Bq6Hu1Jd5Mc0Ta", "Dk4Ct6Ev9Gx2Iz5Ka8Mb"
K8S_URL, VAULT_VALUE, TF_VALUE = _b64("postgres://app:Lx8vQ2nR7k@db.internal/app"), "Harbor!2029xq", "Tf8!snsQz2Ul7b"
HEROKU_VALUE, AZURE_KEY = "Hk3Oc7Qe1Sg4Ui8Wk2Ym", "Qm7vT2xLp9Rz4Kd8Wn3Jh6Yb1Fc5Gs0AeUoIiPlMnBvCxZaSdFgHjKlQwErTyUiOpAbCdEfGhIjKlMnOpQrStUvW=="
BCRYPT, APR1 = "$2y$05$Hq7vK2mNx9Lp4Rz8Wt1Yu3Io5Pa6Sd0Fg2Hj4Kl6Zx8Cv0Bn2Mq4W", "$apr1$Qx7Lm2Np$Tz9Wk4Rv8Yb1Hc5Jd3Gf6A"
SQLCMD, REDIS, GH_BODY, PS_ITEM, PS_SETENV = "Sq1!ServerPw77", "Rd5!cachePass", "Gh8Dz1Fk6Jm3Lo7Nq0Ps4B", "Kestrel88!vault", "Winter2031!Qz"
JSON_PASSWORD, YAML_SECRET, OAUTH, WORD_PASSWORD = "Js0n!Passw0rd77", "Yc2Ao5Cq9Es3Gu6Iw0Ky1K", "4/0AX4XfWhOa7Eu3Gw6Iy0Ka4Mc8Y3", "m0nk3yb4rpass"
CUT = "ghp_Tr8x2Lq9ZkV3mT7wY1pN4sB6dF0hJ5cX8aE2v"
SECRETS_28 = [SIGNER, DOCKER_SIGNER, K8S_URL, VAULT_VALUE, TF_VALUE, HEROKU_VALUE, AZURE_KEY, BCRYPT[7:], APR1[14:], SQLCMD,
              REDIS, GH_BODY, PS_ITEM, PS_SETENV, JSON_PASSWORD, YAML_SECRET, OAUTH, WORD_PASSWORD]
TOOL_SHAPES_28: list[tuple[str, dict[str, Any], str]] = [
    ("Read", {"file_path": "/srv/app/.env"},
     f"     1→NODE_ENV=production\n     2→SESSION_SIGNER={SIGNER}\n     3→PORT=3000\n"),
    ("Bash", {"command": "kubectl get secret app -o yaml"},
     f"apiVersion: v1\ndata:\n  DATABASE_URL: {K8S_URL}\nkind: Secret\nmetadata:\n  name: app\ntype: Opaque\n"),
    ("Bash", {"command": "docker inspect web"},
     json.dumps([{"Config": {"Env": ["PATH=/usr/local/bin", f"SESSION_SIGNER={DOCKER_SIGNER}", "LANG=C.UTF-8"]}}], indent=4)),
    ("Bash", {"command": "vault kv get secret/mail"},
     f"====== Data ======\nKey         Value\n---         -----\nsmtp        {VAULT_VALUE}\nuser        mailer\n"),
    ("Bash", {"command": "terraform output -json"},
     json.dumps({"db_password": {"sensitive": True, "type": "string", "value": TF_VALUE}}, indent=2)),
    ("Bash", {"command": "heroku config -a spotter"}, f"=== spotter Config Vars\nNODE_ENV:        production\nSESSION_KEYRING: {HEROKU_VALUE}\n"),
    ("Bash", {"command": "az storage account keys list -n acct"},
     json.dumps([{"keyName": "key1", "permissions": "FULL", "value": AZURE_KEY}], indent=2)),
    ("Read", {"file_path": "/etc/nginx/.htpasswd"}, f"     1→admin:{BCRYPT}\n     2→deploy:{APR1}\n"),
    ("Bash", {"command": f"sqlcmd -S db -U sa -P '{SQLCMD}' -Q 'select 1' && redis-cli --pass {REDIS} ping"}, "1\nPONG"),
    ("Bash", {"command": f"gh secret set API_KEY --body {GH_BODY} && ./manage --password={WORD_PASSWORD}"}, "✓ Set secret API_KEY"),
    ("PowerShell", {"command": f'Set-Item -Path Env:ADMIN_PASSWORD -Value "{PS_ITEM}"'}, ""),
    ("Write", {"file_path": "/srv/app/config.json", "content": json.dumps({"db": {"password": JSON_PASSWORD}}, indent=2)}, "ok"),
    ("Edit", {"file_path": "/srv/app/oauth.yaml", "old_string": "client_secret:", "new_string": f"client_secret: {YAML_SECRET}\n"}, "ok"),
]
PROMPT_28 = (f"I ran [Environment]::SetEnvironmentVariable('DB_PASS','{PS_SETENV}','Machine') and the login went to "
             f"http://localhost:8080/callback?state=af0ifjsldkj&code={OAUTH} then hung.")


def _claude_code_28(tmp_path: Path) -> Path:
    lines = [json.loads(line) for line in CLAUDE_CODE.read_text().splitlines()]
    call = next(line for line in lines if line.get("type") == "assistant"
                and any(block.get("type") == "tool_use" for block in line["message"]["content"]))
    result = next(line for line in lines if line.get("type") == "user" and isinstance(line["message"].get("content"), list))
    prompt = next(line for line in lines if line.get("type") == "user" and isinstance(line["message"].get("content"), str))
    spliced = [json.loads(json.dumps(line)) for line in lines]
    for line in spliced:
        if line.get("uuid") == prompt.get("uuid"):
            line["message"]["content"] += "\n\n" + PROMPT_28
    parent = spliced[-1].get("uuid")
    for number, (tool, tool_input, output) in enumerate(TOOL_SHAPES_28):
        call_id = f"toolu_28{number:02d}"
        use = json.loads(json.dumps(call))
        use.update(uuid=f"00000000-0000-0000-0028-{number:012d}", parentUuid=parent)
        use["message"]["content"] = [{"type": "tool_use", "id": call_id, "name": tool, "input": tool_input}]
        answer = json.loads(json.dumps(result))
        answer.update(uuid=f"00000000-0000-0000-0028-{number + 100:012d}", parentUuid=use["uuid"])
        answer["message"]["content"] = [{"type": "tool_result", "tool_use_id": call_id,
                                         "content": output if number % 2 else [{"type": "text", "text": output}]}]
        spliced += [use, answer]
        parent = answer["uuid"]
    cut = json.dumps({**prompt, "uuid": "00000000-0000-0000-0028-999999999999", "parentUuid": parent,
                      "message": {"role": "user", "content": f"please use {CUT} for the push"}})
    path = tmp_path / CLAUDE_CODE.name
    path.write_text("".join(json.dumps(line) + "\n" for line in spliced) + cut[: cut.index(CUT) + 22] + "\n")
    return path


def test_secrets_of_2_8_seeded_into_a_real_claude_code_turn_never_survive(tmp_path: Path) -> None:
    from streams.l1 import dead_letter_excerpt

    results = list(iter_claude_code(_claude_code_28(tmp_path), label="t"))
    events = [result.event for result in results if hasattr(result, "event")]
    raw = json.dumps(events, ensure_ascii=False)
    assert all(secret in raw or json.dumps(secret)[1:-1] in raw for secret in SECRETS_28)  # all planted
    redacted = _redacted(events)
    letters = [dead_letter_excerpt(getattr(result, "raw", "")) for result in results if not hasattr(result, "event")]
    assert len(letters) == 1 and "please use [REDACTED:cut-token]" in letters[0]  # the cut line, dead-lettered
    blob = redacted + "\n".join(letters)
    leaks = sorted({secret[:12] for secret in [*SECRETS_28, CUT[4:]] for i in range(len(secret) - NEEDLE + 1)
                    if secret[i: i + NEEDLE] in blob or json.dumps(secret[i: i + NEEDLE])[1:-1] in blob})
    assert leaks == []
    # What is no secret stays: the Read tool's line numbers, a manifest's names, a vault user.
    assert "     1→" in redacted and "DATABASE_URL: [REDACTED:secret-assignment]" in redacted and "NODE_ENV:" in redacted


def test_secrets_of_2_8_seeded_into_real_openai_chat_runs_never_survive(tmp_path: Path) -> None:
    lines = OPENAI_CHAT.read_text().splitlines(keepends=True)
    spliced, calls, outputs = [], 0, 0
    # The fixture's runs, four times over (each copy its own conversation ids): every shape's input
    # lands in a tool call's arguments and every output in a tool's message.
    copies = [line.replace('"chatcmpl-', f'"chatcmpl-c{copy}-') for copy in range(4) for line in lines]
    for line in copies:
        try:
            conversation = json.loads(line)
        except json.JSONDecodeError:
            spliced.append(line)
            continue
        messages = conversation.get("messages") if isinstance(conversation, dict) else None
        for message in (m for m in messages or () if isinstance(m, dict)):
            for call in message.get("tool_calls") or ():
                tool, tool_input, _ = TOOL_SHAPES_28[calls % len(TOOL_SHAPES_28)]
                call["function"]["arguments"] = json.dumps({**tool_input, "tool": tool})
                calls += 1
            if message.get("role") == "tool":
                message["content"] = TOOL_SHAPES_28[outputs % len(TOOL_SHAPES_28)][2]
                outputs += 1
            elif message.get("role") == "user" and isinstance(message.get("content"), str):
                message["content"] += " " + PROMPT_28
        spliced.append(json.dumps(conversation) + "\n")
    path = tmp_path / OPENAI_CHAT.name
    path.write_text("".join(spliced))
    events = [result.event for result in iter_openai_chat(path, label="t") if hasattr(result, "event")]
    assert min(calls, outputs) >= len(TOOL_SHAPES_28) and any(event["type"] == "tool.result" for event in events)
    raw = json.dumps(events, ensure_ascii=False)
    planted = [secret for secret in SECRETS_28 if secret in raw or json.dumps(secret)[1:-1] in raw
               or json.dumps(json.dumps(secret)[1:-1])[1:-1] in raw]
    assert planted == SECRETS_28
    redacted = _redacted(events)
    assert sorted({secret[:12] for secret in SECRETS_28 for i in range(len(secret) - NEEDLE + 1)
                   if secret[i: i + NEEDLE] in redacted or json.dumps(secret[i: i + NEEDLE])[1:-1] in redacted}) == []
