"""What a put awaits: its completion, the offsets it waits for (flushed, acknowledged), its
deadline."""
