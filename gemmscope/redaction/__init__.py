"""What may leave the machine: the redaction policy, every secret pattern (policy), and a trace's
scrubbed copy (scrub)."""
