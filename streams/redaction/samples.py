"""Fake secrets for tests that seed sessions and byte-scan everything downstream.

Every entry is a realistic, *fake* credential of a different kind (generated from a seeded
RNG; none was ever valid), and every entry is certainly matched by a policy-v1 rule, so after
redaction none of these strings may appear in any index file, downstream topic, log line or
metric label (SPEC §10.7). The comment names the rule that removes it.
"""

from __future__ import annotations

__all__ = ["SEEDED_SECRETS"]

SEEDED_SECRETS: list[str] = [
    "AKIAUJZDE8GXD6NCF10E",  # aws-access-key-id
    "AIzaEl2hpChYgCfrL1spNxnyVmihA-2O76UMFxF",  # gcp-api-key
    "ghp_fKtHF4vUCsMehGAkWvj7FAc9QeWJKY40uvSw",  # github-token
    "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",  # github-token
    "glpat-lqsajAIxNKu8iS2G8NPR",  # gitlab-token
    "xoxb-07866661760-3137215901092-Ig8xNbe3nNyjOq9wMxEhh2FD",  # slack-token
    "https://hooks.slack.com/services/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",  # slack-webhook
    "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",  # stripe-key
    "SKb440034d6608697a8d41bed440e50454",  # twilio-api-key
    "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",  # sendgrid-api-key
    "sk-proj-XQLioDnkHIfxIq2HZt-PlJhx2jIclHkCiHp6bR1IqfEouHgxT3BlbkFJzNNAL5wIScGebcy8F5n3-YNBDRzrZSgqbjG3uhkWKFLf6xuI",  # openai-api-key
    "sk-ant-api03-5aHUQPFeNBTxaQWk8JzFalHlsZfYcMMDktXP-tKsf2rcDkdfrUnW5gcF_Ha6ili8GjHEAD6-Wj9KfzjsQGMrb9h_ImB_LAA",  # anthropic-api-key
    "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",  # huggingface-token
    "npm_Gr4hTxoF54Fzbka8FRCztUjAwyuh1vauWv1z",  # npm-token
    "pypi-AgEIcHlwaS5vcmcpzbLGViYXjU2JgJngKtFI3OyV2dZAkg05rK_gqv81RKMGHZEM9YpvujA-C5Q52ryFlwRlOEVHzc0X0AWIRh-JUqBlIFXZ53Ncqe28_ajY75FnCttn6kfaqDe",  # pypi-token
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJzZWVkZWQtdXNlciIsImlhdCI6MTc2NzIyNTYwMH0.pbdN9iCgQIeib7LDHBkSTIbxlTFjQjnKmQACiU3_dUc",  # jwt
    "postgres://usl_app:Zq8Wt4vLp2Rx9mKdT3@db.internal:5432/usl",  # url-password
]
