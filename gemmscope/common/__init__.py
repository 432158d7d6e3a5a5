"""What every stage uses: outputs written whole (atomic), long work that Ctrl-C stops at once
(interruptible), the private folder for temporary copies (scratch), values for JSON (jsonable),
text from a trace encoded for the sink it is written to (sinks)."""
