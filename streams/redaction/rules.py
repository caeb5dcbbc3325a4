"""The ordered rule set of a policy.

Order matters: private keys go first (their base64 body must not be nibbled by token rules),
then environment dumps (replaced whole), vendor tokens, contextual secrets, generic
assignments, and personal data last.
"""

from __future__ import annotations

import re
from functools import lru_cache

from streams.redaction.base import RegexRule, Rule
from streams.redaction.context import CONTEXT_RULES, ENV_DUMP_RULE, PRIVATE_KEY_RULE, AssignmentRule
from streams.redaction.pii import DomainRule, EmailRule, home_rules
from streams.redaction.policy import RedactionPolicy
from streams.redaction.tokens import TOKEN_RULES

__all__ = ["build_rules", "rule_names"]


def _env_dump_rule(min_lines: int) -> RegexRule:
    if min_lines == 3:
        return ENV_DUMP_RULE
    pattern = ENV_DUMP_RULE.pattern.pattern.replace("{2,}", f"{{{min_lines - 1},}}")
    return RegexRule(
        name=ENV_DUMP_RULE.name, triggers=ENV_DUMP_RULE.triggers, description=ENV_DUMP_RULE.description,
        pattern=re.compile(pattern, ENV_DUMP_RULE.pattern.flags), check=ENV_DUMP_RULE.check,
    )


@lru_cache(maxsize=64)
def build_rules(policy: RedactionPolicy) -> tuple[Rule, ...]:
    """Every rule ``policy`` applies, in application order."""
    rules: list[Rule] = [PRIVATE_KEY_RULE, _env_dump_rule(policy.env_dump_min_lines)]
    rules += TOKEN_RULES
    rules += CONTEXT_RULES
    rules.append(AssignmentRule())
    if policy.redact_emails:
        rules.append(EmailRule(policy.keep_domains))
    if policy.redacted_domains:
        rules.append(DomainRule(policy.redacted_domains, policy.keep_domains))
    if policy.redact_home_usernames:
        rules += home_rules()
    return tuple(rules)


def rule_names(policy: RedactionPolicy | None = None) -> list[str]:
    """Names of every marker ``policy`` can produce (the keys of ``hits``), sorted."""
    names = {rule.name for rule in build_rules(policy or RedactionPolicy())}
    names |= {"password-assignment", "secret-field"}
    return sorted(names)
