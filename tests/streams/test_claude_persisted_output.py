"""Claude Code tool results the model saw only as a ``<persisted-output>`` preview: the event's
output is the whole output, from the line's ``toolUseResult`` or the file beside the transcript.

The lines copy the structure of real ones (a Bash test run of Claude Code 2.1.39, a Grep of
2.1.7 in /tmp/realdata), with their texts made up; the envelope is Claude Code's own wording."""

from __future__ import annotations

import json
from pathlib import Path

from streams.asp import CUT_NOTE, canonical_bytes
from streams.follow import Follower, PositionStore
from streams.importers import Accepted, detect_format, iter_records
from streams.testing import Clock, MemoryL1
from tests.streams.follow_kit import LIMIT, follow_as_it_grows

SESSION = "8463c716-a2ea-4c14-9efa-87158ebd9f20"
PROJECT = "/home/someone/.claude/projects/-home-someone-src-app"
CALL = "toolu_019CpL49DWBenUxVVCWEXz3L"


def envelope(output: str, saved_to: str, size: str = "141KB") -> str:
    """The tool_result content Claude Code writes for ``output`` (its preview: the first 2 000
    characters, cut at a line break)."""
    head = output[:2000]
    preview = head[:head.rfind("\n")] if head.rfind("\n") > 1000 else head
    return (f"<persisted-output>\nOutput too large ({size}). Full output saved to: {saved_to}\n\n"
            f"Preview (first 2KB):\n{preview}\n...\n</persisted-output>")


def vitest_run(lines: int = 4000) -> str:
    """A vitest run whose failure is far past the preview."""
    body = "".join(f" \x1b[32m✓\x1b[39m test/case-{n}.test.js (4 tests) 13ms\n" for n in range(lines))
    return f"\x1b[1m RUN \x1b[22m v4.0.18 /src/app/assets\n\n{body}TypeError: Cannot read properties of null\n"


def call_line(uuid: str, name: str, tool_input: dict) -> dict:
    return {"parentUuid": "u0", "isSidechain": False, "userType": "external", "cwd": "/src/app", "sessionId": SESSION,
            "version": "2.1.39", "gitBranch": "main", "type": "assistant",
            "message": {"model": "claude-opus-4-6", "id": f"msg_{uuid}", "type": "message", "role": "assistant",
                        "content": [{"type": "tool_use", "id": CALL, "name": name, "input": tool_input}],
                        "usage": {"input_tokens": 3, "output_tokens": 90}},
            "uuid": uuid, "timestamp": "2026-02-11T22:41:40.000Z"}


def result_line(content: str, tool_use_result: object = None, *, uuid: str = "d949cdd8-9718-47c5-bdd7-6a2b9e8ed7c9",
                parent: str = "a1") -> dict:
    line = {"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": "/src/app",
            "sessionId": SESSION, "version": "2.1.39", "gitBranch": "main", "slug": "drifting-tumbling-whisper",
            "type": "user",
            "message": {"role": "user", "content": [
                {"tool_use_id": CALL, "type": "tool_result", "content": content, "is_error": False}]},
            "uuid": uuid, "timestamp": "2026-02-11T22:42:13.406Z"}
    if tool_use_result is not None:
        line["toolUseResult"] = tool_use_result
    line["sourceToolAssistantUUID"] = parent
    return line


def session(root: Path, *lines: dict, name: str = f"{SESSION}.jsonl") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    prompt = {"parentUuid": None, "isSidechain": False, "userType": "external", "cwd": "/src/app", "sessionId": SESSION,
              "version": "2.1.39", "type": "user", "message": {"role": "user", "content": "run the tests"},
              "uuid": "u0", "timestamp": "2026-02-11T22:41:30.000Z"}
    path = root / name
    path.write_text("".join(json.dumps(line) + "\n" for line in (prompt, *lines)))
    return path


