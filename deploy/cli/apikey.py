"""``usl apikey create|list|revoke``: the API keys of the planner's HTTP API.

A key is printed once, at creation; the keys file keeps only its SHA-256, the principal it
stands for, a name and the creation time (:mod:`planner.auth`). A running API sees a
revocation on its next request.
"""

from __future__ import annotations

import typer

from deploy.cli._common import err, escape, load_settings, out, print_json

__all__ = ["COMMANDS", "create", "list_keys", "register", "revoke"]

COMMANDS = ("apikey",)  # the names register() adds


def register(app: typer.Typer) -> None:
    """Add the ``apikey`` group (``create``, ``list``, ``revoke``) to ``app``."""
    group = typer.Typer(help="API keys of the planner HTTP API (each maps to one principal).",
                        no_args_is_help=True)
    group.command("create")(create)
    group.command("list")(list_keys)
    group.command("revoke")(revoke)
    app.add_typer(group, name="apikey")


#: What creating the first key changes (a newcomer's key-less curl, which had worked, got 401).
_LOCKED = ("the API now needs a key for every /v1 request (X-USL-Principal alone is refused), and keeps "
           "needing one after the last key is revoked (docs/security.md); the usl commands are not concerned.")


def create(
    principal: str = typer.Option(..., "--principal", metavar="PRINCIPAL",
                                  help="Principal the key stands for, e.g. tenant:acme/user:alice/groups:ops."),
    name: str = typer.Option(None, "--name", metavar="NAME", help="Name to list and revoke it by (default: USER-HASHPREFIX)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON (includes the key, once)."),
) -> None:
    """Create an API key for PRINCIPAL and print it once; only its hash is stored."""
    from planner.auth import create_key, keys_path, read_keys

    path = keys_path(load_settings())
    first = read_keys(path) is None
    key, entry = create_key(path, principal, name)
    if first:  # said on stderr, so --json and a script reading the key are not concerned
        err().print(_LOCKED, soft_wrap=True)
    if json_out:
        print_json({"key": key, "name": entry.name, "principal": entry.principal,
                    "hashPrefix": entry.hash_prefix, "created": entry.created, "keysFile": str(path)})
        return
    out().print(key, markup=False, highlight=False)
    err().print(f"created API key {escape(entry.name)} for {escape(entry.principal)} in {escape(str(path))}; "
                "it is shown only now. Send it as `Authorization: Bearer KEY`.", soft_wrap=True)


def list_keys(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List API keys: name, principal, creation time and hash prefix (never the key)."""
    from planner.auth import keys_path, read_keys

    path = keys_path(load_settings())
    keys = read_keys(path)
    rows = [{"name": k.name, "principal": k.principal, "created": k.created, "hashPrefix": k.hash_prefix}
            for k in keys or []]
    if json_out:
        print_json({"keysFile": str(path), "enforced": keys is not None, "keys": rows})
        return
    if keys is None:
        out().print(f"no API keys file at {escape(str(path))}: the API takes X-USL-Principal "
                    "unauthenticated (loopback only)", soft_wrap=True)
        return
    for row in rows:
        out().print(f"{escape(row['name'])}  {escape(row['principal'])}  {row['created']}  "
                    f"sha256:{row['hashPrefix']}…", highlight=False, soft_wrap=True)
    if not rows:
        out().print("no API keys: every /v1 request is refused until one is created")


def revoke(name: str = typer.Argument(..., metavar="NAME", help="Name of the key (see `usl apikey list`).")) -> None:
    """Revoke an API key; a running API refuses it from its next request on."""
    from planner.auth import keys_path, read_keys, revoke_key

    path = keys_path(load_settings())
    entry = revoke_key(path, name)
    out().print(f"revoked {escape(entry.name)} ({escape(entry.principal)})")
    if not read_keys(path):
        out().print(f"no API keys left: every /v1 request is refused until one is created. To go back to "
                    f"X-USL-Principal on loopback without keys: `usl down`, remove {escape(str(path))}, "
                    "`usl up --detach`.", soft_wrap=True)
