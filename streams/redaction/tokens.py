"""Vendor token formats: keys recognisable by their documented prefix and shape.

Each pattern starts with its literal prefix (so Python's regex engine can skip ahead to it)
and checks the character before the prefix with a lookbehind placed *after* it, which keeps
that fast path while still refusing matches glued to a longer word.
"""

from __future__ import annotations

import base64
import binascii
import re

from streams.redaction.base import RegexRule

__all__ = ["TOKEN_RULES"]

_BEFORE = "[A-Za-z0-9_]"


def _prefixed(prefixes: tuple[str, ...], body: str, *, before: str | None = _BEFORE, after: str = "[A-Za-z0-9_]") -> re.Pattern[str]:
    """``(prefix)body`` with a word guard after the body and, unless ``before`` is ``None``
    (prefixes distinctive enough to stand anywhere: ``ghp_``, ``sk-ant-``), before the prefix."""
    by_length: dict[int, list[str]] = {}
    for prefix in prefixes:
        by_length.setdefault(len(prefix), []).append(re.escape(prefix))
    guard = "" if before is None else f"(?<!{before}.{{{{{{length}}}}}})"
    heads = [
        f"(?:{'|'.join(alternatives)})" + guard.format(length=length)
        for length, alternatives in sorted(by_length.items(), reverse=True)
    ]
    head = heads[0] if len(heads) == 1 else "(?:" + "|".join(heads) + ")"
    return re.compile(f"{head}{body}(?!{after})", re.ASCII | re.DOTALL)


def _token(name: str, prefixes: tuple[str, ...], body: str, description: str, **kwargs: object) -> RegexRule:
    check = kwargs.pop("check", None)
    pattern = _prefixed(prefixes, body, **kwargs)  # type: ignore[arg-type]
    return RegexRule(name=name, triggers=prefixes, pattern=pattern, check=check, description=description)  # type: ignore[arg-type]


def _mixed(match: re.Match[str]) -> bool:
    # Random key bodies mix character classes; kebab-case names (sk-learn-compatible-...) do not.
    body = match.group(0)
    classes = sum((any(c.isdigit() for c in body), any(c.isupper() for c in body), any(c.islower() for c in body)))
    return classes >= 2


_WORDS_ONLY = re.compile(r"(?:[A-Z][a-z]{2,})+|[a-z]+", re.ASCII)


def _random_letters(match: re.Match[str]) -> bool:
    # hf_ + 34 random letters, not 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 (CamelCase words).
    return _WORDS_ONLY.fullmatch(match.group(0)[3:]) is None


def _discord_id(match: re.Match[str]) -> bool:
    # The first segment of a Discord bot token is the base64 of the bot's numeric user id.
    head = match.group(0).split(".", 1)[0]
    try:
        decoded = base64.urlsafe_b64decode(head + "=" * (-len(head) % 4))
    except (binascii.Error, ValueError):
        return False
    return decoded.isdigit() and _mixed(match)