def outputs(path: Path, **kwargs: object) -> list[str]:
    return [item.event["fields"]["output"] for item in iter_records(path, "claude-code", **kwargs)
            if isinstance(item, Accepted) and item.event["type"] == "tool.result"]


def test_a_bash_output_the_model_saw_a_preview_of_is_whole(tmp_path: Path) -> None:
    """Claude Code 2.1.39 cut a 141 KB test run to a 2 KB preview and kept its stdout whole in
    toolUseResult: the failure past the preview was in no index (`usl search TypeError`)."""
    run = vitest_run()
    saved = f"{PROJECT}/{SESSION}/tool-results/{CALL}.txt"
    path = session(tmp_path, call_line("a1", "Bash", {"command": "npx vitest run"}), result_line(
        envelope(run, saved),
        {"stdout": run, "stderr": "", "interrupted": False, "isImage": False, "noOutputExpected": False}))
    [output] = outputs(path)
    assert "TypeError: Cannot read properties of null" in output
    assert output == run.rstrip()  # as Claude Code gives stdout to the model: trailing space dropped
    assert "<persisted-output>" not in output


def test_bash_stderr_and_an_abort_follow_its_stdout(tmp_path: Path) -> None:
    """Bash's result is its stdout, then its stderr, then the abort notice, one per line: the
    envelope stood for all of it."""
    run = "\n\n" + vitest_run(100)
    joined = vitest_run(100).rstrip() + "\nwarning: slow test\n<error>Command was aborted before completion</error>"
    path = session(tmp_path, call_line("a1", "Bash", {"command": "npx vitest run"}), result_line(
        envelope(joined, f"{PROJECT}/{SESSION}/tool-results/{CALL}.txt"),
        {"stdout": run, "stderr": "warning: slow test\n", "interrupted": True, "isImage": False}))
    assert outputs(path) == [joined]


def test_a_grep_output_the_model_saw_a_preview_of_is_whole(tmp_path: Path) -> None:
    """A held-out transcript (2.1.7): a Grep of 186 KB, its matches in toolUseResult.content."""
    matches = "".join(f"cmd/entire/cli/resume.go:{n}:\tif cpID, found := trailers.ParseCheckpoint(m); found {{\n"
                      for n in range(3000)) + "cmd/entire/cli/zz.go:1:\tneedleOfTheLastMatch()"
    path = session(tmp_path, call_line("a1", "Grep", {"pattern": "ParseCheckpoint", "output_mode": "content"}),
                   result_line(envelope(matches, "/Users/soph/.REDACTED.txt", "186.3KB"),
                               {"mode": "content", "numFiles": 0, "filenames": [], "content": matches,
                                "numLines": 3001}))
    assert outputs(path) == [matches]


def test_read_glob_and_mcp_results_give_their_text(tmp_path: Path) -> None:
    """Read: the file's text; Glob (and a Grep of file names): the names; an MCP tool: its
    content blocks' texts."""
    text = "".join(f"line {n} of the design document\n" for n in range(3000))
    names = [f"/src/app/lib/module_{n}.ex" for n in range(3000)]
    cases = [
        ("Read", {"type": "text", "file": {"filePath": "/src/app/DESIGN.md", "content": text, "numLines": 3000,
                                           "startLine": 1, "totalLines": 3000}}, text),
        ("Glob", {"filenames": names, "durationMs": 12, "numFiles": 3000, "truncated": False}, "\n".join(names)),
        ("mcp__github__list_issues", [{"type": "text", "text": text}], text),
    ]
    for index, (name, tool_use_result, whole) in enumerate(cases):
        path = session(tmp_path / str(index), call_line("a1", name, {}), result_line(
            envelope(whole, f"{PROJECT}/{SESSION}/tool-results/{CALL}.txt"), tool_use_result))
        assert outputs(path) == [whole], name


