"""What reads the stream: reconstruction strategies and service, scorer, trainer client, replay
and export (issues 5 and 7)."""