TOKEN_RULES: tuple[RegexRule, ...] = (
    _token("aws-access-key-id", ("AKIA", "ASIA", "ABIA", "ACCA"), "[A-Z0-9]{16}",
           "AWS access key id (long-term AKIA, temporary ASIA)", before="[A-Z0-9]", after="[A-Z0-9]"),
    _token("gcp-api-key", ("AIza",), "[0-9A-Za-z_-]{30,50}", "Google Cloud / Firebase API key",
           before=None, after="[A-Za-z0-9_-]"),
    _token("google-oauth-token", ("ya29.",), "[0-9A-Za-z_-]{20,}", "Google OAuth 2.0 access token",
           before=None, after="[A-Za-z0-9_-]"),
    _token("github-token", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), "[A-Za-z0-9]{20,255}",
           "GitHub personal, OAuth, user-to-server, server-to-server and refresh tokens", before=None),
    _token("github-token", ("github_pat_",), "[A-Za-z0-9_]{20,255}", "GitHub fine-grained personal access token", before=None),
    _token("gitlab-token", ("glpat-", "gldt-", "glrt-", "glptt-", "glft-", "glsoat-", "glcbt-"),
           "[A-Za-z0-9_-]{20,}", "GitLab personal, deploy, runner, trigger and feed tokens",
           before=None, after="[A-Za-z0-9_-]"),
    _token("slack-token", ("xoxb-", "xoxp-", "xoxa-", "xoxr-", "xoxs-", "xoxe-", "xapp-"),
           "[0-9A-Za-z-]{10,}", "Slack bot, user, app and refresh tokens",
           before=None, after="[A-Za-z0-9_-]"),
    _token("slack-webhook", ("hooks.slack.com/",), "(?:services|workflows|triggers)/[A-Za-z0-9/_+-]{10,}",
           "Slack incoming-webhook URL", before=None, after="[A-Za-z0-9/_+-]"),
    _token("discord-webhook", ("discord.com/api/webhooks/", "discordapp.com/api/webhooks/"),
           "[0-9]{5,}/[A-Za-z0-9_-]{20,}", "Discord webhook URL", before=None, after="[A-Za-z0-9_-]"),
    _token("discord-bot-token", ("MT", "Mj", "Mz", "ND", "NT", "Nj", "Nz", "OD", "OT"),
           r"[A-Za-z0-9_-]{20,28}\.[A-Za-z0-9_-]{6,7}\.[A-Za-z0-9_-]{27,40}", "Discord bot token",
           before="[A-Za-z0-9_-]", after="[A-Za-z0-9_-]", check=_discord_id),
    _token("stripe-key", ("sk_live_", "rk_live_", "sk_test_", "rk_test_"), "[0-9A-Za-z]{10,255}",
           "Stripe secret and restricted keys", before=None),
    _token("stripe-key", ("whsec_",), "[0-9A-Za-z]{20,255}", "Stripe webhook signing secret", before=None),
    _token("twilio-api-key", ("SK",), "[0-9a-fA-F]{32}", "Twilio API key SID",
           before="[A-Z0-9]", after="[0-9a-fA-F]"),
    _token("twilio-account-sid", ("AC",), "[0-9a-fA-F]{32}", "Twilio account SID",
           before="[A-Z0-9]", after="[0-9a-fA-F]"),
    _token("sendgrid-api-key", ("SG.",), r"[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{16,64}", "SendGrid API key",
           before=None, after="[A-Za-z0-9_-]"),
    _token("anthropic-api-key", ("sk-ant-",), "[A-Za-z0-9_-]{20,}", "Anthropic API and admin keys",
           before=None, after="[A-Za-z0-9_-]"),
    _token("openai-api-key", ("sk-proj-", "sk-svcacct-", "sk-admin-", "sk-None-"), "[A-Za-z0-9_-]{20,}",
           "OpenAI project, service-account and admin keys", before=None, after="[A-Za-z0-9_-]"),
    _token("openai-api-key", ("sk-",), "(?!ant-)[A-Za-z0-9_-]{20,}",
           "OpenAI keys (sk-, sk-proj-, sk-svcacct-, sk-admin-)",
           before="[A-Za-z0-9_-]", after="[A-Za-z0-9_-]", check=_mixed),
    _token("huggingface-token", ("hf_",), "[A-Za-z0-9]{30,}", "Hugging Face access token", before=None, check=_random_letters),
    _token("npm-token", ("npm_",), "[A-Za-z0-9]{30,}", "npm access token", before=None, check=_mixed),
    _token("pypi-token", ("pypi-AgE",), "[A-Za-z0-9_-]{40,}", "PyPI / TestPyPI upload token",
           before=None, after="[A-Za-z0-9_-]"),
    _token("shopify-token", ("shpat_", "shpca_", "shppa_", "shpss_"), "[a-fA-F0-9]{32}", "Shopify access tokens", before=None),
    _token("digitalocean-token", ("dop_v1_", "doo_v1_", "dor_v1_"), "[a-f0-9]{64}", "DigitalOcean tokens", before=None),
    _token("age-secret-key", ("AGE-SECRET-KEY-1",), "[0-9A-Z]{58}", "age encryption secret key",
           before=None, after="[A-Za-z0-9]"),
    _token("jwt", ("eyJ",), r"[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*=*",
           "JSON Web Token (header.payload.signature)", before=None, after="[A-Za-z0-9_-]"),
)