def test_the_sidecar_beside_the_transcript_holds_what_the_line_does_not(tmp_path: Path) -> None:
    """Newer Bash results keep only the head of stdout and name the file Claude Code saved the
    whole to (``persistedOutputPath``, a path on the writer's machine): it is read from the
    session's ``tool-results`` beside the transcript; stderr after the envelope stays after it."""
    run = vitest_run()
    saved = f"{PROJECT}/{SESSION}/tool-results/b81w5him8.txt"
    sidecar = tmp_path / SESSION / "tool-results" / "b81w5him8.txt"
    sidecar.parent.mkdir(parents=True)
    sidecar.write_text(run)
    head = run[:30000]
    path = session(tmp_path, call_line("a1", "Bash", {"command": "npx vitest run"}), result_line(
        envelope(head, saved) + "\nShell cwd was reset to /src/app",
        {"stdout": head, "stderr": "\nShell cwd was reset to /src/app", "interrupted": False, "isImage": False,
         "persistedOutputPath": saved, "persistedOutputSize": len(run)}))
    assert outputs(path) == [run + "\nShell cwd was reset to /src/app"]
    sidecar.unlink()  # gone: the head the line kept, more than the preview
    assert outputs(path) == [head.rstrip() + "\nShell cwd was reset to /src/app"]


def test_a_sidecar_without_a_tool_use_result_and_a_subagents_sidecar(tmp_path: Path) -> None:
    """A line without toolUseResult takes the sidecar; a subagent's file
    (``SESSION/subagents/agent-ID.jsonl``) finds its session's; a result of content blocks is
    saved as their JSON array, whose texts are the output."""
    run = vitest_run()
    (tmp_path / SESSION / "tool-results").mkdir(parents=True)
    (tmp_path / SESSION / "tool-results" / f"{CALL}.txt").write_text(run)
    (tmp_path / SESSION / "tool-results" / "toolu_json.json").write_text(
        json.dumps([{"type": "text", "text": "first part"}, {"type": "text", "text": "second part"}], indent=2))
    main = session(tmp_path, call_line("a1", "Bash", {"command": "npx vitest run"}),
                   result_line(envelope(run, f"{PROJECT}/{SESSION}/tool-results/{CALL}.txt")))
    assert outputs(main) == [run]
    sub = session(tmp_path / SESSION / "subagents", call_line("a1", "mcp__docs__fetch", {}),
                  result_line(envelope("first part\nsecond part", f"C:\\Users\\someone\\.claude\\projects\\p\\"
                                       f"{SESSION}\\tool-results\\toolu_json.json")), name="agent-a7be2f0.jsonl")
    assert outputs(sub) == ["first part\nsecond part"]


def test_a_json_sidecar_with_a_lone_surrogate_is_read_as_its_blocks(tmp_path: Path) -> None:
    """Claude Code writes the saved blocks as it writes its lines: a text cut between the halves
    of an emoji leaves a lone surrogate escape, which orjson refused, so the output was the
    file's raw JSON (keys, quotes, escapes) instead of its texts."""
    (tmp_path / SESSION / "tool-results").mkdir(parents=True)
    (tmp_path / SESSION / "tool-results" / "toolu_json.json").write_text(
        '[{"type": "text", "text": "page one \\ud83d"}, {"type": "text", "text": "page two"}]')
    path = session(tmp_path, call_line("a1", "mcp__docs__fetch", {}),
                   result_line(envelope("page one", f"{PROJECT}/{SESSION}/tool-results/toolu_json.json")))
    assert outputs(path) == ["page one \ufffd\npage two"]


