"""Redaction policy v2.23: the options a deployment chooses, and the hash that names them.

The hash covers the policy version, every rule's name, triggers and pattern, the entropy
thresholds, how wrapped lines are rejoined, which JSON literals are read decoded and every option, so an index built under one policy can never be mistaken for
one built under another: it goes into every manifest, chunk and redacted record.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields
from functools import lru_cache

from streams.exceptions import ConfigError

__all__ = ["DEFAULT_POLICY", "POLICY_VERSION", "RedactionPolicy", "policy_hash"]

POLICY_VERSION = "2.23"


@dataclass(frozen=True)
class RedactionPolicy:
    """What redaction removes beyond secrets (which are always removed), and how much it keeps.

    - ``redact_home_usernames``: ``/home/alice/x`` → ``/home/[USER]/x`` (also ``/Users``,
      ``C:\\Users``).
    - ``redact_emails``: e-mail addresses → ``[REDACTED:email]``.
    - ``redact_payment_cards``: Luhn-valid card numbers of a card network →
      ``[REDACTED:payment-card]``.
    - ``redacted_domains``: host names equal to or under these → ``[REDACTED:domain]``.
    - ``keep_domains``: e-mail addresses and hosts under these are kept (wins over
      ``redacted_domains``, so ``docs.corp.example`` can stay while ``corp.example`` goes).
    - ``env_dump_min_lines``: this many consecutive ``NAME=value`` lines are an environment
      dump and are replaced whole.
    - ``summary_chars``: characters of a tool result's redacted output kept as its indexed summary.
    - ``summary_tail_chars``: a failed tool's last whole output lines kept after them, up to this
      many characters (where a traceback's error and a test run's failures are), after a
      `` … [N bytes] … `` note.
    - ``max_field_chars``: longest string kept in an indexed event's fields (message text is
      exempt: it is the conversation the chunker splits); longer strings are cut.
    """

    redact_home_usernames: bool = True
    redact_emails: bool = True
    redact_payment_cards: bool = True
    redacted_domains: tuple[str, ...] = ()
    keep_domains: tuple[str, ...] = ()
    env_dump_min_lines: int = 3
    summary_chars: int = 280
    summary_tail_chars: int = 200
    max_field_chars: int = 8192

    def __post_init__(self) -> None:
        for name in ("redacted_domains", "keep_domains"):
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(item, str) for item in value):
                raise ConfigError(f"redaction policy: {name} must be a sequence of domain names, got {value!r}")
            # Lists are accepted for convenience; the policy must stay hashable.
            object.__setattr__(self, name, tuple(item.strip().lower() for item in value))
        if self.env_dump_min_lines < 2:
            raise ConfigError(f"redaction policy: env_dump_min_lines must be >= 2, got {self.env_dump_min_lines}")
        for name in ("summary_chars", "summary_tail_chars"):
            if getattr(self, name) < 0:
                raise ConfigError(f"redaction policy: {name} must be >= 0, got {getattr(self, name)}")
        if self.max_field_chars < 64:
            raise ConfigError(f"redaction policy: max_field_chars must be >= 64, got {self.max_field_chars}")
        # Hashed once: the policy keys the caches of every redacted string.
        object.__setattr__(self, "_hash", hash(tuple(getattr(self, f.name) for f in fields(self))))

    def __hash__(self) -> int:
        return self._hash  # type: ignore[no-any-return, attr-defined]


DEFAULT_POLICY = RedactionPolicy()


def policy_hash(policy: RedactionPolicy | None = None) -> str:
    """Stable identity of ``policy``: the first 16 hex digits of a SHA-256 over its definition."""
    return _hash(policy or DEFAULT_POLICY)


@lru_cache(maxsize=64)
def _hash(policy: RedactionPolicy) -> str:
    # Imported here because the rule set is built from a policy.
    from streams.redaction import entropy, keys, literals, memory, pieces, text
    from streams.redaction.rules import build_rules

    definition = {
        "version": POLICY_VERSION,
        "options": asdict(policy),
        "rules": [rule.fingerprint() for rule in build_rules(policy)],
        "entropy": [entropy.MIN_TOKEN_CHARS, entropy.HEX_MIN_ENTROPY, entropy.TOKEN_MIN_ENTROPY],
        "names": keys.fingerprint(),
        "wrapped": text.rejoin_fingerprint(),
        "literals": literals.fingerprint(),
        "ansi": text.ansi_fingerprint(),
        "repeats": pieces.repeated_fingerprint(),
        "memory": memory.memory_fingerprint(),
    }
    encoded = json.dumps(definition, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(encoded.encode("ascii")).hexdigest()[:16]
