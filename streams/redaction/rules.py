"""The ordered rule set of a policy.

Order matters. Private keys go first (their base64 body must not be nibbled by token rules),
then environment dumps (replaced whole, after a key block inside one has shrunk to a line),
URL passwords (before e-mail, which would read ``pass@host.com`` as an address), then
personal data, vendor tokens, contextual secrets and generic assignments. None of the rules
up to personal data can make an earlier rule match anew, so the common findings never cost
a second pass (see ``streams.redaction.text``).
"""

from __future__ import annotations

from functools import lru_cache

from streams.redaction.arguments import ARGUMENT_RULES
from streams.redaction.assignments import (
    ACCOUNT_ROW_RULE,
    CREDENTIAL_COLON_RULE,
    CREDENTIAL_PAIR_RULE,
    CREDENTIAL_SPACE_RULE,
    DEVICE_SECRET_RULES,
    LOGIN_PAIR_RULE,
    NAMED_ABOVE_RULE,
    AssignmentRule,
    PasswordBeforeRule,
)
from streams.redaction.base import Rule
from streams.redaction.context import (
    CONTEXT_RULES,
    DSN_PASSWORD_RULE,
    OPENVPN_KEY_RULE,
    PRIVATE_KEY_RULE,
    URL_PASSWORD_RULE,
    EnvDumpRule,
    WrappedTailRule,
)
from streams.redaction.formats import FORMAT_RULES, SHAPED_RULES
from streams.redaction.layouts import LAYOUT_RULES
from streams.redaction.nearby import NEARBY_RULES
from streams.redaction.pieces import CONCATENATED_RULE, PIECE_RULES
from streams.redaction.pii import PAYMENT_CARD_RULE, DomainRule, EmailRule, home_rules
from streams.redaction.policy import RedactionPolicy
from streams.redaction.printed import PRINTED_RULES
from streams.redaction.tokens import TOKEN_RULES, DiscordBotTokenRule, TelegramBotTokenRule
from streams.redaction.vendors import KeywordRule, PrefixTokenRule

__all__ = ["build_rules", "rule_names"]


@lru_cache(maxsize=64)
def build_rules(policy: RedactionPolicy) -> tuple[Rule, ...]:
    """Every rule ``policy`` applies, in application order."""
    rules: list[Rule] = [PRIVATE_KEY_RULE, OPENVPN_KEY_RULE, EnvDumpRule(policy.env_dump_min_lines), URL_PASSWORD_RULE, DSN_PASSWORD_RULE]
    if policy.redact_emails:
        rules.append(EmailRule(policy.keep_domains))
    if policy.redacted_domains:
        rules.append(DomainRule(policy.redacted_domains, policy.keep_domains))
    if policy.redact_home_usernames:
        rules += home_rules()
    rules += TOKEN_RULES
    rules += (PrefixTokenRule(), KeywordRule())
    rules += (DiscordBotTokenRule(), TelegramBotTokenRule())
    rules += SHAPED_RULES
    # 2.14's readings by a tool's own marks come first: a pwdump line is also five colon-separated
    # fields, which the .pgpass reading would take for a password in its last.
    rules += PRINTED_RULES
    rules += CONTEXT_RULES
    rules += PIECE_RULES
    rules += LAYOUT_RULES
    rules += ARGUMENT_RULES
    rules += NEARBY_RULES
    rules += FORMAT_RULES
    rules += (AssignmentRule(), CREDENTIAL_PAIR_RULE, CREDENTIAL_COLON_RULE, CREDENTIAL_SPACE_RULE, LOGIN_PAIR_RULE, PasswordBeforeRule(),
               NAMED_ABOVE_RULE)
    rules += (*DEVICE_SECRET_RULES, ACCOUNT_ROW_RULE)
    # After every rule that leaves a marker: a secret's wrapped continuation goes with it, and
    # so do the other pieces of a secret split over joined string literals.
    rules += (CONCATENATED_RULE, WrappedTailRule())
    if policy.redact_payment_cards:
        # Last: a card number inside a token or an assignment is already gone with it.
        rules.append(PAYMENT_CARD_RULE)
    return tuple(rules)


def rule_names(policy: RedactionPolicy | None = None) -> list[str]:
    """Names of every marker ``policy`` can produce (the keys of ``hits``), sorted."""
    names = {name for rule in build_rules(policy or RedactionPolicy()) for name in rule.hit_names()}
    return sorted(names | {"secret-field", "secret-output"})
