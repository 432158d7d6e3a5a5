"""What may leave the machine: the redaction policy, every secret pattern (secret_rules), the Redactor that
applies them (policy), and a trace's scrubbed copy (scrub)."""
