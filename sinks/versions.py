"""What this code writes into every chunk, manifest and watermark: the chunker's and the
redaction policy's versions. Apart from ``sinks.service`` so that ``usl --version`` and the
CLI's checks do not load the sinks' writers (pyarrow, kafka) to print them."""

from __future__ import annotations

from typing import Any

from streams.settings import Settings

__all__ = ["pipeline_versions"]


def pipeline_versions(settings: Settings) -> dict[str, Any]:
    """Chunker and redaction versions recorded in every manifest and watermark."""
    from streams.chunking import ChunkerConfig
    from streams.chunking.tokenizer import default_tokenizer_identity
    from streams.redaction import POLICY_VERSION, policy_hash

    config = ChunkerConfig(target_tokens=settings.chunk_tokens, overlap_tokens=settings.chunk_overlap_tokens,
                           idle_gap_seconds=settings.idle_gap_seconds)
    return {
        "chunker": {"version": config.version, "tokenizer": default_tokenizer_identity(),
                    "targetTokens": config.target_tokens, "overlapTokens": config.overlap_tokens,
                    "idleGapSeconds": config.idle_gap_seconds, "tickEverySeqs": settings.tick_every_seqs},
        "redactionPolicy": policy_hash(),
        "redactionPolicyVersion": POLICY_VERSION,
    }