def test_without_the_whole_the_preview_stays_and_no_other_file_is_read(tmp_path: Path) -> None:
    """No toolUseResult and no sidecar: the envelope as the model saw it. An envelope naming a
    path outside a session's tool-results (redacted, or climbing out) reads no file."""
    (tmp_path / "secret.txt").write_text("not a tool output")
    (tmp_path / SESSION / "tool-results").mkdir(parents=True)
    for saved in (f"{PROJECT}/{SESSION}/tool-results/{CALL}.txt", "/Users/soph/.REDACTED.txt",
                  f"{PROJECT}/{SESSION}/tool-results/../../secret.txt", "/x/../tool-results/secret.txt"):
        shown = envelope(vitest_run(), saved)
        path = session(tmp_path, call_line("a1", "Bash", {"command": "npx vitest run"}), result_line(shown))
        assert outputs(path) == [shown], saved


def test_a_200_kb_output_is_whole_under_the_default_limit_and_cut_under_a_smaller(tmp_path: Path) -> None:
    run = vitest_run(5000)
    assert 200_000 < len(run.encode()) < 400_000
    path = session(tmp_path, call_line("a1", "Bash", {"command": "npx vitest run"}), result_line(
        envelope(run, f"{PROJECT}/{SESSION}/tool-results/{CALL}.txt"),
        {"stdout": run, "stderr": "", "interrupted": False, "isImage": False}))
    assert outputs(path) == [run.rstrip()]
    [cut] = [item for item in iter_records(path, "claude-code", max_event_bytes=64 * 1024)
             if isinstance(item, Accepted) and item.event["type"] == "tool.result"]
    head = cut.event["fields"]["output"]
    assert cut.cut > 0 and head.endswith(CUT_NOTE)
    assert run.startswith(head.removesuffix(CUT_NOTE)) and len(head) > 50_000  # its head, to a line break
    assert len(canonical_bytes(cut.event)) <= 64 * 1024


def _sidecar_session(root: Path) -> Path:
    run = vitest_run()
    (root / SESSION / "tool-results").mkdir(parents=True)
    (root / SESSION / "tool-results" / "b81w5him8.txt").write_text(run)
    saved = f"{PROJECT}/{SESSION}/tool-results/b81w5him8.txt"
    return session(root, call_line("a1", "Bash", {"command": "npx vitest run"}), result_line(
        envelope(run[:30000], saved), {"stdout": run[:30000], "stderr": "", "interrupted": False,
                                       "persistedOutputPath": saved, "persistedOutputSize": len(run)}))


def test_a_reimport_and_a_follower_give_the_same_events(tmp_path: Path) -> None:
    """The bytes of every event are the same on a re-import and when followed as written (the
    sidecar, written by Claude Code before the line, read when the line is)."""
    path = _sidecar_session(tmp_path / "live")
    first = [canonical_bytes(i.event) for i in iter_records(path.parent, max_event_bytes=LIMIT) if isinstance(i, Accepted)]
    again = [canonical_bytes(i.event) for i in iter_records(path.parent, max_event_bytes=LIMIT) if isinstance(i, Accepted)]
    assert first == again
    assert any(b"TypeError" in event for event in first) is False  # cut to LIMIT: the head only
    lines = path.read_bytes().splitlines(keepends=True)
    l1 = follow_as_it_grows(path, lines, tmp_path / "home", first=1)
    assert [canonical_bytes(event) for event in l1.log] == first


def test_a_directory_import_and_a_follower_leave_tool_results_alone(tmp_path: Path) -> None:
    """A ``SESSION/tool-results/ID.json`` (a result of content blocks) failed the import of its
    project directory: no format could be told of it."""
    path = _sidecar_session(tmp_path / "project")
    (path.parent / SESSION / "tool-results" / "toolu_json.json").write_text(
        json.dumps([{"type": "text", "text": "x"}], indent=2))
    assert detect_format(path.parent) == "claude-code"
    records = {item.record.rsplit(":", 1)[0] for item in iter_records(path.parent)}
    assert records == {path.name}
    l1, clock = MemoryL1(), Clock()
    tail = Follower([path.parent], appender=l1, store=PositionStore(tmp_path / "home"), idle_seconds=5.0, clock=clock)
    report = tail.poll()
    clock.now += 10
    tail.poll()
    assert report.undetected == []
    assert len(l1.log) == sum(isinstance(i, Accepted) for i in iter_records(path.parent))


def mcp_notice(saved_to: str, characters: str = "307,533", across: str = "") -> str:
    """What Claude Code hands the model in place of an MCP tool's result over its token limit
    (mcpOutputStorage.ts's wording; 2.1.x adds "across N lines")."""
    return (f"Error: result ({characters} characters{across}) exceeds maximum allowed tokens. Output has been saved "
            f"to {saved_to}.\nFormat: Plain text\nUse offset and limit parameters to read specific portions of the "
            "file, search within it for specific content, and jq to make structured queries.\n"
            "REQUIREMENTS FOR SUMMARIZATION/ANALYSIS/REVIEW:\n- You MUST read the content from the file at "
            f"{saved_to} in sequential chunks until 100% of the content has been read.")


def test_an_mcp_result_over_its_token_limit_is_read_whole_from_the_saved_file(tmp_path: Path) -> None:
    """An MCP tool's result over the token limit was the notice alone: the page a browser tool
    fetched was in no index. It is read from the file beside the transcript, by the rules of
    <persisted-output> (the last three names only, under the session's tool-results); a notice
    whose file is not there, or that names a path out of a session's tool-results, stays."""
    page = "<html>" + "".join(f"<p>row {n}</p>" for n in range(20000)) + "<p>checkout failed: 502</p></html>"
    name = "mcp-plugin_fnd_chrome-devtools-mcp-evaluate_script-1784908372707.txt"
    (tmp_path / SESSION / "tool-results").mkdir(parents=True)
    (tmp_path / SESSION / "tool-results" / name).write_text(page)
    (tmp_path / SESSION / "tool-results" / "mcp-docs-fetch-1784908372708.json").write_text(
        json.dumps([{"type": "text", "text": '{"title": "Runbook"}'}]))
    (tmp_path / "secret.txt").write_text("not a tool output")
    for saved, across, whole in (
            (f"{PROJECT}/{SESSION}/tool-results/{name}", "", page),
            (f"C:\\Users\\some one\\.claude\\projects\\p\\{SESSION}\\tool-results\\{name}", " across 1 lines", page),
            (f"{PROJECT}/{SESSION}/tool-results/mcp-docs-fetch-1784908372708.json", "", '{"title": "Runbook"}'),
            (f"{PROJECT}/{SESSION}/tool-results/mcp-gone-1.txt", "", None),
            (f"{PROJECT}/{SESSION}/tool-results/../../secret.txt", "", None)):
        notice = mcp_notice(saved, across=across)
        path = session(tmp_path, call_line("a1", "mcp__chrome-devtools__evaluate_script", {"function": "() => 1"}),
                       result_line(notice, [{"type": "text", "text": notice}]))
        assert outputs(path) == [whole or notice], saved
        assert outputs(path) == outputs(path)  # a re-import reads the same


def test_a_tool_results_directory_of_ones_own_transcripts_is_read(tmp_path: Path) -> None:
    """Only Claude Code's ``SESSION/tool-results`` beside ``SESSION.jsonl`` is skipped: a user's own
    folder of that name holding transcripts was left out of a directory import and a follower
    without a word."""
    root = tmp_path / "evals"
    path = session(root / "tool-results", call_line("a1", "Bash", {"command": "ls"}), result_line("a.txt"))
    imported = {item.record.rsplit(":", 1)[0] for item in iter_records(root) if isinstance(item, Accepted)}
    assert imported == {f"tool-results/{path.name}"}
    l1, clock = MemoryL1(), Clock()
    tail = Follower([root], appender=l1, store=PositionStore(tmp_path / "home"), idle_seconds=5.0, clock=clock)
    tail.poll()
    clock.now += 10
    tail.poll()
    assert len(l1.log) == sum(isinstance(i, Accepted) for i in iter_records(root)) > 0
